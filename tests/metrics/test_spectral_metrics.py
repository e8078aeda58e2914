import keras
import numpy as np
import pytest

from tests import reference_spectral as ref
from tf_svmax.metrics import MeanSingularValue, SingularValueBound, svmax_metrics


def test_running_mean_over_batches_matches_numpy(rng):
    batches = [ref.unit_rows(rng, 40, 16), ref.unit_rows(rng, 10, 16)]
    metric = MeanSingularValue()
    for batch in batches:
        metric.update_state(None, batch)
    expected = np.mean([ref.singular_values(b).mean() for b in batches])
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-5)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_bounds_follow_each_batch_shape(rng):
    lower, upper = SingularValueBound("lower"), SingularValueBound("upper")
    for b in (40, 10):
        e = ref.unit_rows(rng, b, 16)
        lower.update_state(None, e)
        upper.update_state(None, e)
    bounds = [ref.original_bounds(40, 16), ref.small_batch_bounds(10, 16)]
    np.testing.assert_allclose(float(lower.result()), np.mean([b[0] for b in bounds]), rtol=1e-6)
    np.testing.assert_allclose(float(upper.result()), np.mean([b[1] for b in bounds]), rtol=1e-6)


def test_metrics_serialize_and_log_during_fit(rng):
    for metric in svmax_metrics():
        restored = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(metric)
        )
        assert restored.get_config() == metric.get_config()
    inputs = keras.Input((5,))
    outputs = keras.layers.UnitNormalization()(keras.layers.Dense(4)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse", metrics=svmax_metrics())
    x = rng.standard_normal((32, 5)).astype(np.float32)
    history = model.fit(x, x[:, :4], batch_size=16, epochs=1, verbose=0).history
    lower, upper = ref.original_bounds(16, 4)
    assert history["svmax_lower_bound"][0] == pytest.approx(lower)
    assert history["svmax_upper_bound"][0] == pytest.approx(upper)
    assert lower <= history["mean_singular_value"][0] <= upper


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"argument `bound`"):
        SingularValueBound("middle")
    with pytest.raises(ValueError, match=r"argument `method`"):
        MeanSingularValue(method="x")


def test_bound_metric_refuses_a_non_matrix():
    with pytest.raises(ValueError, match=r"argument `y_pred`.*rank-2"):
        SingularValueBound("upper").update_state(None, np.zeros((2, 3, 4), np.float32))


def test_batches_with_no_rows_are_skipped():
    """An empty batch adds neither a value nor a count: the mean is over the batches that had
    rows (it used to log NaN for a dynamic empty batch)."""
    import tensorflow as tf

    metric = MeanSingularValue()
    bound = SingularValueBound("upper")
    update = tf.function(
        lambda y: (metric.update_state(None, y), bound.update_state(None, y)),
        input_signature=[tf.TensorSpec([None, 4], tf.float32)],
    )
    update(tf.zeros([0, 4]))
    update(tf.eye(4))
    assert float(metric.result()) == 1.0  # s_mu of the identity
    assert float(bound.result()) == 1.0  # U(b=4, d=4) = sqrt(4 / 4)


def test_global_batch_is_configurable_and_checked():
    metric = MeanSingularValue(global_batch=False)
    assert MeanSingularValue.from_config(metric.get_config()).global_batch is False
    assert all(m.global_batch is False for m in svmax_metrics(global_batch=False))
    with pytest.raises(ValueError, match=r"argument `global_batch`"):
        SingularValueBound("lower", global_batch="no")
