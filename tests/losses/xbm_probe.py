"""CrossBatchMemory under MirroredStrategy (2 logical CPUs) vs. one device: three SGD steps.

Run as ``python -m tests.losses.xbm_probe`` (a fresh process: logical devices must be set before
TensorFlow initializes). Prints one JSON line per case: the largest weight and memory
differences, whether the labels and both replicas' copies agree, and the filled count.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from tf_svmax import losses  # noqa: E402

STRATEGY = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
DEFAULT = tf.distribute.get_strategy()
rng = np.random.default_rng(0)
INPUTS = rng.standard_normal((24, 6)).astype(np.float32)
LABELS = (rng.integers(0, 4, 24) + 2**40).astype(np.int64)  # int64 beyond float32's integers
CASES = {
    "semihard": losses.TripletSemiHardLoss,
    "hard": losses.TripletHardLoss,
    "lifted": losses.LiftedStructLoss,
    "batch_hard": losses.BatchHardTripletLoss,
    "all_pairs_contrastive": losses.AllPairsContrastiveLoss,
}


def train(strategy, make):
    with strategy.scope():
        xbm = losses.CrossBatchMemory(make(), memory_size=12, start_step=1)
        model = keras.Sequential(
            [
                keras.Input((6,)),
                keras.layers.Dense(4, kernel_initializer=keras.initializers.GlorotNormal(seed=1)),
                keras.layers.UnitNormalization(),
                xbm.memory,
            ]
        )
        model.compile(keras.optimizers.SGD(0.5), loss=xbm)
    start = [w.numpy().copy() for w in model.trainable_weights]
    # 3 steps of 8 rows: a warm-up step, then 16 rows through a 12-row ring (wraps).
    model.fit(INPUTS, LABELS, batch_size=8, epochs=1, shuffle=False, verbose=0)
    weights = [w.numpy() for w in model.trainable_weights]
    step = max(np.abs(a - b).max() for a, b in zip(weights, start, strict=True))
    copies = [
        [c.numpy() for c in strategy.experimental_local_results(v.value)]
        for v in xbm.memory.weights
    ]
    return weights, xbm.memory, step, copies


out = {}
for case, make in CASES.items():
    one, one_memory, step, _ = train(DEFAULT, make)
    many, many_memory, _, copies = train(STRATEGY, make)
    out[case] = {
        "step": float(step),
        "weight_error": float(max(np.abs(a - b).max() for a, b in zip(one, many, strict=True))),
        "memory_error": float(
            np.abs(one_memory.embeddings.numpy() - many_memory.embeddings.numpy()).max()
        ),
        "labels_equal": bool(np.array_equal(one_memory.labels.numpy(), many_memory.labels.numpy())),
        "replicas_identical": all(len(c) == 2 and np.array_equal(c[0], c[1]) for c in copies),
        "filled": int(many_memory.filled.numpy()),
        "expected_filled": 12,
    }
print(json.dumps(out))
