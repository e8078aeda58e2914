"""The stateless loss classes of `tf_svmax.losses` on every Keras backend, in `model.fit`:

* one full-batch SGD step of a linear model ``y = x @ W`` (eagerly, and compiled: XLA on
  TensorFlow and JAX, PyTorch's default), whose reported loss must equal the float64 NumPy
  reference at ``x @ W`` and whose weight step must equal ``-lr * x^T dL/dy`` with ``dL/dy``
  the reference's central-difference gradient, both within 1e-5 relative in float32 (the
  references of tests/reference_ranking.py and the backend test files of the functions);
* a few more steps stay finite;
* the string names (``"tf_svmax>Name"``) in `compile` and `tf_svmax.losses.get`;
* a `.keras` file saved on this backend loads on the two others (a subprocess each) with the
  same loss config, predictions and optimizer state, and trains there (one `fit` step).

Runs once per backend (marked all_backends: tests/conftest.py)."""

import json
import textwrap

import keras
import numpy as np
import pytest

import tf_svmax.losses as L
from tests import backends
from tests import reference_ranking as ref
from tests.losses.test_paper_functions_backends import ref_all_pairs
from tests.losses.test_tfa_functions_backends import (
    ref_contrastive_sum,
    ref_hard,
    ref_lifted,
    ref_npairs,
    ref_npairs_multilabel,
    ref_semihard,
)
from tf_svmax.losses import _registry

pytestmark = pytest.mark.all_backends

RTOL = backends.RTOL32


def _distinct(n, classes, seed):
    """`n` labels over `classes` classes, each class at least twice (generic triplets)."""
    labels = np.arange(n) % classes
    return np.random.default_rng(seed).permutation(labels)


def _multi_hot(n, seed):
    y = (np.random.default_rng(seed).random((n, 5)) < 0.4).astype("float32")
    y[:, 0] = 1.0  # every sample has a label
    return y


# name -> (make the loss, y_true, output width, reference(y_true, y float64) -> float).
# Each reference is an independent float64 loop; the class' reduction is applied here.
SEMI = _distinct(12, 4, 0)
CASES = {
    "TripletSemiHardLoss": (
        lambda: L.TripletSemiHardLoss(margin=0.5),
        SEMI,
        5,
        lambda y, e: ref_semihard(y, e, 0.5, "L2"),
    ),
    "TripletHardLoss": (
        lambda: L.TripletHardLoss(soft=True, distance_metric="squared-L2"),
        SEMI,
        5,
        lambda y, e: ref_hard(y, e, 1.0, "squared-L2", soft=True),
    ),
    "LiftedStructLoss": (
        lambda: L.LiftedStructLoss(margin=1.0),
        SEMI,
        5,
        lambda y, e: ref_lifted(y, e, 1.0),
    ),
    "NpairsLoss": (L.NpairsLoss, SEMI, 12, ref_npairs),
    "NpairsMultilabelLoss": (L.NpairsMultilabelLoss, _multi_hot(12, 1), 12, ref_npairs_multilabel),
    "ContrastiveLoss": (
        lambda: L.ContrastiveLoss(margin=1.0),
        (np.arange(12) % 2).astype("float32")[:, None],
        1,
        lambda y, d: ref_contrastive_sum(y, d.ravel(), 1.0) / len(d),
    ),
    "AllPairsContrastiveLoss": (
        lambda: L.AllPairsContrastiveLoss(pos_margin=0.5, neg_margin=1.5, distance="L2"),
        SEMI,
        5,
        lambda y, e: ref_all_pairs(y, e, 0.5, 1.5, "L2"),
    ),
    "BatchHardTripletLoss": (
        lambda: L.BatchHardTripletLoss(margin="soft", distance="sqeuclidean"),
        SEMI,
        5,
        lambda y, e: float(np.mean(ref.batch_hard(y, e, "soft", "sqeuclidean"))),
    ),
    "ProxyAnchorLoss": (
        lambda: L.ProxyAnchorLoss(alpha=8.0, delta=0.1),
        np.array([0, 2, 2, 4, 0, 1, 3, 3, 1, 0, 4, 2]),
        6,
        lambda y, s: ref.proxy_anchor(y, s, 8.0, 0.1),
    ),
    "PKContrastiveLoss": (
        L.PKContrastiveLoss,
        np.repeat([4, 7, 1, 9], 4),
        4,
        lambda y, e: float(np.mean(ref.pk_contrastive(y, e, 1.0))),
    ),
    "PKNpairLoss": (
        lambda: L.PKNpairLoss(l2_reg=0.002),
        np.repeat([3, 0, 5, 3, 2, 1], 2),
        4,
        lambda y, e: float(np.mean(ref.pk_npair(y, e, 0.002))),
    ),
    "PKAngularLoss": (
        lambda: L.PKAngularLoss(alpha=40.0, l2_reg=0.002),
        np.repeat([3, 0, 5, 3, 2, 1], 2),
        4,
        lambda y, e: float(np.mean(ref.pk_angular(y, e, 40.0, 0.002))),
    ),
}


def _compile_kwargs(compiled):
    if not compiled:
        return {"run_eagerly": True}
    # XLA on TensorFlow and JAX; Keras runs PyTorch eagerly ("auto" does the same there).
    return {"jit_compile": backends.BACKEND != "torch"}


def _data(width, rows, seed=7):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 6)).astype("float32")
    w0 = (rng.standard_normal((6, width)) * 0.3).astype("float32")
    return x, w0


def _linear_model(w0, extra_layers=()):
    model = keras.Sequential(
        [
            keras.Input((w0.shape[0],)),
            keras.layers.Dense(w0.shape[1], use_bias=False),
            *extra_layers,
        ]
    )
    model.layers[0].kernel.assign(w0)
    return model


def _check_one_sgd_step(loss, y_true, width, reference, compiled, extra_layers=()):
    x, w0 = _data(width, len(y_true))
    y = x.astype(np.float64) @ w0.astype(np.float64)
    want = reference(y_true, y)
    d_y = backends.numpy_gradient(lambda e: reference(y_true, e), y)
    d_w = x.T.astype(np.float64) @ d_y
    # A learning rate that makes the step as large as W itself: the float32 rounding of
    # W1 - W0 (about 1e-7 of |W|) then stays far below 1e-5 of the step.
    lr = float(np.abs(w0).max() / np.abs(d_w).max())
    model = _linear_model(w0, extra_layers)
    model.compile(optimizer=keras.optimizers.SGD(lr), loss=loss, **_compile_kwargs(compiled))
    history = model.fit(x, y_true, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
    assert history.history["loss"][0] == pytest.approx(want, rel=RTOL, abs=RTOL)
    step = backends.to_numpy(model.layers[0].kernel).astype(np.float64) - w0
    backends.assert_close(step, -lr * d_w, RTOL)
    # A few more steps (a fresh trace is not needed: same shapes) stay finite.
    more = model.fit(x, y_true, batch_size=len(x), epochs=3, shuffle=False, verbose=0)
    assert np.all(np.isfinite(more.history["loss"]))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_fit_step_matches_the_reference(name, compiled):
    make, y_true, width, reference = CASES[name]
    _check_one_sgd_step(make(), y_true, width, reference, compiled)


def _spread_out_reference(seed, alpha, labels, compiled):
    """SpreadOutLoss' first value: its first draw is that of a fresh SeedGenerator(seed), drawn
    the same way (compiled or not: TensorFlow's stateless random ops pick another algorithm
    under XLA); the uniforms are an input here, not the loss' output. The negatives are the
    NumPy argmax of the other-class draws (random_negatives' documented rule), the value
    ref.spread_out's."""
    generator = keras.random.SeedGenerator(seed)

    def draw():
        return keras.random.uniform((len(labels), len(labels)), seed=generator)

    uniform = backends.to_numpy((backends.compiled(draw) if compiled else draw)())
    other = labels[:, None] != labels[None, :]
    negatives = [int(np.argmax(np.where(other[i], uniform[i], -1.0))) for i in range(len(labels))]
    return lambda y, e: alpha * ref.spread_out(e, negatives)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_spread_out_loss_fit_step_matches_the_reference(compiled):
    labels = _distinct(12, 4, 3)
    reference = _spread_out_reference(5, 0.7, labels, compiled)
    loss = L.SpreadOutLoss(alpha=0.7, seed=5)
    _check_one_sgd_step(loss, labels, 4, reference, compiled, extra_layers=[loss.draws])


def _spread_out_fit(loss, layers, epochs):
    x, w0 = _data(4, 12)
    model = _linear_model(w0, layers)
    model.compile(optimizer="sgd", loss=loss)
    model.fit(x, _distinct(12, 4, 3), batch_size=12, epochs=epochs, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("in_model", [True, False], ids=["layer_in_model", "layer_outside"])
def test_spread_out_loss_draws_new_negatives_at_each_step(in_model):
    """The seed state advances in fit by one draw per step: after 3 steps it equals a fresh
    generator's after 3 draws of the same shape (JAX needs the layer in the model)."""
    if backends.BACKEND == "jax" and not in_model:
        pytest.skip("on JAX the draws layer must be in the model (the refusal is tested below)")
    loss = L.SpreadOutLoss(seed=5)
    _spread_out_fit(loss, [loss.draws] if in_model else [], epochs=3)
    generator = keras.random.SeedGenerator(5)
    for _ in range(3):
        keras.random.uniform((12, 12), seed=generator)
    np.testing.assert_array_equal(
        backends.to_numpy(loss.draws.generator.state), backends.to_numpy(generator.state)
    )


def test_spread_out_draws_are_saved_with_the_model(tmp_path):
    """The draws layer's seed state is a weight of the model: a loaded model restores it, and
    a loss given the loaded layer continues the same stream of negatives."""
    loss = L.SpreadOutLoss(seed=5)
    model = _spread_out_fit(loss, [loss.draws], epochs=2)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    draws = loaded.layers[-1]
    assert isinstance(draws, L.SpreadOutDraws) and draws.seed == 5
    np.testing.assert_array_equal(
        backends.to_numpy(draws.generator.state), backends.to_numpy(loss.draws.generator.state)
    )
    assert loaded.loss.draws is draws  # the loaded loss draws from the loaded model's layer
    x, _ = _data(4, 12)
    loaded.fit(x, _distinct(12, 4, 3), batch_size=12, epochs=1, verbose=0)
    generator = keras.random.SeedGenerator(5)
    for _ in range(3):
        keras.random.uniform((12, 12), seed=generator)
    np.testing.assert_array_equal(
        backends.to_numpy(draws.generator.state), backends.to_numpy(generator.state)
    )
    again = L.SpreadOutLoss(seed=5, draws=draws)
    assert again.draws is draws
    with pytest.raises(ValueError, match="draws.*SpreadOutDraws layer"):
        L.SpreadOutLoss(seed=6, draws=draws)


@pytest.mark.skipif(backends.BACKEND != "jax", reason="the JAX refusal")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_spread_out_loss_outside_the_model_is_refused_on_jax(compiled):
    loss = L.SpreadOutLoss(seed=5)
    x, w0 = _data(4, 12)
    model = _linear_model(w0)
    model.compile(optimizer="sgd", loss=loss, **_compile_kwargs(compiled))
    with pytest.raises(ValueError, match=r"draws layer in the model.*loss\.draws"):
        model.fit(x, _distinct(12, 4, 3), batch_size=12, epochs=1, verbose=0)


# The loss classes a string names: the registry's, constructible with their defaults.
STRING_NAMES = sorted(e.name for e in _registry.entries("loss") if not e.required_arguments)


@pytest.mark.parametrize("name", STRING_NAMES)
def test_string_names_resolve_in_get_and_keras(name):
    loss = L.get(f"tf_svmax>{name}")
    assert type(loss) is getattr(L, name)
    assert type(keras.losses.get(f"tf_svmax>{name}")) is getattr(L, name)


def test_a_function_name_and_an_unknown_name():
    assert L.get("tf_svmax>triplet_semihard_loss") is L.triplet_semihard_loss
    assert L.get("tf_svmax>batch_hard_triplet_loss") is L.batch_hard_triplet_loss
    with pytest.raises(ValueError, match="identifier.*tf_svmax>TripletSemiHardLoss"):
        L.get("tf_svmax>NoSuchLoss")
    with pytest.raises(ValueError, match=r"identifier.*needs arguments \(num_classes, embedding"):
        L.get("tf_svmax>CenterLoss")


# Stand-ins for `keras.losses.get`: Keras 3.15's string lookup (its module table only) and a
# Keras that also consults the public registrations (keras-team/keras#20112).
_KERAS_GET = """
def get(identifier):
    obj = ALL_OBJECTS_DICT.get(identifier)
    if obj is None and PUBLIC:
        obj = keras.saving.get_registered_object(identifier)
    if obj is None:
        raise ValueError(f"Could not interpret loss identifier: {identifier}")
    return obj() if isinstance(obj, type) else obj
"""


@pytest.mark.parametrize("public", [False, True], ids=["table-only", "registrations"])
def test_the_name_table_is_written_only_where_keras_needs_it(monkeypatch, public):
    """The string names go into Keras' private table only when its `losses.get` does not
    resolve the public registrations itself (the shim retires on such a Keras)."""
    namespace = {"ALL_OBJECTS_DICT": {}, "PUBLIC": public, "keras": keras}
    exec(_KERAS_GET, namespace)
    monkeypatch.setattr(keras.losses, "get", namespace["get"])
    _registry.install([L.TripletSemiHardLoss, L.OLELoss])
    table = namespace["ALL_OBJECTS_DICT"]
    assert table == (
        {}
        if public
        else {"tf_svmax>TripletSemiHardLoss": L.TripletSemiHardLoss, "tf_svmax>OLELoss": L.OLELoss}
    )
    assert type(keras.losses.get("tf_svmax>OLELoss")) is L.OLELoss


def test_compile_with_a_string_name_trains():
    x, w0 = _data(5, 12)
    model = _linear_model(w0)
    model.compile(optimizer="sgd", loss="tf_svmax>TripletSemiHardLoss")
    history = model.fit(x, SEMI, batch_size=12, epochs=1, shuffle=False, verbose=0)
    assert history.history["loss"][0] == pytest.approx(
        ref_semihard(SEMI, x @ w0.astype(np.float64)), rel=RTOL
    )


@pytest.mark.parametrize("shape", [(12, 2), (11,), (12, 1, 1)])
def test_contrastive_sample_weights_other_than_one_per_pair_are_refused(shape):
    """A `[B, 2]`, `B - 1` or rank-3 weight is refused naming `sample_weight` (Keras broadcast
    the first and failed raw inside a product on the second, issue 59 item 10); `[B]` and
    `[B, 1]` weights scale each pair (the NumPy weighted mean, the reference)."""
    make, y, _, _ = CASES["ContrastiveLoss"]
    d = np.random.default_rng(3).random((12, 1)).astype("float32") * 2
    with pytest.raises(ValueError, match=r"argument `sample_weight`"):
        make()(y, d, sample_weight=np.ones(shape, "float32"))
    w = np.arange(1, 13, dtype="float32")
    expected = np.mean(w * [ref_contrastive_sum(y[i], d[i], 1.0) for i in range(12)])
    for weights in (w, w[:, None]):
        got = backends.to_numpy(make()(y, d, sample_weight=weights))
        assert got == pytest.approx(expected, rel=RTOL)


# --- a .keras file saved here loads and trains on the two other backends ---

# Each file: loaded, its predictions and loss config reported, then one `fit` step. A file
# compiled on PyTorch stores PyTorch's own optimizer class (Keras' doing): elsewhere it loads
# with Keras' public class named in `custom_objects`, as docs/guide/backends.md says. On JAX a
# `CenterLoss` model saved on TensorFlow (whose centers are the loss' own variable) gets its
# loss' centers layer appended and is compiled again, as the loss' error message says.
LOAD_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import keras
    import numpy as np
    import tf_svmax.losses
    x, y = np.load(sys.argv[1]), np.load(sys.argv[2])
    saved_on = sys.argv[3]
    custom = {"Adam": keras.optimizers.Adam} if saved_on == "torch" else None
    results = []
    for path in sys.argv[4:]:
        model = keras.saving.load_model(path, custom_objects=custom)
        loss = model.loss
        result = {
            "backend": keras.backend.backend(),
            "loss": type(loss).__name__,
            "config": loss.get_config(),
            "prediction": np.asarray(model.predict(x, verbose=0)).tolist(),
            "iterations": int(model.optimizer.iterations),
        }
        if keras.backend.backend() == "torch":
            # A file saved on JAX stores `jit_compile=True`: torch.compile here, a minute per
            # model on a small CPU; the backends page says to switch it off after loading.
            model.jit_compile = False
        layer = getattr(loss, "centers_layer", None)
        if keras.backend.backend() == "jax" and layer is not None and layer not in model.layers:
            optimizer = model.optimizer
            model = keras.Sequential([model, layer])
            model.compile(optimizer=optimizer, loss=loss)
        before = [np.array(w) for w in model.trainable_weights]
        history = model.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
        after = [np.array(w) for w in model.trainable_weights]
        result["fit_loss"] = history.history["loss"][0]
        result["trained"] = all(np.isfinite(w).all() for w in after) and any(
            not np.array_equal(a, b) for a, b in zip(after, before)
        )
        results.append(result)
    print(json.dumps(results))
    """
)


def _center_loss():
    loss = L.CenterLoss(num_classes=6, embedding_dim=4, lambda_=0.5, seed=3)
    # TensorFlow keeps the centers in the loss; JAX needs (PyTorch takes) its layer in the model.
    return loss, [] if loss.centers_layer is None else [loss.centers_layer]


def _memory_loss():
    loss = L.CrossBatchMemory(L.TripletSemiHardLoss(), memory_size=24)
    return loss, [loss.memory]


# Saved here, loaded on each other backend (one process per backend for all of them: each
# process start imports a backend, seconds apiece). name -> () -> (loss, layers after the
# embeddings); the first step's loss on the other backend is compared where it is this
# backend's `evaluate` (every loss but the memory's, whose training step reads the memory).
SAVED_LOSSES = {
    "semihard": lambda: (L.TripletSemiHardLoss(margin=0.3, distance_metric="angular"), []),
    "pk_npair+svmax": lambda: (
        L.RegularizedLoss(L.PKNpairLoss(l2_reg=0.01), [L.SVMaxLoss(lambda_=0.2)]),
        [],
    ),
    "center": _center_loss,
    "memory": _memory_loss,
}


def _portable_config(config):
    # `centers_name` names the centers layer where there is one (not on TensorFlow).
    config = json.loads(json.dumps(config))
    config.pop("centers_name", None)
    return config


def test_keras_files_saved_here_load_and_train_on_the_next_backend(tmp_path):
    x, w0 = _data(4, 12)
    y = np.repeat(np.arange(6), 2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    paths, expected = [], []
    for name, make in SAVED_LOSSES.items():
        loss, layers = make()
        model = _linear_model(w0, layers)
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
        model.fit(x, y, batch_size=12, epochs=1, shuffle=False, verbose=0)
        paths.append(tmp_path / f"{name}.keras")
        model.save(paths[-1])
        value = None if name == "memory" else model.evaluate(x, y, batch_size=12, verbose=0)
        expected.append((loss, model.predict(x, verbose=0), value))
    backend = backends.next_backend()
    got = backends.run_script(
        LOAD_SCRIPT,
        tmp_path / "x.npy",
        tmp_path / "y.npy",
        backends.BACKEND,
        *paths,
        backend=backend,
        cwd=backends.ROOT,
    )
    for result, (loss, prediction, value), name in zip(got, expected, SAVED_LOSSES, strict=True):
        where = f"{name} saved on {backends.BACKEND}, loaded on {backend}"
        assert result["backend"] == backend, where
        assert result["loss"] == type(loss).__name__, where
        assert _portable_config(result["config"]) == _portable_config(loss.get_config()), where
        np.testing.assert_allclose(
            np.asarray(result["prediction"]),
            backends.to_numpy(prediction),
            rtol=1e-6,
            atol=1e-6,
            err_msg=where,
        )
        # The optimizer's state came along (one step taken before saving), and it trains.
        assert result["iterations"] == 1 and result["trained"], where
        if value is not None:
            assert result["fit_loss"] == pytest.approx(value, rel=RTOL), where


STATE_LAYERS = {
    "CrossBatchMemoryBank": lambda **kw: L.CrossBatchMemoryBank(8, **kw),
    "ClassCenters": lambda **kw: L.ClassCenters(3, 4, seed=0, **kw),
    "SpreadOutDraws": lambda **kw: L.SpreadOutDraws(seed=1, **kw),
}


def test_every_registered_state_layer_is_checked():
    assert sorted(STATE_LAYERS) == sorted(e.name for e in _registry.entries("layer"))


@pytest.mark.parametrize("name", sorted(STATE_LAYERS))
def test_state_layers_are_never_trainable(name):
    """The layers that hold a loss' state refuse ``trainable=True`` by name and rebuild from
    their config (which carries ``trainable=False``)."""
    with pytest.raises(ValueError, match=r"Invalid value for argument `trainable`.*False \("):
        STATE_LAYERS[name](trainable=True)
    layer = STATE_LAYERS[name]()
    again = type(layer).from_config(layer.get_config())
    assert not again.trainable and again.get_config() == layer.get_config()
