"""Models saved in the tensorflow-addons era load on Keras 3 after `import tf_svmax` alone.

The files are genuine: `tests/parity/generate_tfa_models.py` compiles small models with each
of TFA 0.23.0's metric-learning losses (six classes, six functions) in TF 2.15.1 and saves
them, with what TF 2.15 computed on them; `.ci/run` runs it in the legacy environment on every
CI run and passes the folder in TF_SVMAX_TFA_MODELS. Outside CI the committed copy from the same
generator is used (tests/parity/tfa_models); in CI the live folder is required.

What Keras 3 itself cannot read of those files (the `.h5` optimizer, `.keras` files' optimizer,
SavedModels) is asserted here as the migration guide states it (docs/guide/tfa-migration.md),
so that the guide fails its tests when Keras changes.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import keras
import numpy as np
import pytest

import tf_svmax
from tf_svmax import losses

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "tests" / "parity" / "tfa_models"
TOL = dict(rtol=1e-5, atol=1e-5)  # test_tfa_parity.py's


def _models_dir():
    live = os.environ.get("TF_SVMAX_TFA_MODELS")
    if live:
        return Path(live)
    if os.environ.get("CI"):
        pytest.fail(
            "CI must load freshly saved TFA-era models: TF_SVMAX_TFA_MODELS is not set "
            "(see .ci/run)."
        )
    return COMMITTED


DIR = _models_dir()
REFERENCE = np.load(DIR / "models.npz")
META = json.loads(str(REFERENCE["__meta__"]))
MODELS = {m["loss"]: m for m in META["models"]}
# The hyperparameter the generator set on each class (its config must travel).
MARGIN = {"TripletSemiHardLoss", "TripletHardLoss", "ContrastiveLoss", "LiftedStructLoss"}


def _get(name, key):
    return REFERENCE[f"{name}:{key}"]


def test_the_files_were_saved_by_tensorflow_addons_on_tf_2_15():
    assert META["tensorflow_addons"] == "0.23.0"
    assert META["tensorflow"].startswith("2.15")
    tfa_losses = {
        "TripletSemiHardLoss",
        "TripletHardLoss",
        "ContrastiveLoss",
        "LiftedStructLoss",
        "NpairsLoss",
        "NpairsMultilabelLoss",
    }
    functions = {
        "triplet_semihard_loss",
        "triplet_hard_loss",
        "contrastive_loss",
        "lifted_struct_loss",
        "npairs_loss",
        "npairs_multilabel_loss",
    }
    assert set(MODELS) == tfa_losses | functions


def _check_loss(name, loss):
    """The compiled loss Keras 3 restored is ours, with the file's configuration."""
    expected = getattr(losses, name)
    if MODELS[name]["kind"] == "function":
        assert loss is expected
        return
    assert type(loss) is expected
    if name in MARGIN:
        assert loss.margin == 0.5
    # TFA's "none" is kept (the same value on unweighted batches, test_tfa_parity.py).
    assert loss.get_config()["reduction"] in ("none", "sum_over_batch_size")


def _train_one_step(model, name):
    """Compiles again with the optimizer the file was trained with (Keras 3 does not restore a
    Keras 2 optimizer, see below), takes one step, and compares with TF 2.15's step."""
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=META["learning_rate"]), loss=model.loss
    )
    value = model.train_on_batch(_get(name, "x"), _get(name, "y"))
    np.testing.assert_allclose(value, _get(name, "loss"), **TOL)
    weights = model.get_weights()
    assert len(weights) == MODELS[name]["weights"]
    for i, weight in enumerate(weights):
        np.testing.assert_allclose(weight, _get(name, f"step_weights/{i}"), **TOL)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_h5_loads_with_our_loss_predicts_and_trains_as_tf_2_15_did(name):
    model = keras.saving.load_model(DIR / MODELS[name]["files"]["h5"])
    _check_loss(name, model.loss)
    np.testing.assert_allclose(
        model.predict(_get(name, "x"), verbose=0), _get(name, "predict"), **TOL
    )
    _train_one_step(model, name)


def test_an_h5_file_naming_the_addons_function_loads(tmp_path):
    """Some Keras 2 versions stored a compiled TFA function by its registered name
    ("Addons>triplet_semihard_loss", as in the report of issue 46) where Keras 2.15 stores its
    bare name: the genuine file with that name written into its training config."""
    path = tmp_path / "addons_name.h5"
    shutil.copy(DIR / MODELS["triplet_semihard_loss"]["files"]["h5"], path)
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["training_config"])
        assert config["loss"] == "triplet_semihard_loss"
        config["loss"] = "Addons>triplet_semihard_loss"
        f.attrs["training_config"] = json.dumps(config)
    model = keras.saving.load_model(path)
    assert model.loss is losses.triplet_semihard_loss
    _train_one_step(model, "triplet_semihard_loss")


def test_import_tf_svmax_alone_is_enough_in_a_fresh_process():
    path = DIR / MODELS["TripletSemiHardLoss"]["files"]["h5"]
    program = (
        "import keras, tf_svmax\n"
        f"model = keras.saving.load_model({str(path)!r})\n"
        "print(type(model.loss).__module__, type(model.loss).__name__, model.loss.margin)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["tf_svmax.losses.triplet", "TripletSemiHardLoss", "0.5"]


def test_our_losses_still_save_under_our_own_names():
    assert keras.saving.get_registered_name(losses.TripletSemiHardLoss) == (
        "tf_svmax>TripletSemiHardLoss"
    )
    assert keras.saving.get_registered_name(losses.npairs_loss) == "tf_svmax>npairs_loss"


def test_keras_3_does_not_restore_a_keras_2_optimizer_from_h5_as_the_guide_says():
    """Keras 3.15's legacy loader gives a default-configured optimizer of the same class
    (the file's learning rate is dropped), built for no variables: training raises until the
    model is compiled again (the guide's way out, `_train_one_step`)."""
    name = "TripletSemiHardLoss"
    model = keras.saving.load_model(DIR / MODELS[name]["files"]["h5"])
    assert not np.isclose(float(model.optimizer.learning_rate), META["learning_rate"])
    with pytest.raises(ValueError, match="Unknown variable"):
        model.train_on_batch(_get(name, "x"), _get(name, "y"))


@pytest.mark.parametrize("name", sorted(n for n, m in MODELS.items() if "keras" in m["files"]))
def test_keras_2_dot_keras_files_load_without_their_compile_config(name):
    path = DIR / MODELS[name]["files"]["keras"]
    # Keras 3 cannot deserialize Keras 2.15's optimizer (module keras.optimizers.experimental).
    with pytest.raises(TypeError, match="keras.optimizers.experimental"):
        keras.saving.load_model(path)
    model = keras.saving.load_model(path, compile=False)
    np.testing.assert_allclose(
        model.predict(_get(name, "x"), verbose=0), _get(name, "predict"), **TOL
    )
    model.compile(loss=_tfa_loss_as_generated(name))
    _check_loss(name, model.loss)
    _train_one_step(model, name)


def _tfa_loss_as_generated(name):
    loss = getattr(losses, name)
    if MODELS[name]["kind"] == "function":
        return loss
    return loss(margin=0.5) if name in MARGIN else loss()


@pytest.mark.parametrize("name", sorted(n for n, m in MODELS.items() if "savedmodel" in m["files"]))
def test_savedmodels_are_read_by_tfsmlayer_not_load_model(name):
    path = DIR / MODELS[name]["files"]["savedmodel"]
    with pytest.raises(ValueError, match="TFSMLayer"):
        keras.saving.load_model(path)
    layer = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
    (output,) = layer(_get(name, "x")).values()
    np.testing.assert_allclose(output, _get(name, "predict"), **TOL)


def test_tf_svmax_is_the_package_under_test():
    assert Path(tf_svmax.__file__).resolve().is_relative_to(ROOT)


def test_every_tfa_metric_learning_name_resolves_to_ours():
    custom_objects = keras.saving.get_custom_objects()
    for name in MODELS:
        assert custom_objects[f"Addons>{name}"] is getattr(losses, name)
        if MODELS[name]["kind"] == "function":
            assert custom_objects[name] is getattr(losses, name)
