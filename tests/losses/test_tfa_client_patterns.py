"""The drop-in claim tested the way clients use tensorflow-addons' losses (issue 46).

Each pattern is a small program that `tests/parity/generate_tfa_reference.py` ran with
`tfa.losses` in TF 2.15.1 + tensorflow-addons 0.23.0 from stored initial weights (plain SGD);
here the same program runs on Keras 3 with only the import and the loss calls changed, and
every loss value and every weight after every step must equal TFA's within the tolerances of
test_tfa_parity.py:

* keras.io's "Supervised Contrastive Learning" example: `npairs_loss(tf.squeeze(labels),
  logits)` inside a user's `keras.losses.Loss` (its `__call__`, and the same body as `call`)
  with CIFAR-style `uint8` labels of shape `[b, 1]`, called directly and inside `fit`;
* a loss function passed to `compile`, one `fit` step, the model saved and loaded as `.h5`,
  one more step;
* a custom `GradientTape` loop over `contrastive_loss`, `npairs_loss`, `triplet_hard_loss`
  and `triplet_semihard_loss`.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_svmax
from tests.losses.test_tfa_parity import REFERENCE, TOL

META = json.loads(str(REFERENCE["__meta__"]))
if "clients" not in META:  # pragma: no cover - a reference from before issue 46
    pytest.fail("The TFA reference has no client patterns: regenerate it (tests/parity).")
CLIENTS = META["clients"]
PATTERNS = {p["name"]: p for p in CLIENTS["patterns"]}
LEARNING_RATE = CLIENTS["learning_rate"]


def _get(key):
    return REFERENCE[f"client/{key}"]


def _initial(prefix, count):
    return [_get(f"{prefix}:initial/{i}") for i in range(count)]


def _assert_weights(model, prefix, count):
    weights = model.get_weights()
    assert len(weights) == count
    for i, weight in enumerate(weights):
        np.testing.assert_allclose(weight, _get(f"{prefix}/{i}"), **TOL)


def _net(weights, head_units=4, head_activation=None, normalize=True):
    """The generator's network: Input(6) -> Dense(8, tanh) -> Dense(head) [-> UnitNormalization],
    with TFA's run's initial weights."""
    layers = [
        keras.Input((6,)),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(head_units, activation=head_activation),
    ]
    if normalize:
        layers.append(keras.layers.UnitNormalization())
    model = keras.Sequential(layers)
    model.set_weights(weights)
    return model


# keras.io's loss with `tfa.losses.npairs_loss` replaced by `tf_svmax.losses.npairs_loss`.
class SupervisedContrastiveLoss(keras.losses.Loss):
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
        return tf_svmax.losses.npairs_loss(tf.squeeze(labels), logits)


class SupervisedContrastiveLossInCall(SupervisedContrastiveLoss):
    """The same body in `call`, as Keras 3's docs ask (Keras then casts the labels to float)."""

    __call__ = keras.losses.Loss.__call__

    def call(self, labels, feature_vectors):
        return SupervisedContrastiveLoss.__call__(self, labels, feature_vectors)


SUPCON_FORMS = [SupervisedContrastiveLoss, SupervisedContrastiveLossInCall]


@pytest.mark.parametrize("form", SUPCON_FORMS, ids=["__call__", "call"])
def test_supcon_loss_value_and_gradient_match_tfa(form):
    labels = _get("supcon:labels")
    assert labels.dtype == np.uint8 and labels.shape == (16, 1)
    loss = form(temperature=PATTERNS["supcon"]["temperature"])
    features = tf.constant(_get("supcon:features"))
    with tf.GradientTape() as tape:
        tape.watch(features)
        value = loss(tf.constant(labels), features)
    np.testing.assert_allclose(value.numpy(), _get("supcon:value"), **TOL)
    np.testing.assert_allclose(tape.gradient(value, features), _get("supcon:grad"), **TOL)


@pytest.mark.parametrize("form", SUPCON_FORMS, ids=["__call__", "call"])
def test_supcon_loss_in_fit_takes_tfas_step(form):
    count = PATTERNS["supcon"]["weights"]
    model = _net(_initial("supcon", count), normalize=False)
    model.compile(
        keras.optimizers.SGD(LEARNING_RATE),
        loss=form(temperature=PATTERNS["supcon"]["temperature"]),
    )
    history = model.fit(
        _get("supcon:x"), _get("supcon:labels"), batch_size=16, shuffle=False, verbose=0
    )
    np.testing.assert_allclose(history.history["loss"][0], _get("supcon:fit_loss"), **TOL)
    _assert_weights(model, "supcon:step", count)


COMPILED = sorted(p["fn"] for p in CLIENTS["patterns"] if p["name"].startswith("compile_h5/"))


@pytest.mark.parametrize("name", COMPILED)
def test_function_in_compile_saved_and_loaded_as_h5_trains_as_tfa(name, tmp_path):
    prefix = f"compile_h5/{name}"
    count = PATTERNS[prefix]["weights"]
    initial = _initial(prefix, count)
    if name == "contrastive_loss":
        model = _net(initial, 1, "softplus", normalize=False)
    else:
        model = _net(initial)
    fn = getattr(tf_svmax.losses, name)
    model.compile(keras.optimizers.SGD(LEARNING_RATE), loss=fn)
    losses = []
    for step in range(2):
        x, y = _get(f"{prefix}:x{step}"), _get(f"{prefix}:y{step}")
        history = model.fit(x, y, batch_size=len(x), shuffle=False, verbose=0)
        losses.append(history.history["loss"][0])
        _assert_weights(model, f"{prefix}:step{step}", count)
        if step == 0:
            path = tmp_path / f"{name}.h5"
            model.save(path)
            model = keras.saving.load_model(path)
            assert model.loss is fn
            # Keras 3.15's .h5 loader builds the restored optimizer for no variables (any
            # loss, as docs/guide/tfa-migration.md says): compile again with its
            # configuration.
            with pytest.raises(ValueError, match="Unknown variable"):
                model.train_on_batch(_get(f"{prefix}:x1"), _get(f"{prefix}:y1"))
            optimizer = keras.optimizers.SGD.from_config(model.optimizer.get_config())
            assert float(optimizer.learning_rate) == pytest.approx(LEARNING_RATE)
            model.compile(optimizer, loss=model.loss)
    np.testing.assert_allclose(losses, _get(f"{prefix}:losses"), **TOL)


TAPE = sorted(p["fn"] for p in CLIENTS["patterns"] if p["name"].startswith("tape/"))


def _tape_loss(name, model, batch):
    """The client loop's loss (as in the generator, with tf_svmax's functions)."""
    fn = getattr(tf_svmax.losses, name)
    if name == "contrastive_loss":
        left, right = model(batch["x"], training=True), model(batch["x2"], training=True)
        distances = tf.norm(left - right, axis=1)
        return tf.reduce_mean(fn(batch["y"], distances))
    if name == "npairs_loss":
        anchors, positives = model(batch["x"], training=True), model(batch["x2"], training=True)
        return fn(batch["y"], tf.matmul(anchors, positives, transpose_b=True))
    return fn(batch["y"], model(batch["x"], training=True))


def test_the_tape_loop_covers_the_four_functions():
    assert TAPE == ["contrastive_loss", "npairs_loss", "triplet_hard_loss", "triplet_semihard_loss"]


@pytest.mark.parametrize("name", TAPE)
def test_gradient_tape_loop_matches_tfa_step_by_step(name):
    prefix = f"tape/{name}"
    pattern = PATTERNS[prefix]
    model = _net(_initial(prefix, pattern["weights"]))
    optimizer = keras.optimizers.SGD(LEARNING_RATE)
    losses = []
    for step in range(pattern["steps"]):
        batch = {key: _get(f"{prefix}:{key}{step}") for key in ("x", "x2", "y")}
        with tf.GradientTape() as tape:
            value = _tape_loss(name, model, batch)
        gradients = tape.gradient(value, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        losses.append(float(value))
    np.testing.assert_allclose(losses, _get(f"{prefix}:losses"), **TOL)
    _assert_weights(model, f"{prefix}:final", pattern["weights"])


def test_sgd_with_weight_decay_over_learning_rate_is_tfas_sgdw():
    """The migration guide's conversion: tfa.optimizers.SGDW(weight_decay=wd) is
    keras.optimizers.SGD(weight_decay=wd / learning_rate), momentum included."""
    config = PATTERNS["sgdw"]
    optimizer = keras.optimizers.SGD(
        learning_rate=config["learning_rate"],
        momentum=config["momentum"],
        weight_decay=config["weight_decay"] / config["learning_rate"],
    )
    w = keras.Variable(_get("sgdw:initial"))
    target = _get("sgdw:target")
    for _ in range(config["steps"]):
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(tf.square(w - target))
        optimizer.apply_gradients([(tape.gradient(value, w), w)])
    np.testing.assert_allclose(w.numpy(), _get("sgdw:final"), **TOL)
    # Without the division the decay is the learning rate's fraction of TFA's.
    assert not np.allclose(_get("sgdw:final"), _sgd_final(config, config["weight_decay"]))


def _sgd_final(config, weight_decay):
    optimizer = keras.optimizers.SGD(
        learning_rate=config["learning_rate"],
        momentum=config["momentum"],
        weight_decay=weight_decay,
    )
    w = keras.Variable(_get("sgdw:initial"))
    for _ in range(config["steps"]):
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(tf.square(w - _get("sgdw:target")))
        optimizer.apply_gradients([(tape.gradient(value, w), w)])
    return w.numpy()
