"""Computes tensorflow-addons' metric-learning loss values and gradients on generated inputs.

Runs in the legacy environment (tensorflow-cpu==2.15.1 + tensorflow-addons==0.23.0, Keras 2),
NOT in the main one: `.ci/run` builds that environment and runs

    <legacy venv>/bin/python tests/parity/generate_tfa_reference.py OUTPUT.npz

The main test suite (tests/losses/test_tfa_parity.py) recomputes every case with tf_svmax on
the stored inputs and compares. This file imports only numpy, tensorflow and
tensorflow_addons, never tf_svmax.
"""

import json
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow_addons as tfa

SEED = 20261122


def _unit(rng, b, d):
    x = rng.standard_normal((b, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _labels(rng, kind):
    if kind == "pk":
        return np.repeat(np.arange(8), 4).astype(np.int32)
    if kind == "random":
        labels = rng.integers(0, 6, size=20).astype(np.int32)
        labels[:2] = labels[0]  # at least one positive pair
        return labels
    if kind == "one_class":
        return np.zeros(8, np.int32)
    if kind == "singletons":
        return np.arange(8, dtype=np.int32)
    raise ValueError(kind)


_METRICS = {
    "L2": "L2",
    "squared-L2": "squared-L2",
    "angular": "angular",
    "dot": lambda x: tf.linalg.matmul(x, x, transpose_b=True),
}


def _value_and_grad(fn, x, *args):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = fn(x, *args)
    grad = tape.gradient(value, x)
    return value.numpy(), grad.numpy()


def build_cases():
    rng = np.random.default_rng(SEED)
    cases, arrays = [], {}

    def add(name, spec, **data):
        cases.append({"name": name, **spec})
        for key, value in data.items():
            arrays[f"{name}:{key}"] = np.asarray(value)

    # Triplet losses on every label layout, metric and margin.
    for labels_kind in ("pk", "random", "one_class"):
        labels = _labels(rng, labels_kind)
        x = _unit(rng, len(labels), 16)
        for metric in _METRICS:
            for margin in (1.0, 0.2):
                spec = {"fn": "triplet_semihard_loss", "margin": margin, "metric": metric}
                value, grad = _value_and_grad(
                    lambda e: tfa.losses.triplet_semihard_loss(labels, e, margin, _METRICS[metric]),
                    x,
                )
                add(
                    f"semihard/{labels_kind}/{metric}/{margin}",
                    spec,
                    labels=labels,
                    x=x,
                    value=value,
                    grad=grad,
                )
                for soft in (False, True):
                    spec = {
                        "fn": "triplet_hard_loss",
                        "margin": margin,
                        "metric": metric,
                        "soft": soft,
                    }
                    value, grad = _value_and_grad(
                        lambda e: tfa.losses.triplet_hard_loss(
                            labels, e, margin, soft, _METRICS[metric]
                        ),
                        x,
                    )
                    add(
                        f"hard/{labels_kind}/{metric}/{margin}/{soft}",
                        spec,
                        labels=labels,
                        x=x,
                        value=value,
                        grad=grad,
                    )
        for margin in (1.0, 0.5):
            spec = {"fn": "lifted_struct_loss", "margin": margin}
            value, grad = _value_and_grad(
                lambda e: tfa.losses.lifted_struct_loss(labels, e, margin), x
            )
            add(f"lifted/{labels_kind}/{margin}", spec, labels=labels, x=x, value=value, grad=grad)

    # Unnormalized embeddings (larger distances) for the triplet and lifted losses.
    labels = _labels(rng, "pk")
    x = (3.0 * rng.standard_normal((len(labels), 16))).astype(np.float32)
    for fn_name, fn in (
        ("triplet_semihard_loss", tfa.losses.triplet_semihard_loss),
        ("triplet_hard_loss", tfa.losses.triplet_hard_loss),
        ("lifted_struct_loss", tfa.losses.lifted_struct_loss),
    ):
        value, grad = _value_and_grad(lambda e: fn(labels, e), x)
        add(
            f"unnormalized/{fn_name}",
            {"fn": fn_name, "margin": 1.0, "metric": "L2", "soft": False},
            labels=labels,
            x=x,
            value=value,
            grad=grad,
        )

    # Exact ties: embeddings on an integer grid, rows repeated across classes. TFA's masked
    # max/min split the gradient among tied entries; ours must split it the same way. (The
    # lifted loss is left out: at ties TFA's gradient is not the loss's gradient, see lifted.py.)
    tie_labels = np.repeat(np.arange(6), 3).astype(np.int32)
    grid = rng.integers(-2, 3, size=(6, 3)).astype(np.float32)
    x = grid[rng.integers(0, 6, size=18)]
    for metric in ("L2", "squared-L2"):
        for fn_name, fn in (
            ("triplet_semihard_loss", tfa.losses.triplet_semihard_loss),
            ("triplet_hard_loss", tfa.losses.triplet_hard_loss),
        ):
            value, grad = _value_and_grad(
                lambda e: fn(tie_labels, e, 1.0, distance_metric=metric), x
            )
            add(
                f"ties/{fn_name}/{metric}",
                {"fn": fn_name, "margin": 1.0, "metric": metric, "soft": False},
                labels=tie_labels,
                x=x,
                value=value,
                grad=grad,
            )

    # A larger batch with many tied distances (rows repeated within and across classes, on a
    # coarse grid): the O(b^2) semi-hard search must pick TFA's negatives and split the
    # gradient among ties as TFA's b x b x b formulation does.
    big_labels = rng.integers(0, 24, size=192).astype(np.int32)
    big_grid = rng.choice([-2.0, -1.0, 1.0, 2.0], size=(40, 4)).astype(np.float32)  # no zero row
    big_x = big_grid[rng.integers(0, 40, size=192)]
    big_x[::3] = _unit(rng, 64, 4)
    for metric in ("L2", "squared-L2", "angular"):
        for margin in (1.0, 0.2):
            value, grad = _value_and_grad(
                lambda e: tfa.losses.triplet_semihard_loss(big_labels, e, margin, metric), big_x
            )
            add(
                f"large_ties/triplet_semihard_loss/{metric}/{margin}",
                {"fn": "triplet_semihard_loss", "margin": margin, "metric": metric},
                labels=big_labels,
                x=big_x,
                value=value,
                grad=grad,
            )

    # Near-duplicate rows, where the Gram expansion cancels and rounding order matters.
    x = _unit(rng, 16, 8)
    x[9] = x[3] + 1e-3 * rng.standard_normal(8).astype(np.float32)
    near_labels = np.repeat(np.arange(4), 4).astype(np.int32)
    for fn_name, fn in (
        ("triplet_hard_loss", tfa.losses.triplet_hard_loss),
        ("lifted_struct_loss", tfa.losses.lifted_struct_loss),
    ):
        value, grad = _value_and_grad(lambda e: fn(near_labels, e), x)
        add(
            f"near_duplicates/{fn_name}",
            {"fn": fn_name, "margin": 1.0, "metric": "L2", "soft": False},
            labels=near_labels,
            x=x,
            value=value,
            grad=grad,
        )

    # Half precision: TFA computes in float32 and casts back.
    x16 = _unit(rng, 32, 16).astype(np.float16)
    for fn_name, fn in (
        ("triplet_semihard_loss", tfa.losses.triplet_semihard_loss),
        ("triplet_hard_loss", tfa.losses.triplet_hard_loss),
        ("lifted_struct_loss", tfa.losses.lifted_struct_loss),
    ):
        value = fn(labels, tf.constant(x16))
        add(
            f"float16/{fn_name}",
            {
                "fn": fn_name,
                "margin": 1.0,
                "metric": "L2",
                "soft": False,
                "dtype": value.dtype.name,
            },
            labels=labels,
            x=x16,
            value=value.numpy(),
        )

    # Edge layouts where TFA is defined or not (stored as TFA computes them, NaN included).
    for labels_kind in ("one_class", "singletons"):
        labels = _labels(rng, labels_kind)
        x = _unit(rng, len(labels), 4)
        for fn_name, fn in (
            ("triplet_semihard_loss", tfa.losses.triplet_semihard_loss),
            ("triplet_hard_loss", tfa.losses.triplet_hard_loss),
            ("lifted_struct_loss", tfa.losses.lifted_struct_loss),
        ):
            add(
                f"edge/{labels_kind}/{fn_name}",
                {"fn": fn_name, "edge": True},
                labels=labels,
                x=x,
                value=fn(labels, x).numpy(),
            )

    # Contrastive loss: per-pair values, the class's default reduction, sample weights.
    y = rng.integers(0, 2, size=24).astype(np.int32)
    d = rng.uniform(0.0, 2.0, size=24).astype(np.float32)
    w = rng.uniform(0.0, 2.0, size=24).astype(np.float32)
    for margin in (1.0, 0.5):
        value, grad = _value_and_grad(lambda p: tfa.losses.contrastive_loss(y, p, margin), d)
        grad_mean = _value_and_grad(lambda p: tfa.losses.ContrastiveLoss(margin)(y, p), d)
        weighted = tfa.losses.ContrastiveLoss(margin)(y, d, sample_weight=w).numpy()
        add(
            f"contrastive/{margin}",
            {"fn": "contrastive_loss", "margin": margin},
            labels=y,
            x=d,
            value=value,
            grad=grad,
            class_value=grad_mean[0],
            class_grad=grad_mean[1],
            weights=w,
            weighted_value=weighted,
        )

    # N-pair losses on similarity matrices.
    for labels_kind in ("pk", "random"):
        labels = _labels(rng, labels_kind)
        logits = (rng.standard_normal((len(labels), len(labels))) * 2).astype(np.float32)
        value, grad = _value_and_grad(lambda s: tfa.losses.npairs_loss(labels, s), logits)
        add(
            f"npairs/{labels_kind}",
            {"fn": "npairs_loss"},
            labels=labels,
            x=logits,
            value=value,
            grad=grad,
        )
    multi = (rng.uniform(size=(16, 5)) < 0.35).astype(np.float32)
    multi[np.arange(16), rng.integers(0, 5, size=16)] = 1.0  # every sample has a label
    logits = rng.standard_normal((16, 16)).astype(np.float32)
    value, grad = _value_and_grad(lambda s: tfa.losses.npairs_multilabel_loss(multi, s), logits)
    add(
        "npairs_multilabel/dense",
        {"fn": "npairs_multilabel_loss"},
        labels=multi,
        x=logits,
        value=value,
        grad=grad,
    )

    # Distance matrices (with duplicated rows), through the gradient of a weighted sum.
    x = _unit(rng, 12, 8)
    x[5] = x[2]
    weights = rng.standard_normal((12, 12)).astype(np.float32)
    for name, fn in (
        ("pairwise", lambda e: tfa.losses.metric_learning.pairwise_distance(e)),
        (
            "pairwise_squared",
            lambda e: tfa.losses.metric_learning.pairwise_distance(e, squared=True),
        ),
        ("angular", lambda e: tfa.losses.metric_learning.angular_distance(e)),
    ):
        matrix = fn(tf.constant(x)).numpy()
        _, grad = _value_and_grad(lambda e: tf.reduce_sum(fn(e) * weights), x)
        add(f"distance/{name}", {"fn": name}, x=x, value=matrix, grad=grad, weights=weights)
    return cases, arrays


# Client patterns: tfa.losses used as real projects use them (issue 46), each from stored
# initial weights with plain SGD, so that tests/losses/test_tfa_client_patterns.py replays the
# same program on Keras 3 with tf_svmax and compares every step.
CLIENT_SEED = 20261126
CLIENT_LEARNING_RATE = 0.1
BATCH = 8


def _net(seed, head_units=4, head_activation=None, normalize=True):
    """Input(6) -> Dense(8, tanh) -> Dense(head_units) [-> UnitNormalization].

    tanh, not relu: a ReLU layer this small often leaves one unit active, and such rows
    normalize to the same embedding, exact ties between different classes that TFA resolves
    by its matmul's rounding (test_tfa_parity.py covers ties on purpose, not these)."""
    tf.keras.utils.set_random_seed(seed)
    layers = [
        tf.keras.Input((6,)),
        tf.keras.layers.Dense(8, activation="tanh"),
        tf.keras.layers.Dense(head_units, activation=head_activation),
    ]
    if normalize:
        layers.append(tf.keras.layers.UnitNormalization())
    return tf.keras.Sequential(layers)


def _weights(arrays, prefix, model):
    for i, weight in enumerate(model.get_weights()):
        arrays[f"{prefix}/{i}"] = weight


class SupervisedContrastiveLoss(tf.keras.losses.Loss):
    """keras.io's "Supervised Contrastive Learning" example's loss, as written there."""

    def __init__(self, temperature=1, name=None):
        super().__init__(name=name)
        self.temperature = temperature

    def __call__(self, labels, feature_vectors, sample_weight=None):
        # Normalize feature vectors
        feature_vectors_normalized = tf.math.l2_normalize(feature_vectors, axis=1)
        # Compute logits
        logits = tf.divide(
            tf.matmul(feature_vectors_normalized, tf.transpose(feature_vectors_normalized)),
            self.temperature,
        )
        return tfa.losses.npairs_loss(tf.squeeze(labels), logits)


def _supcon(rng, arrays):
    """The SupCon loss called directly (value, gradient) and inside `fit` (one SGD step), on
    CIFAR-style uint8 labels of shape [b, 1]."""
    labels = rng.permutation(np.repeat(np.arange(4), 4)).astype(np.uint8).reshape(-1, 1)
    features = rng.standard_normal((16, 4)).astype(np.float32)
    loss = SupervisedContrastiveLoss(temperature=0.1)
    value, grad = _value_and_grad(lambda f: loss(tf.constant(labels), f), features)
    model = _net(CLIENT_SEED, normalize=False)
    _weights(arrays, "client/supcon:initial", model)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    model.compile(tf.keras.optimizers.SGD(CLIENT_LEARNING_RATE), loss=loss)
    history = model.fit(x, labels, batch_size=16, epochs=1, shuffle=False, verbose=0)
    _weights(arrays, "client/supcon:step", model)
    arrays.update(
        {
            "client/supcon:labels": labels,
            "client/supcon:features": features,
            "client/supcon:value": value,
            "client/supcon:grad": grad,
            "client/supcon:x": x,
            "client/supcon:fit_loss": np.float32(history.history["loss"][0]),
        }
    )
    return {"name": "supcon", "temperature": 0.1, "weights": len(model.get_weights())}


COMPILED_FUNCTIONS = (
    "triplet_semihard_loss",
    "triplet_hard_loss",
    "lifted_struct_loss",
    "contrastive_loss",
)


def _compile_save_load(rng, arrays, name, tmp):
    """`compile(loss=<function>)`, one `fit` step, `.h5` saved and loaded, one more step."""
    fn = getattr(tfa.losses, name)
    contrastive = name == "contrastive_loss"
    model = (
        _net(CLIENT_SEED + 1, 1, "softplus", normalize=False)
        if contrastive
        else _net(CLIENT_SEED + 1)
    )
    prefix = f"client/compile_h5/{name}"
    _weights(arrays, f"{prefix}:initial", model)
    model.compile(tf.keras.optimizers.SGD(CLIENT_LEARNING_RATE), loss=fn)
    losses = []
    for step in range(2):
        x = rng.standard_normal((BATCH, 6)).astype(np.float32)
        if contrastive:
            y = rng.integers(0, 2, size=BATCH).astype(np.float32)
        else:
            y = rng.permutation(np.repeat(np.arange(BATCH // 2), 2)).astype(np.int32)
        history = model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        losses.append(history.history["loss"][0])
        _weights(arrays, f"{prefix}:step{step}", model)
        arrays[f"{prefix}:x{step}"], arrays[f"{prefix}:y{step}"] = x, y
        if step == 0:
            path = os.path.join(tmp, f"{name}.h5")
            model.save(path)
            model = tf.keras.models.load_model(path, custom_objects={name: fn})
    arrays[f"{prefix}:losses"] = np.asarray(losses, np.float32)
    return {"name": f"compile_h5/{name}", "fn": name, "weights": len(model.get_weights())}


TAPE_FUNCTIONS = ("contrastive_loss", "npairs_loss", "triplet_hard_loss", "triplet_semihard_loss")
TAPE_STEPS = 3


def _tape_loss(name, model, batch):
    """The custom loop's loss: Siamese distances for the contrastive loss, anchor x positive
    logits for the N-pair loss, embeddings for the triplet losses."""
    fn = getattr(tfa.losses, name)
    if name == "contrastive_loss":
        left, right = model(batch["x"], training=True), model(batch["x2"], training=True)
        distances = tf.norm(left - right, axis=1)
        return tf.reduce_mean(fn(batch["y"], distances))
    if name == "npairs_loss":
        anchors, positives = model(batch["x"], training=True), model(batch["x2"], training=True)
        return fn(batch["y"], tf.matmul(anchors, positives, transpose_b=True))
    return fn(batch["y"], model(batch["x"], training=True))


def _gradient_tape_loop(rng, arrays, name):
    model = _net(CLIENT_SEED + 2)
    prefix = f"client/tape/{name}"
    _weights(arrays, f"{prefix}:initial", model)
    optimizer = tf.keras.optimizers.SGD(CLIENT_LEARNING_RATE)
    losses = []
    for step in range(TAPE_STEPS):
        batch = {
            "x": rng.standard_normal((BATCH, 6)).astype(np.float32),
            "x2": rng.standard_normal((BATCH, 6)).astype(np.float32),
            "y": (
                rng.integers(0, 2, size=BATCH).astype(np.float32)
                if name == "contrastive_loss"
                else rng.permutation(np.repeat(np.arange(BATCH // 2), 2)).astype(np.int32)
            ),
        }
        with tf.GradientTape() as tape:
            value = _tape_loss(name, model, batch)
        gradients = tape.gradient(value, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        losses.append(float(value))
        for key, array in batch.items():
            arrays[f"{prefix}:{key}{step}"] = array
    _weights(arrays, f"{prefix}:final", model)
    arrays[f"{prefix}:losses"] = np.asarray(losses, np.float32)
    return {
        "name": f"tape/{name}",
        "fn": name,
        "steps": TAPE_STEPS,
        "weights": len(model.get_weights()),
    }


SGDW = {"learning_rate": 0.1, "weight_decay": 0.01, "momentum": 0.9, "steps": 3}


def _sgdw(rng, arrays):
    """tfa.optimizers.SGDW on a quadratic, the decay the migration guide converts."""
    w = tf.Variable(rng.standard_normal(5).astype(np.float32))
    arrays["client/sgdw:initial"] = w.numpy()
    target = rng.standard_normal(5).astype(np.float32)
    arrays["client/sgdw:target"] = target
    optimizer = tfa.optimizers.SGDW(
        weight_decay=SGDW["weight_decay"],
        learning_rate=SGDW["learning_rate"],
        momentum=SGDW["momentum"],
    )
    for _ in range(SGDW["steps"]):
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(tf.square(w - target))
        optimizer.apply_gradients([(tape.gradient(value, w), w)])
    arrays["client/sgdw:final"] = w.numpy()
    return {"name": "sgdw", **SGDW}


def client_patterns():
    """``(meta, arrays)`` of the client patterns (own seed: the cases above are unchanged)."""
    rng = np.random.default_rng(CLIENT_SEED)
    arrays, meta = {}, []
    meta.append(_supcon(rng, arrays))
    with tempfile.TemporaryDirectory() as tmp:
        for name in COMPILED_FUNCTIONS:
            meta.append(_compile_save_load(rng, arrays, name, tmp))
    for name in TAPE_FUNCTIONS:
        meta.append(_gradient_tape_loop(rng, arrays, name))
    meta.append(_sgdw(rng, arrays))
    return {"learning_rate": CLIENT_LEARNING_RATE, "patterns": meta}, arrays


# The metric-learning loss classes of tfa.losses, whose defaults a drop-in must keep.
CLASSES = (
    "TripletSemiHardLoss",
    "TripletHardLoss",
    "ContrastiveLoss",
    "NpairsLoss",
    "NpairsMultilabelLoss",
    "LiftedStructLoss",
)


def class_defaults():
    """``{class: get_config() of a default instance}`` (name, reduction, hyperparameters)."""
    out = {}
    for name in CLASSES:
        config = getattr(tfa.losses, name)().get_config()
        out[name] = {
            k: v if isinstance(v, (str, int, float, bool)) or v is None else str(v)
            for k, v in config.items()
        }
    return out


def main(path):
    cases, arrays = build_cases()
    clients, client_arrays = client_patterns()
    arrays.update(client_arrays)
    meta = {
        "tensorflow": tf.__version__,
        "tensorflow_addons": tfa.__version__,
        "seed": SEED,
        "cases": cases,
        "class_defaults": class_defaults(),
        "clients": clients,
    }
    np.savez_compressed(path, __meta__=np.array(json.dumps(meta)), **arrays)
    print(
        f"wrote {len(cases)} tensorflow-addons reference cases to {path} "
        f"(TF {tf.__version__}, TFA {tfa.__version__})"
    )


if __name__ == "__main__":
    main(sys.argv[1])
