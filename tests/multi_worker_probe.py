"""A few SGD steps of global-batch losses on MultiWorkerMirroredStrategy, or on one process.

    python -m tests.multi_worker_probe single OUT.npz
    python -m tests.multi_worker_probe worker INDEX PORT0,PORT1 OUT.npz

A worker sets TF_CONFIG for two workers on 127.0.0.1 (before TensorFlow starts) and trains on
its share of every global batch (Keras splits each batch across the workers); `single` trains
the same model on the same global batches in one process. Both write the final weights.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MODE = sys.argv[1]
if MODE == "worker":
    INDEX, PORTS, OUT = int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in PORTS]},
            "task": {"type": "worker", "index": INDEX},
        }
    )
else:
    OUT = sys.argv[2]

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tf_svmax import losses  # noqa: E402

GLOBAL_BATCH, STEPS = 32, 3


def main():
    if MODE == "worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((GLOBAL_BATCH * STEPS, 6)).astype(np.float32)
    y = np.repeat(np.arange(GLOBAL_BATCH * STEPS // 4), 4).astype(np.int64)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    options = tf.data.Options()
    # Each global batch is split across the workers in order (worker 0 takes the first half);
    # DATA sharding after Keras' rebatching, which is what AUTO falls back to for in-memory data.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((6,)),
                keras.layers.Dense(4, kernel_initializer=keras.initializers.GlorotNormal(seed=1)),
                keras.layers.UnitNormalization(),
            ]
        )
        model.compile(
            keras.optimizers.SGD(0.5),
            loss=losses.RegularizedLoss(
                losses.TripletSemiHardLoss(margin=0.2), [losses.SVMaxLoss(lambda_=1.0)]
            ),
        )
    loss_fn, optimizer = model.loss, model.optimizer
    initial = [w.copy() for w in model.get_weights()]

    @tf.function
    def train_step(batch):
        def replica_gradients(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            return loss, tape.gradient(loss, model.trainable_variables)

        # Summed over the replicas, as Keras' fit() sums them (one reduce per tensor: a nested
        # reduce fails on this strategy), and applied once, in cross-replica context.
        loss, gradients = strategy.run(replica_gradients, args=batch)
        loss = strategy.reduce("SUM", loss, axis=None)
        gradients = [strategy.reduce("SUM", g, axis=None) for g in gradients]
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    # Keras 3's fit() does not run on MultiWorkerMirroredStrategy (keras-team/keras#20585: its
    # first-batch build reduces a nested PerReplica), so the steps are a plain custom loop.
    values = [
        float(train_step(batch)) for batch in strategy.experimental_distribute_dataset(dataset)
    ]
    moved = max(
        float(np.abs(w - w0).max()) for w, w0 in zip(model.get_weights(), initial, strict=True)
    )
    np.savez(OUT, *model.get_weights(), loss=np.float64(values), moved=np.float64(moved))


if __name__ == "__main__":
    main()
