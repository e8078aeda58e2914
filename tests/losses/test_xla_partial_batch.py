"""TensorFlow ``jit_compile=True`` with a partial last batch, against float64 NumPy references.

Keras traces the train step once with an unknown batch size when the data is not a multiple of
the batch size (NumPy arrays, a `keras.utils.PyDataset`); XLA then compiles each concrete size.
Two constructs failed there with raw XLA errors: the orientation `tf.cond` of the spectral ops
(a matrix or its transpose: branches of two shapes) whenever the last batch was partial, and
the row-count `tf.cond` of the batch-level losses when the last batch had one row. Each logged
loss is the batch-size-weighted mean of the references over the batches (learning rate 0: the
embeddings are the model's predictions), a one-row batch giving its documented value (SVMax: 1;
a triplet loss with no positive pair: 0); the ops under XLA with an unknown row count, a wide
matrix included, give the references' values and gradients."""

import keras
import numpy as np
import pytest

from tests import backends
from tests import reference_spectral as ref
from tests.backends import RTOL32, assert_close
from tests.reference_xbm import ref_semihard
from tf_svmax import losses, ops

pytestmark = pytest.mark.skipif(
    backends.BACKEND != "tensorflow", reason="TensorFlow's XLA traces an unknown batch size"
)

DIM = 6  # a last batch of 4 rows is wide (b < d): the orientation is unknown to the trace
LAMBDA = 0.1


def _bounds(b, d):
    # SVMax paper Eq. 2-3 with k = min(b, d) (dissertation, "SVMax with Small Batches").
    k = min(b, d)
    return np.sqrt(b) / k, np.sqrt(b * d / max(b, d)) * np.sqrt(b) / k


def ref_svmax(labels, x):
    if min(x.shape) < 2:
        return LAMBDA * 1.0  # documented: U = L, the bounded penalty's minimum
    return LAMBDA * ref.svmax_reference(x, _bounds(*x.shape))[0]


LOSSES = {
    "svmax": (lambda: losses.SVMaxLoss(lambda_=LAMBDA), ref_svmax),
    "semihard": (losses.TripletSemiHardLoss, lambda y, x: ref_semihard(y, x, len(x))),
    "semihard+svmax": (
        lambda: losses.RegularizedLoss(
            losses.TripletSemiHardLoss(), [losses.SVMaxLoss(lambda_=LAMBDA)]
        ),
        lambda y, x: ref_semihard(y, x, len(x)) + ref_svmax(y, x),
    ),
}


def _model():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(DIM), keras.layers.UnitNormalization()]
    )


def _want(reference, embeddings, labels, batch_size):
    values, sizes = [], []
    for start in range(0, len(labels), batch_size):
        rows = slice(start, start + batch_size)
        values.append(reference(labels[rows], embeddings[rows].astype(np.float64)))
        sizes.append(len(labels[rows]))
    # Keras' logged loss: the mean over the batches weighted by their sizes.
    return np.average(values, weights=sizes)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("rows", [20, 17], ids=["last-4-rows", "last-1-row"])
def test_fit_with_a_partial_last_batch_logs_the_references(rng, name, rows):
    make, reference = LOSSES[name]
    x = rng.standard_normal((rows, 5)).astype(np.float32)
    y = np.arange(rows) % 3
    model = _model()
    model.compile(keras.optimizers.SGD(0.0), loss=make(), jit_compile=True)
    assert model.jit_compile
    logged = model.fit(x, y, batch_size=8, shuffle=False, verbose=0).history["loss"][0]
    want = _want(reference, model.predict(x, verbose=0), y, 8)
    assert_close(logged, want, RTOL32)


def test_fit_from_a_py_dataset_with_a_partial_last_batch(rng):
    x = rng.standard_normal((20, 5)).astype(np.float32)
    y = np.arange(20) % 3
    model = _model()
    model.compile(
        keras.optimizers.SGD(0.0), loss=losses.SVMaxLoss(lambda_=LAMBDA), jit_compile=True
    )
    logged = model.fit(backends.ArrayBatches(x, y, 8), verbose=0).history["loss"][0]
    assert_close(logged, _want(ref_svmax, model.predict(x, verbose=0), y, 8), RTOL32)


def _under_xla_with_unknown_rows(fns, x):
    """``[(fn(x), the gradient of its sum) for fn in fns]``, in one `tf.function(jit_compile=
    True)` traced for any row count (as Keras traces a train step over a partial last batch):
    one XLA program for all of them."""
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow only, see pytestmark)

    @tf.function(jit_compile=True, input_signature=[tf.TensorSpec([None, x.shape[1]], x.dtype)])
    def values_and_grads(rows):
        out = []
        for fn in fns:
            with tf.GradientTape() as tape:
                tape.watch(rows)
                value = fn(rows)
                total = tf.reduce_sum(value)
            out.append((value, tape.gradient(total, rows)))
        return out

    return [(value.numpy(), grad.numpy()) for value, grad in values_and_grads(x)]


@pytest.mark.parametrize("method", ["auto", "gram", "svd"])
@pytest.mark.parametrize("shape", [(4, 8), (8, 4), (1, 4)], ids=["wide", "tall", "one-row"])
def test_spectral_ops_under_xla_with_an_unknown_row_count(rng, method, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    s = ref.singular_values(x)
    u, _, vt = np.linalg.svd(x.astype(np.float64), full_matrices=False)
    (got, grad), (got_mean, grad_mean) = _under_xla_with_unknown_rows(
        [
            lambda rows: ops.singular_values(rows, method=method),
            lambda rows: ops.mean_singular_value(rows, method=method),
        ],
        x,
    )
    assert_close(got, s, 1e-5)
    assert_close(grad, u @ vt, 1e-4)  # d sum(s) / dx = U V^T
    nuclear, polar = ref.nuclear_norm_and_gradient(x)
    k = min(shape)
    assert_close(got_mean, nuclear / k, 1e-5)
    assert_close(grad_mean, polar / k, 1e-4)
