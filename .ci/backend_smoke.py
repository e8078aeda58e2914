"""The installed wheel on Keras' JAX backend where TensorFlow is not installed: .ci/check_wheel.sh
runs this in a fresh virtual environment holding ``tf_svmax[jax]`` only, with ``python -I`` and
``KERAS_BACKEND=jax``. Usage: python -I backend_smoke.py

Checks that TensorFlow is absent and never imported, that the backend-neutral core gives NumPy's
singular values and a finite SVMax gradient under jax.jit, that one `fit` step of a small model
whose loss is the SVMax penalty (`tf_svmax.ops.svmax`) runs, and that a TensorFlow-only package
refuses in one sentence. Exits non-zero with a message on the first failure.
"""

import importlib.util
import sys


def fail(message):
    sys.exit(f"backend smoke: FAILED: {message}")


def main():
    if importlib.util.find_spec("tensorflow") is not None:
        fail("TensorFlow is installed in this environment; the check needs one without it")
    import jax
    import keras
    import numpy as np

    import tf_svmax

    if keras.backend.backend() != "jax":
        fail(f"Keras runs on {keras.backend.backend()!r}, not jax (KERAS_BACKEND)")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 8)).astype("float32")
    s = np.asarray(tf_svmax.ops.singular_values(x))
    if not np.allclose(s, np.linalg.svd(x.astype(float), compute_uv=False), rtol=1e-5):
        fail(f"singular values {s} differ from NumPy's")
    grad = jax.jit(jax.grad(lambda e: tf_svmax.ops.svmax(e)))(x)
    if not np.all(np.isfinite(np.asarray(grad))):
        fail("the SVMax gradient under jax.jit is not finite")

    inputs = keras.Input((8,))
    embeddings = keras.layers.UnitNormalization()(keras.layers.Dense(4)(inputs))
    model = keras.Model(inputs, embeddings)
    model.compile(optimizer="sgd", loss=lambda y_true, y_pred: tf_svmax.ops.svmax(y_pred))
    history = model.fit(x, np.zeros(12), batch_size=12, epochs=1, verbose=0)
    loss = history.history["loss"][0]
    if not 1.0 <= loss <= np.e:  # the bounded penalty of unit rows lies in [1, e] (Eq. 4)
        fail(f"the fitted SVMax penalty {loss} is outside [1, e]")

    try:
        import tf_svmax.losses  # noqa: F401
    except ImportError as error:
        if "TensorFlow backend only" not in str(error):
            fail(f"tf_svmax.losses refused with another message: {error}")
    else:
        fail("tf_svmax.losses imported on the JAX backend")
    if any(name.split(".")[0] == "tensorflow" for name in sys.modules):
        fail("TensorFlow was imported")
    print(
        f"backend smoke: OK (keras {keras.__version__} on jax {jax.__version__}, no TensorFlow; "
        f"singular values as NumPy's, SVMax penalty {loss:.4f} after one fit step)"
    )


if __name__ == "__main__":
    main()
