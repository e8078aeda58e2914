"""The installed wheel on Keras' JAX backend where TensorFlow is not installed: .ci/check_wheel.sh
runs this in a fresh virtual environment holding ``tf_svmax[jax]`` only, with ``python -I`` and
``KERAS_BACKEND=jax``. Usage: python -I backend_smoke.py

Checks that TensorFlow and the trainers extra's packages are absent and TensorFlow never
imported, that the backend-neutral core gives
NumPy's singular values and a finite SVMax gradient under jax.jit, that one `fit` step of a
small model whose loss is TripletSemiHardLoss + SVMaxLoss runs, that the models and the
retrieval metrics run (issue 57: CosineProxies on the embeddings, Recall@1 against a NumPy
nearest neighbour), and that a TensorFlow-by-nature name (tf_svmax.training.ContrastiveModel)
refuses in one sentence. Exits non-zero with a message on the first failure.
"""

import importlib.util
import sys

# The `trainers` extra's packages, which tf_svmax[jax] must not pull (issue 59).
TRAINERS_ONLY = ("tensorboard", "matplotlib", "PIL", "fontTools")


def fail(message):
    sys.exit(f"backend smoke: FAILED: {message}")


def check_without_the_trainers_extra():
    present = [name for name in TRAINERS_ONLY if importlib.util.find_spec(name) is not None]
    if present:
        fail(f"tf_svmax[jax] installed {present}, which belong to the trainers extra")


def main():
    if importlib.util.find_spec("tensorflow") is not None:
        fail("TensorFlow is installed in this environment; the check needs one without it")
    import jax
    import keras
    import numpy as np

    import tf_svmax

    if keras.backend.backend() != "jax":
        fail(f"Keras runs on {keras.backend.backend()!r}, not jax (KERAS_BACKEND)")
    check_without_the_trainers_extra()
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
    svmax_loss = tf_svmax.losses.SVMaxLoss(lambda_=0.1)
    model.compile(
        optimizer="sgd",
        loss=tf_svmax.losses.RegularizedLoss(tf_svmax.losses.TripletSemiHardLoss(), [svmax_loss]),
    )
    history = model.fit(x, np.repeat(np.arange(3), 4), batch_size=12, epochs=1, verbose=0)
    loss = history.history["loss"][0]
    if not np.isfinite(loss) or loss < 0.1:  # semi-hard >= 0, SVMax term in [0.1, 0.1 e]
        fail(f"the fitted semi-hard + SVMax loss {loss} is not finite or below the SVMax term")

    proxies = keras.Model(inputs, tf_svmax.models.CosineProxies(3)(embeddings))
    if proxies.predict(x, verbose=0).shape != (12, 3):
        fail("tf_svmax.models.CosineProxies gave another shape than [12, 3]")
    e = np.asarray(model.predict(x, verbose=0), dtype=np.float64)
    y = np.repeat(np.arange(3), 4)
    d = ((e[:, None] - e[None]) ** 2).sum(-1) + np.diag(np.full(12, np.inf))  # self excluded
    expected = float(np.mean(y[d.argmin(1)] == y))
    recall = tf_svmax.metrics.recall_at_k(e, y, ks=(1,))[1]
    if not np.isclose(recall, expected):
        fail(f"Recall@1 {recall} differs from NumPy's nearest neighbour {expected}")
    try:
        tf_svmax.training.ContrastiveModel  # noqa: B018
    except ImportError as error:
        if "TensorFlow backend only" not in str(error):
            fail(f"ContrastiveModel refused with another message: {error}")
    else:
        fail("tf_svmax.training.ContrastiveModel (TensorFlow by nature) imported on JAX")
    if any(name.split(".")[0] == "tensorflow" for name in sys.modules):
        fail("TensorFlow was imported")
    print(
        f"backend smoke: OK (keras {keras.__version__} on jax {jax.__version__}, no TensorFlow; "
        f"singular values as NumPy's, semi-hard + SVMax loss {loss:.4f} after one fit step)"
    )


if __name__ == "__main__":
    main()
