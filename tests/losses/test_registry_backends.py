"""Every loss of the registry (`tf_svmax.losses._registry`, filled by `register` where each loss
is defined), on every Keras backend: no table of loss names here, so a new loss is checked the
moment its module is imported by `tf_svmax/losses/__init__.py`.

For each loss class: its config round trip (through JSON), its string name
(``"tf_svmax>Name"`` in `get` and `keras.losses.get`, or, for a loss whose constructor needs
arguments, a refusal naming them), a `.keras` round trip of a model compiled with it (the same
loss class and config), `CrossBatchMemory` and `XMLLoss` accepting it exactly when its declared
capabilities say so (``accepts_reference_rows``, ``ranks_embeddings``) and then computing a
finite value, and one `fit` step that moves the weights. For each loss function: its string
name and its saved name. The values are the reference tests' business (one per loss module);
this file checks what every loss must do to be one of the library's.

A loss whose constructor needs arguments has a line in `EXAMPLES`; one whose ``y_pred`` is no
embedding matrix ``[B, D]`` (``ranks_embeddings`` is False and it is no regularizer) a line in
`OUTPUTS`. A loss on labels and embeddings constructible with its defaults needs nothing here.

Runs once per backend (marked all_backends: tests/conftest.py)."""

import ast
import json
import pathlib

import keras
import numpy as np
import pytest

import tf_svmax.losses as L
from tests import backends
from tf_svmax.losses import _registry

pytestmark = pytest.mark.all_backends

ROWS, DIM = 16, 4


def _labels(k=2):
    """``ROWS`` labels, ``ROWS / k`` classes of ``k`` consecutive rows (a P x K batch)."""
    return np.repeat(np.arange(ROWS // k), k).astype("int32")


# The losses whose constructor needs arguments: how to make one (each wraps or holds something).
EXAMPLES = {
    "CenterLoss": lambda: L.CenterLoss(num_classes=ROWS // 2, embedding_dim=DIM, seed=0),
    "CrossBatchMemory": lambda: L.CrossBatchMemory(L.TripletSemiHardLoss(), memory_size=32),
    "FunctionLoss": lambda: L.FunctionLoss(L.batch_hard_triplet_loss),
    "RegularizedLoss": lambda: L.RegularizedLoss(L.PKNpairLoss(), [L.SVMaxLoss(lambda_=0.1)]),
    "XMLLoss": lambda: L.XMLLoss(L.BatchHardTripletLoss(), num_prototypes=2),
}

# The losses whose y_pred is no embedding matrix: (the model's output width, y_true).
_MULTI_HOT = (np.random.default_rng(1).random((ROWS, 5)) < 0.4).astype("float32")
_MULTI_HOT[:, 0] = 1.0  # every row has a label
OUTPUTS = {
    "ContrastiveLoss": (1, (np.arange(ROWS) % 2).astype("float32")[:, None]),  # pair distances
    "NpairsLoss": (ROWS, _labels()),  # a similarity matrix
    "NpairsMultilabelLoss": (ROWS, _MULTI_HOT),
    "ProxyAnchorLoss": (ROWS // 2, _labels()),  # similarities to one proxy per class
    "XMLLoss": (DIM + 2, _labels()),  # embeddings and 2 prototype histograms
}

# Fitted through a model of its own: its y_pred is a mapping of three inputs.
FITTED_ELSEWHERE = {
    "LORACLoss": "tests/losses/test_lorac_backends.py fits it through a model's compute_loss",
}

LOSSES = sorted(e.name for e in _registry.entries("loss"))
FUNCTIONS = sorted(e.name for e in _registry.entries("function"))


def _make(name):
    return EXAMPLES[name]() if name in EXAMPLES else getattr(L, name)()


def _inputs(name, loss):
    width, y = OUTPUTS.get(name, (DIM, _labels(getattr(loss, "class_block_rows", None) or 2)))
    x = np.random.default_rng(7).standard_normal((ROWS, 6)).astype("float32")
    return x, y, width


def _model(loss, width):
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(width), *getattr(loss, "state_layers", [])]
    )
    # Eagerly: the memory and XML refuse a JAX trace by name (tests/losses/test_xbm_backends.py,
    # test_xml_backends.py run them compiled where they can).
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss, run_eagerly=True)
    return model


def test_every_public_loss_is_registered_and_exported():
    """``__all__`` is the registry's names and `get`; every loss or layer class that a module of
    the package defines is registered; the package's ``__init__`` imports every registered name
    (what the API page's griffe extension, docs/_griffe/registry_exports.py, reads)."""
    assert sorted(L.__all__) == sorted(["get", *_registry.REGISTRY])
    for name, entry in _registry.REGISTRY.items():
        assert getattr(L, name) is entry.obj, name
    defined = {
        obj.__name__
        for module in {e.obj.__module__ for e in _registry.entries()}
        for obj in vars(__import__(module, fromlist=["_"])).values()
        if isinstance(obj, type)
        and issubclass(obj, (keras.losses.Loss, keras.layers.Layer))
        and obj.__module__ == module
        and not obj.__name__.startswith("_")
    }
    assert defined <= set(_registry.REGISTRY)
    source = pathlib.Path(L.__file__).read_text(encoding="utf-8")
    imported = {
        alias.asname or alias.name
        for node in ast.parse(source).body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tf_svmax.losses.")
        for alias in node.names
    }
    assert imported == set(_registry.REGISTRY)


@pytest.mark.parametrize("name", LOSSES)
def test_config_round_trip(name):
    loss = _make(name)
    config = json.loads(json.dumps(loss.get_config()))
    again = type(loss).from_config(config)
    assert type(again) is type(loss)
    assert json.loads(json.dumps(again.get_config())) == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss)


@pytest.mark.parametrize("name", LOSSES)
def test_string_name(name):
    entry = _registry.REGISTRY[name]
    assert keras.saving.get_registered_name(entry.obj) == f"tf_svmax>{name}"
    if entry.required_arguments:
        assert name in EXAMPLES, f"{name} needs arguments: add how to make one to EXAMPLES"
        with pytest.raises(ValueError, match=f"needs arguments \\({entry.required_arguments[0]}"):
            L.get(f"tf_svmax>{name}")
        return
    assert type(L.get(f"tf_svmax>{name}")) is entry.obj
    assert type(keras.losses.get(f"tf_svmax>{name}")) is entry.obj


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_names(name):
    function = _registry.REGISTRY[name].obj
    assert L.get(f"tf_svmax>{name}") is function
    assert keras.losses.get(f"tf_svmax>{name}") is function
    assert keras.saving.get_registered_name(function) == f"tf_svmax>{name}"
    assert keras.saving.get_registered_object(f"tf_svmax>{name}") is function


@pytest.mark.parametrize("name", LOSSES)
def test_the_memory_and_xml_accept_it_as_its_capabilities_say(name):
    loss = _make(name)
    x, y, width = _inputs(name, loss)
    embeddings = x[:, :DIM]
    if getattr(loss, "accepts_reference_rows", False):
        memory = L.CrossBatchMemory(loss, memory_size=32)
        value = memory(y, embeddings)
        assert np.isfinite(backends.to_numpy(value))
    else:
        with pytest.raises(ValueError, match="argument `loss`.*accepts reference rows"):
            L.CrossBatchMemory(loss, memory_size=32)
    if getattr(loss, "ranks_embeddings", False):
        histograms = np.abs(x[:, DIM : DIM + 2])
        y_pred = np.concatenate([embeddings, histograms], axis=1)
        value = L.XMLLoss(loss, num_prototypes=2)(y, y_pred)
        assert np.isfinite(backends.to_numpy(value))
        # Without the cross-batch term (lambda 0) XML is the loss itself (XML Eq. 2.11).
        alone = L.XMLLoss(loss, num_prototypes=2, lambda_=0.0, normalize=False)(y, y_pred)
        np.testing.assert_allclose(
            backends.to_numpy(alone), backends.to_numpy(loss(y, embeddings)), rtol=1e-6
        )
    else:
        with pytest.raises(ValueError, match="argument `loss`.*ranking loss"):
            L.XMLLoss(loss, num_prototypes=2)


@pytest.mark.parametrize("name", LOSSES)
def test_keras_file_round_trip_and_one_fit_step(name, tmp_path):
    loss = _make(name)
    if name in FITTED_ELSEWHERE:
        pytest.skip(FITTED_ELSEWHERE[name])
    x, y, width = _inputs(name, loss)
    model = _model(loss, width)
    before = backends.to_numpy(model.layers[0].kernel).copy()
    history = model.fit(x, y, batch_size=ROWS, epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    after = backends.to_numpy(model.layers[0].kernel)
    assert np.all(np.isfinite(after)) and not np.array_equal(after, before)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert type(loaded.loss) is type(loss)
    assert json.loads(json.dumps(loaded.loss.get_config())) == json.loads(
        json.dumps(loss.get_config())
    )
    np.testing.assert_array_equal(backends.to_numpy(loaded.layers[0].kernel), after)
