"""CenterLoss on every Keras backend (TensorFlow, JAX, PyTorch) against the float64 NumPy
reference of the formula (`tests/reference_ranking.center`: per-sample loops): value and gradient
of a direct call, the centers after several `fit` steps (eagerly, compiled, and under XLA where
the backend has it), `evaluate`/`predict` leaving them alone, and a `.keras` file keeping them.

Where the update runs differs by backend (the loss' docstring): in the backward pass on
TensorFlow and PyTorch, in the forward pass of a training step of a model holding the loss'
`ClassCenters` layer on JAX (a JAX train step carries out only the model's variables)."""

import keras
import numpy as np
import pytest

from tests import backends
from tests.backends import RTOL32, assert_close, to_numpy
from tests.reference_ranking import center as ref_center
from tf_svmax import losses

pytestmark = pytest.mark.all_backends

LAMBDA, ALPHA = 0.7, 0.5
LABELS = np.array([0, 2, 2, 1, 0, 2, 2, 0])


def _centers(loss):
    return to_numpy(loss.centers).copy()


def test_value_and_gradient_match_the_reference_and_the_centers_move_as_the_backend_says(rng):
    x = rng.standard_normal((8, 4)).astype(np.float32)
    loss = losses.CenterLoss(3, 4, lambda_=LAMBDA, alpha=ALPHA, seed=0)
    before = _centers(loss)
    want, moved = ref_center(x, LABELS, before, ALPHA, LAMBDA)
    assert_close(to_numpy(loss(LABELS, x)), want, RTOL32)
    np.testing.assert_array_equal(_centers(loss), before)  # no gradient, no move

    got, (grad,) = backends.value_and_grad(lambda rows: loss(LABELS, rows), x)
    assert_close(got, want, RTOL32)
    assert_close(
        grad,
        backends.numpy_gradient(lambda rows: ref_center(rows, LABELS, before, ALPHA, LAMBDA)[0], x),
        RTOL32,
    )
    if backends.BACKEND == "jax":
        # A direct call is no training step of a model: nothing moves (the docstring).
        np.testing.assert_array_equal(_centers(loss), before)
    else:  # the update runs in the backward pass, from the pre-update centers
        assert_close(_centers(loss), moved, RTOL32)
    # Sample weights scale the value by their mean; one-hot rows are read as their argmax.
    weights = rng.uniform(0.5, 2.0, 8)
    value = loss(np.eye(3)[LABELS], x, sample_weight=weights)
    assert_close(
        to_numpy(value),
        ref_center(x, LABELS, _centers(loss), ALPHA, LAMBDA)[0] * weights.mean(),
        RTOL32,
    )


def _model(loss, seed=0):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((5,)), keras.layers.Dense(4), keras.layers.UnitNormalization()]
    if loss.centers_layer is not None:  # JAX and PyTorch; TensorFlow keeps them in the loss
        layers.append(loss.centers_layer)
    return keras.Sequential(layers)


COMPILE = {
    "eager": {"run_eagerly": True},
    "compiled": {"jit_compile": False},
    "xla": {"jit_compile": True},
}


@pytest.mark.parametrize("mode", sorted(COMPILE))
def test_fit_steps_move_the_centers_as_the_numpy_simulation(rng, mode):
    # Learning rate 0: each step's features are the model's prediction, so the reference moves
    # its centers with the predicted rows of each batch, batch after batch.
    loss = losses.CenterLoss(3, 4, lambda_=LAMBDA, alpha=ALPHA, seed=1)
    model = _model(loss)
    model.compile(keras.optimizers.SGD(0.0), loss=loss, **COMPILE[mode])
    x = rng.standard_normal((24, 5)).astype(np.float32)
    y = rng.integers(0, 3, 24)
    features = model.predict(x, verbose=0)
    centers = _centers(loss)
    history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    values = []
    for _ in range(2):
        for start in range(0, 24, 8):
            value, centers = ref_center(
                features[start : start + 8], y[start : start + 8], centers, ALPHA, LAMBDA
            )
            values.append(value)
    assert_close(_centers(loss), centers, RTOL32)
    assert_close(history["loss"][-1], np.mean(values[3:]), RTOL32)  # the epoch's mean

    trained = _centers(loss)
    if backends.BACKEND == "jax":
        # The layer's training flag outlives the step: a direct call and its gradient after
        # `fit` still move nothing (and leak no trace into the centers).
        backends.value_and_grad(lambda rows: loss(y[:8], rows), features[:8])
        np.testing.assert_array_equal(_centers(loss), trained)

    # Neither evaluate nor predict moves them; evaluate reports the reference's value.
    logged = model.evaluate(x[:8], y[:8], batch_size=8, verbose=0)
    model.predict(x, verbose=0)
    np.testing.assert_array_equal(_centers(loss), trained)
    assert_close(logged, ref_center(features[:8], y[:8], trained, ALPHA, LAMBDA)[0], RTOL32)


def test_a_keras_file_keeps_the_trained_centers_and_its_loss_trains_on(rng, tmp_path):
    loss = losses.CenterLoss(3, 4, lambda_=LAMBDA, alpha=ALPHA, seed=2)
    model = _model(loss)
    model.compile(keras.optimizers.SGD(0.0), loss=loss)
    x = rng.standard_normal((16, 5)).astype(np.float32)
    y = rng.integers(0, 3, 16)
    initial = _centers(loss)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    trained = _centers(loss)
    assert not np.allclose(trained, initial)
    model.save(tmp_path / "center.keras")
    restored = keras.models.load_model(tmp_path / "center.keras")
    assert isinstance(restored.loss, losses.CenterLoss)
    np.testing.assert_array_equal(_centers(restored.loss), trained)
    if restored.loss.centers_layer is not None:  # the loss took the model's restored layer
        assert restored.loss.centers_layer in restored.layers
    # Training on moves the restored centers as the reference does.
    features = restored.predict(x[:8], verbose=0)
    restored.train_on_batch(x[:8], y[:8])
    want = ref_center(features, y[:8], trained, ALPHA, LAMBDA)[1]
    assert_close(_centers(restored.loss), want, RTOL32)


@pytest.mark.skipif(backends.BACKEND != "jax", reason="JAX's train step only")
def test_on_jax_a_model_without_the_centers_layer_is_refused_by_name(rng):
    loss = losses.CenterLoss(3, 4, seed=0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4)])
    model.compile(keras.optimizers.SGD(0.1), loss=loss)
    with pytest.raises(ValueError, match=r"loss\.centers_layer"):
        model.fit(rng.standard_normal((8, 5)), LABELS, batch_size=8, verbose=0)


@pytest.mark.skipif(
    backends.BACKEND == "tensorflow", reason="TensorFlow: tests/losses/test_paper_losses.py"
)
def test_bad_labels_are_refused_by_name(rng):
    loss = losses.CenterLoss(2, 2)
    x = np.eye(2, dtype=np.float32)
    for labels in ([0, 5], [0.0, 1.7], np.array([0, 2**32 + 1])):
        with pytest.raises(ValueError, match=r"`y_true`"):
            loss(labels, x)
    with pytest.raises(ValueError, match=r"`y_pred`.*\[batch_size, 2\] rows.*embedding_dim"):
        loss([0, 1], np.ones((2, 3), np.float32))


# Invalid labels where no check can raise, label shapes, seeding (issue 59, items 2, 4, 5). ------

# Labels a trace cannot refuse: a class outside [0, 3), one beyond int32, a non-integral float,
# a [B, 3] matrix that is not one-hot.
BAD_LABELS = {
    "out of range": np.array([0, 2, 2, 1, 3, 2, 2, 0]),
    "2**31": np.array([0, 2, 2, 1, 2**31, 2, 2, 0]),
    "non-integral": np.array([0, 2, 2, 1, 0.5, 2, 2, 0], np.float32),
    "not one-hot": np.eye(3, dtype=np.float32)[LABELS] + np.eye(3, dtype=np.float32)[0],
}


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not compile PyTorch with XLA")
@pytest.mark.parametrize("bad", sorted(BAD_LABELS))
def test_under_xla_an_invalid_label_gives_nan_not_a_clamped_class(rng, bad):
    """TensorFlow's `jit_compile=True` drops `tf.debugging` asserts and clamps a gather: the
    label 3 (or 2**31) was read as class 2. The reference of a valid batch is finite, so NaN
    can only come from the label check."""
    x = rng.standard_normal((8, 4)).astype(np.float32)
    loss = losses.CenterLoss(3, 4, lambda_=LAMBDA, alpha=ALPHA, seed=0)
    call = backends.compiled(lambda labels, rows: loss(labels, rows))
    want = ref_center(x, LABELS, _centers(loss), ALPHA, LAMBDA)[0]
    assert_close(to_numpy(call(LABELS, x)), want, RTOL32)
    assert np.isnan(to_numpy(call(BAD_LABELS[bad], x)))


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not compile PyTorch with XLA")
def test_an_xla_training_step_with_an_invalid_label_gives_nan_and_moves_nothing(rng):
    # Under XLA the labels' values are unknown when the loss is traced: no error can be raised,
    # so the value says it (NaN) and the centers keep their values (TensorFlow and JAX).
    loss = losses.CenterLoss(3, 4, seed=0)
    model = _model(loss)
    model.compile(keras.optimizers.SGD(0.0), loss=loss, jit_compile=True)
    before = _centers(loss)
    value = model.train_on_batch(
        rng.standard_normal((8, 5)).astype(np.float32), BAD_LABELS["2**31"]
    )
    assert np.isnan(value)
    np.testing.assert_array_equal(_centers(loss), before)


def test_a_label_matrix_other_than_one_hot_rows_is_refused_by_name(rng):
    """`[y, y]` (two label columns) was read as one-hot rows, class 0 for every row; the
    docstring promises `[B]`, `[B, 1]` and `[B, C]` one-hot rows only."""
    x = rng.standard_normal((8, 4)).astype(np.float32)
    loss = losses.CenterLoss(3, 4, seed=0)
    with pytest.raises(ValueError, match=r"argument `y_true`.*one-hot rows of shape \[B, 3\]"):
        loss(np.stack([LABELS, LABELS], axis=1), x)
    errors = (ValueError,)
    if backends.BACKEND == "tensorflow":
        import tensorflow as tf

        errors = (tf.errors.InvalidArgumentError,)
    with pytest.raises(errors, match=r"`y_true`. Expected one-hot rows"):
        loss(BAD_LABELS["not one-hot"], x)
    # [B, 1] class ids and true one-hot rows are the class ids' value.
    want = ref_center(x, LABELS, _centers(loss), 0.5, 0.003)[0]
    assert_close(to_numpy(loss(LABELS[:, None], x)), want, RTOL32)
    assert_close(to_numpy(loss(np.eye(3)[LABELS], x)), want, RTOL32)


def test_set_random_seed_fixes_the_initial_centers():
    """`seed=None` drew from ``np.random.default_rng(None)``, which no global seed reaches."""
    drawn = []
    for _ in range(2):
        keras.utils.set_random_seed(0)
        drawn.append(_centers(losses.CenterLoss(3, 4)))
    np.testing.assert_array_equal(drawn[0], drawn[1])
    keras.utils.set_random_seed(1)
    assert not np.allclose(_centers(losses.CenterLoss(3, 4)), drawn[0])
    # N(0, 1) draws.
    keras.utils.set_random_seed(0)
    many = _centers(losses.CenterLoss(100, 50))
    assert abs(many.mean()) < 0.05 and abs(many.std() - 1.0) < 0.05
