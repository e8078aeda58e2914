"""One SGD step per batch-level loss under MirroredStrategy vs. one device on the same batch.

Run as ``python -m tests.distributed_probe`` (a fresh process: logical CPU devices must be
configured before TensorFlow initializes). One process builds a 2- and a 4-replica strategy over
its 4 logical CPUs and compares both with the same one-device runs, which it computes once.
Prints one JSON line, per replica count: for each case the largest weight difference after the
step(s), the evaluate() values, the per-replica (opt-out) comparison, and how often the replicas'
step called the loss's `reference_parts` or its `call` with reference rows (the replica split of
the losses that split anchors; 0 for the others).
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPLICA_COUNTS = (2, 4)
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * max(REPLICA_COUNTS)
)

from tf_svmax import losses, metrics, models, regularizers  # noqa: E402

GLOBAL_BATCH = 32


def mirrored(replicas):
    """A MirroredStrategy over the first `replicas` logical CPUs. Each strategy numbers its
    collective groups and instances from its class' `_collective_key_base` ("only set this in
    tests", TensorFlow's own test strategies move it by 100000 per strategy): two strategies
    over different devices would otherwise hand the same group key to different device groups
    in one process."""
    tf.distribute.MirroredStrategy._collective_key_base = 100000 * replicas
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])


STRATEGIES = {replicas: mirrored(replicas) for replicas in REPLICA_COUNTS}
DEFAULT = tf.distribute.get_strategy()
rng = np.random.default_rng(0)
INPUTS = rng.standard_normal((GLOBAL_BATCH + 3, 6)).astype(np.float32)


def labels_for(k):
    """P x K labels (classes in blocks of k), 35 rows: a 32-row batch then a 3-row remainder of
    two classes (its last row a class of its own), so that the remainder's step has pairs of
    either kind: of one class it would give the losses that need a negative (spread-out) no
    step to compare."""
    labels = np.repeat(np.arange(GLOBAL_BATCH // k + 2), k)[: GLOBAL_BATCH + 3]
    labels[-1] = labels[-2] + 1
    return labels.astype(np.int64)


def dense(units=4, **kwargs):
    return keras.layers.Dense(
        units, kernel_initializer=keras.initializers.GlorotNormal(seed=1), **kwargs
    )


def embedding_model(normalize=True, activity_regularizer=None):
    layers = [keras.Input((6,)), dense(activity_regularizer=activity_regularizer)]
    if normalize:
        layers.append(keras.layers.UnitNormalization())
    return keras.Sequential(layers)


def proxy_model():
    return keras.Sequential([keras.Input((6,)), dense(), models.CosineProxies(10)])


def xml_model():
    """Embeddings (4, unit rows) with 3 histogram columns appended, as `XMLLoss` takes them."""
    inputs = keras.Input((6,))
    embeddings = keras.layers.UnitNormalization()(dense()(inputs))
    histograms = keras.layers.Softmax()(dense(3)(inputs))
    return keras.Model(inputs, keras.layers.Concatenate()([embeddings, histograms]))


# name -> (make model, make loss(global_batch), K of the P x K labels)
CASES = {
    "svmax": (embedding_model, lambda g: losses.SVMaxLoss(global_batch=g), 4),
    "svmax_unbounded": (
        embedding_model,
        lambda g: losses.SVMaxLoss(bounded=False, global_batch=g),
        4,
    ),
    "ole": (
        lambda: embedding_model(normalize=False),
        lambda g: losses.OLELoss(global_batch=g),
        4,
    ),
    "triplet_semihard": (
        embedding_model,
        lambda g: losses.TripletSemiHardLoss(global_batch=g),
        4,
    ),
    "triplet_hard": (embedding_model, lambda g: losses.TripletHardLoss(global_batch=g), 4),
    "batch_hard": (embedding_model, lambda g: losses.BatchHardTripletLoss(global_batch=g), 4),
    "lifted_struct": (embedding_model, lambda g: losses.LiftedStructLoss(global_batch=g), 4),
    "pk_contrastive": (embedding_model, lambda g: losses.PKContrastiveLoss(global_batch=g), 4),
    "pk_npair": (
        lambda: embedding_model(normalize=False),
        lambda g: losses.PKNpairLoss(global_batch=g),
        2,
    ),
    "pk_angular": (
        lambda: embedding_model(normalize=False),
        lambda g: losses.PKAngularLoss(global_batch=g),
        2,
    ),
    "spread_out": (embedding_model, lambda g: losses.SpreadOutLoss(seed=3, global_batch=g), 4),
    "proxy_anchor": (proxy_model, lambda g: losses.ProxyAnchorLoss(global_batch=g), 4),
    "center": (
        lambda: embedding_model(normalize=False),
        lambda g: losses.CenterLoss(10, 4, lambda_=0.5, seed=0, global_batch=g),
        4,
    ),
    "regularized_pk_contrastive_svmax": (
        embedding_model,
        lambda g: losses.RegularizedLoss(
            losses.PKContrastiveLoss(global_batch=g), [losses.SVMaxLoss(global_batch=g)]
        ),
        4,
    ),
    # XML's two halves (disjoint classes) are the global batch's: on 2 replicas each replica's
    # own rows would be one half, and a per-replica split another loss.
    "xml": (
        xml_model,
        lambda g: losses.XMLLoss(
            losses.TripletHardLoss(), num_prototypes=3, lambda_=0.5, global_batch=g
        ),
        4,
    ),
    "svmax_regularizer": (
        lambda: embedding_model(
            activity_regularizer=regularizers.SVMaxRegularizer(lambda_=20.0, global_batch=True)
        ),
        lambda g: losses.SVMaxLoss(lambda_=0.0, global_batch=g),
        4,
    ),
}


def counting_split_calls(loss):
    """A one-item list counting the loss's computations on a replica's anchors against the
    global batch (the path a loss that splits anchors takes under a strategy): calls of its
    `reference_parts` (a batch-level loss) or of its `call` with the reference rows (a
    per-sample one), wrapped by instance attributes."""
    calls = [0]

    def counting(method, split):
        def counted(*args, **kwargs):
            calls[0] += split(kwargs)
            return method(*args, **kwargs)

        return counted

    if hasattr(loss, "reference_parts"):  # not the center loss
        loss.reference_parts = counting(loss.reference_parts, lambda kwargs: 1)
    loss.call = counting(loss.call, lambda kwargs: int("ref_embeddings" in kwargs))
    return calls


def train(strategy, case, global_batch, rows, evaluate=True):
    """One epoch of `rows` rows in 32-row batches: the weights (and center-loss centers) after
    the first step and after the last, how far each moved the weights from the start, and,
    when `evaluate`, evaluate()'s loss and s_mu metrics on the first 32 rows right after the
    first step. A 35-row epoch is the 32-row step then the 3-row remainder's: one fit, its step
    traced once, gives both. "calls" counts the computations on a replica's anchors against
    the global batch in the traced training steps (evaluate()'s own excluded): "first" by the
    end of the first step, "all" by the end of the epoch."""
    make_model, make_loss, k = CASES[case]
    y = labels_for(k)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = make_model()
        loss = make_loss(global_batch)
        calls = counting_split_calls(loss)
        model.compile(
            keras.optimizers.SGD(0.5),
            loss=loss,
            metrics=metrics.svmax_metrics() if case == "svmax" else None,
        )

    def snapshot():
        weights = [w.copy() for w in model.get_weights()]
        centers = [loss.centers.numpy().copy()] if case == "center" else []
        return weights, weights + centers

    run = {"logs": None}

    class AfterFirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch != 0:
                return
            run["first_weights"], run["first"] = snapshot()
            run["calls"] = {"first": calls[0]}
            if evaluate:
                before = calls[0]
                run["logs"] = model.evaluate(
                    INPUTS[:GLOBAL_BATCH],
                    y[:GLOBAL_BATCH],
                    batch_size=GLOBAL_BATCH,
                    verbose=0,
                    return_dict=True,
                )
                calls[0] = before  # evaluate()'s traced calls are no training step's

    initial = [w.copy() for w in model.get_weights()]
    model.fit(
        INPUTS[:rows],
        y[:rows],
        batch_size=GLOBAL_BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[AfterFirstStep()],
    )
    last_weights, run["last"] = snapshot()
    run["calls"]["all"] = calls[0]
    # How far the step(s) moved the weights: the scale the errors are compared with.
    run["first_moved"] = max_difference(initial, run["first_weights"])
    run["last_moved"] = max_difference(initial, last_weights)
    return run


def max_difference(a, b):
    return float(max(np.abs(x - y).max() for x, y in zip(a, b, strict=True)))


def per_replica_reference(case, replicas):
    """One device, the loss averaged over the replicas' slices of the batch (the opt-out)."""
    make_model, make_loss, k = CASES[case]
    y = labels_for(k)
    keras.utils.set_random_seed(0)
    model = make_model()
    base = make_loss(False)
    per = GLOBAL_BATCH // replicas

    def sliced(y_true, y_pred):
        parts = [
            base(y_true[i * per : (i + 1) * per], y_pred[i * per : (i + 1) * per])
            for i in range(replicas)
        ]
        return tf.add_n(parts) / replicas

    model.compile(keras.optimizers.SGD(0.5), loss=sliced)
    model.fit(
        INPUTS[:GLOBAL_BATCH],
        y[:GLOBAL_BATCH],
        batch_size=GLOBAL_BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
    )
    return model.get_weights()


# P x K losses refuse a remainder batch (it is not P x K); they get no uneven run. Nor does XML:
# the 3-row remainder holds one class, so one of its halves would be empty.
WHOLE_BATCHES_ONLY = (
    "pk_contrastive",
    "pk_npair",
    "pk_angular",
    "regularized_pk_contrastive_svmax",
    "xml",
)


def per_row_values_error(strategy):
    """`reduction="none"` on the global batch: each replica returns its own rows' values,
    which concatenated in replica order are the one-device values."""
    loss = losses.BatchHardTripletLoss(reduction="none")
    x = tf.math.l2_normalize(INPUTS[:GLOBAL_BATCH, :4], axis=1)
    y = labels_for(4)[:GLOBAL_BATCH]
    per = GLOBAL_BATCH // strategy.num_replicas_in_sync

    def shard(context):
        rows = slice(
            context.replica_id_in_sync_group * per, (context.replica_id_in_sync_group + 1) * per
        )
        return y[rows], x[rows]

    values = strategy.run(
        tf.function(lambda y_r, x_r: loss(y_r, x_r)),
        args=strategy.experimental_distribute_values_from_function(shard),
    )
    gathered = np.concatenate([v.numpy() for v in strategy.experimental_local_results(values)])
    return float(np.abs(gathered - loss(y, x).numpy()).max())


def center_opt_out(strategy):
    """The center loss' refusal of per-replica centers, as fit surfaces it. (Seeded centers:
    Keras' global seed generator is a variable of the strategy that first drew from it.)"""
    with strategy.scope():
        model = embedding_model(normalize=False)
        model.compile("sgd", loss=losses.CenterLoss(10, 4, seed=0, global_batch=False))
    try:
        model.fit(INPUTS[:GLOBAL_BATCH], labels_for(4)[:GLOBAL_BATCH], verbose=0)
        return "no error"
    except ValueError as error:  # the refusal surfaces from inside fit
        return str(error)


def main():
    out = {replicas: {"replicas": replicas, "cases": {}} for replicas in STRATEGIES}
    for case in CASES:
        # The capability the split follows (`LabelLoss.splits_anchors`), as the loss declares it.
        splits = bool(getattr(CASES[case][1](True), "splits_anchors", False))
        uneven = case not in WHOLE_BATCHES_ONLY
        rows = GLOBAL_BATCH + 3 if uneven else GLOBAL_BATCH
        # The one-device reference, shared by both replica counts. evaluate() is compared once
        # per case (after the even step); the uneven step checks the step on a remainder batch.
        single = train(DEFAULT, case, True, rows)
        for replicas, strategy in STRATEGIES.items():
            many = train(strategy, case, True, rows)
            row = {
                "splits_anchors": splits,
                "even_split_calls": many["calls"]["first"],
                "even_weight_error": max_difference(single["first"], many["first"]),
                "even_step": single["first_moved"],
                "even_logs": {"single": single["logs"], "replicas": many["logs"]},
            }
            if uneven:
                row["uneven_split_calls"] = many["calls"]["all"]
                row["uneven_weight_error"] = max_difference(single["last"], many["last"])
                row["uneven_step"] = single["last_moved"]
                # the remainder's own step, from the even step's weights (centers included)
                row["remainder_step"] = max_difference(single["first"], single["last"])
            # Not compared with a one-device reference: the center loss refuses the opt-out
            # under a strategy, the regularizer has no loss-level opt-out, and spread-out draws
            # its random negatives per replica.
            if case not in ("center", "svmax_regularizer", "spread_out"):
                opt_out = train(strategy, case, False, GLOBAL_BATCH, evaluate=False)["last"]
                row["opt_out_vs_per_replica"] = max_difference(
                    opt_out, per_replica_reference(case, replicas)
                )
                # The one-device global-batch step of the same 32 rows: the even step's.
                row["opt_out_vs_global"] = max_difference(opt_out, single["first"][: len(opt_out)])
            out[replicas]["cases"][case] = row
            print(replicas, case, json.dumps(row), file=sys.stderr, flush=True)
    for replicas, strategy in STRATEGIES.items():
        out[replicas]["per_row_error"] = per_row_values_error(strategy)
        out[replicas]["center_opt_out"] = center_opt_out(strategy)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
