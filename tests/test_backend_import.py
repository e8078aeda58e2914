"""`tf_svmax` on Keras' JAX and PyTorch backends: the backend-neutral core imports without
TensorFlow (also where TensorFlow is not installed), and everything else refuses in one sentence
(tf_svmax/_backend/). Each case is a fresh process: Keras fixes its backend at import."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Makes `import tensorflow` fail as in an environment where it is not installed.
NO_TENSORFLOW = "import sys; sys.modules['tensorflow'] = None\n"


def _python(code, backend):
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_core_imports_no_tensorflow_and_runs(backend):
    done = _python(
        NO_TENSORFLOW
        + "import numpy as np, tf_svmax\n"
        + "x = np.random.default_rng(0).normal(size=(6, 4)).astype('float32')\n"
        + "s = tf_svmax.ops.singular_values(x)\n"
        + "np.testing.assert_allclose(np.asarray(s), np.linalg.svd(x, compute_uv=False),"
        + " rtol=1e-5)\n"
        + "print(sorted(m for m, module in sys.modules.items()"
        + " if m.split('.')[0] == 'tensorflow' and module is not None))",
        backend,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_training_has_its_schedule_and_refuses_the_tensorflow_pieces_by_name(backend):
    """tf_svmax.training imports without TensorFlow with its schedule (the closed form's value
    at the middle of the decay); each TensorFlow-only name refuses in one sentence saying why,
    both ways in (``from tf_svmax.training import X`` and ``tf_svmax.training.X``)."""
    done = _python(
        NO_TENSORFLOW + "import tf_svmax\n"
        "from tf_svmax.training import ConstantThenPolynomialDecay\n"
        "print(round(float(ConstantThenPolynomialDecay(1.0, 100, 0.0)(75)), 6))\n"
        "for name in ('ContrastiveModel', 'FunctionalAdam'):\n"
        "    for get in (lambda: __import__('tf_svmax.training', fromlist=[name]),\n"
        "                lambda: getattr(tf_svmax.training, name)):\n"
        "        try:\n"
        "            getattr(get(), name)\n"
        "            print('imported', name)\n"
        "        except ImportError as error:\n"
        "            print(error)\n"
        "try:\n"
        "    tf_svmax.training.NoSuchName\n"
        "except AttributeError:\n"
        "    print('AttributeError')\n",
        backend,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "0.5"
    tail = (
        f"; this process uses KERAS_BACKEND='{backend}'. On {backend} use the backend-neutral "
        "tf_svmax.ops, tf_svmax.checks, tf_svmax.losses, tf_svmax.regularizers, "
        "tf_svmax.metrics, tf_svmax.models and the schedules of tf_svmax.training, or set "
        "KERAS_BACKEND=tensorflow before Keras is imported (see the Backends page of the docs)."
    )
    for line in lines[1:3]:
        assert line.startswith(
            "tf_svmax.training.ContrastiveModel runs on Keras' TensorFlow backend only "
            "(ContrastiveModel's train step takes its gradient with tf.GradientTape"
        ) and line.endswith(tail)
    for line in lines[3:5]:
        assert line.startswith(
            "tf_svmax.training.FunctionalAdam runs on Keras' TensorFlow backend only (the "
            "unrolled GAN's Adam"
        ) and line.endswith(tail)
    assert lines[5:] == ["AttributeError"]


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_losses_package_imports_every_loss_without_tensorflow(backend):
    """tf_svmax.losses imports without TensorFlow, with every loss class and function (on
    keras.ops: every backend), the cross-batch memory and the center loss included (it is
    constructed, with its ClassCenters layer); an unknown name is a plain AttributeError."""
    done = _python(
        NO_TENSORFLOW + "import tf_svmax, tf_svmax.losses._common\n"
        "from tf_svmax.losses import FunctionLoss, OLELoss, RegularizedLoss, SVMaxLoss\n"
        "from tf_svmax.losses import TripletSemiHardLoss, LiftedStructLoss, PKNpairLoss\n"
        "from tf_svmax.losses import triplet_semihard_loss, lifted_struct_loss, get\n"
        "from tf_svmax.losses import LORACLoss, lorac_loss, XMLLoss\n"
        "from tf_svmax.losses import CrossBatchMemory, CrossBatchMemoryBank\n"
        "from tf_svmax.losses import CenterLoss, ClassCenters\n"
        "print(sorted(tf_svmax.losses.__all__))\n"
        "print(type(CenterLoss(3, 2, seed=0).centers_layer).__name__)\n"
        "try:\n"
        "    tf_svmax.losses.NoSuchLoss\n"
        "except AttributeError as error:\n"
        "    print('AttributeError')\n"
        "print(hasattr(tf_svmax.losses, '__wrapped__'))\n",
        backend,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    # Every registered name (tf_svmax.losses._registry), read in this process.
    from tf_svmax.losses import _registry

    ported = {"get", *_registry.public_names()}
    exported = set(ast.literal_eval(lines[0]))
    assert exported == ported
    assert lines[1:] == ["ClassCenters", "AttributeError", "False"]


# A small retrieval run without TensorFlow: the callback embeds through a Keras model on the
# process' backend and writes its JSON lines; the values are checked against the float64 NumPy
# references of tests/reference_retrieval.py.
_METRICS_RUN = """
import json, tempfile
import keras, numpy as np
from tests.reference_retrieval import brute_map_at_r, brute_recall
from tf_svmax.metrics import RetrievalEvaluation, map_at_r, nmi, recall_at_k, mode_coverage
from tf_svmax.metrics import knn_accuracy, linear_probe_accuracy
rng = np.random.default_rng(0)
x = rng.standard_normal((40, 5)).astype('float32')
y = np.repeat(np.arange(8), 5)
np.testing.assert_allclose(recall_at_k(x, y, ks=(1, 4))[4], brute_recall(x, y, 4))
np.testing.assert_allclose(map_at_r(x, y), brute_map_at_r(x, y))
assert 0 <= nmi(x, y, seed=0) <= 1
assert 0 <= knn_accuracy(x, y, x, y, k=3) <= 1 and 0 <= linear_probe_accuracy(x, y, x, y) <= 1
assert mode_coverage(np.zeros((4, 2)), np.zeros((1, 2)), 0.1)['modes_covered'] == 1
model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4)])
log_dir = tempfile.mkdtemp()
callback = RetrievalEvaluation(x, y, log_dir=log_dir, compute_nmi=False)
callback.set_model(model)
record = callback.evaluate(step=3)
embedded = keras.ops.convert_to_numpy(model(x))
np.testing.assert_allclose(record['recall_at_1'], brute_recall(embedded, y, 1))
line = json.loads(open(log_dir + '/scalars.jsonl').read())
assert line['step'] == 3 and line['test_recall_at_1'] == record['recall_at_1']
"""


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_regularizers_and_every_metric_import_and_run_without_tensorflow(backend):
    """tf_svmax.regularizers and every name of tf_svmax.metrics import without TensorFlow; the
    retrieval metrics, the probes, mode coverage and `RetrievalEvaluation` run and agree with
    the NumPy references."""
    done = _python(
        NO_TENSORFLOW + "import tf_svmax\n"
        "from tf_svmax.regularizers import SVMaxRegularizer\n"
        "from tf_svmax.metrics import MeanSingularValue, SingularValueBound, svmax_metrics\n"
        + _METRICS_RUN
        + "print(sorted(tf_svmax.metrics.__all__))\n",
        backend,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    exported = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert {"RetrievalEvaluation", "recall_at_k", "map_at_r", "nmi", "mode_coverage"} <= set(
        exported
    )


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_models_build_train_and_save_without_tensorflow(backend, tmp_path):
    """tf_svmax.models without TensorFlow: an embedding model (batch norm's synchronization
    choice asks no tf.distribute), the two-head model and CosineProxies build, take a `fit`
    step and round-trip through a `.keras` file."""
    done = _python(
        NO_TENSORFLOW + "import keras, numpy as np\n"
        "from tf_svmax import losses, models\n"
        "x = np.random.default_rng(0).random((8, 16, 16, 1)).astype('float32')\n"
        "y = np.repeat(np.arange(4), 2)\n"
        "net = models.build_embedding_model('small_cnn_bn', input_shape=(16, 16, 1),"
        " embedding_dim=4)\n"
        "proxies = models.CosineProxies(4)(net.output)\n"
        "model = keras.Model(net.input, proxies)\n"
        "model.compile('sgd', loss=losses.ProxyAnchorLoss())\n"
        "model.fit(x, y, batch_size=8, epochs=1, verbose=0)\n"
        f"model.save({str(tmp_path / 'm.keras')!r})\n"
        f"loaded = keras.saving.load_model({str(tmp_path / 'm.keras')!r})\n"
        "np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),"
        " atol=1e-6)\n"
        "two_head = models.build_two_head_model('small_cnn', input_shape=(16, 16, 1),"
        " num_classes=3)\n"
        "print(sorted(two_head(x)), sys.modules['tensorflow'])\n",
        backend,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['embedding', 'features', 'logits'] None"


def test_tf_data_input_without_tensorflow_names_the_install_command():
    # The embedded sets and the in-memory P x K batches import and run without TensorFlow;
    # a tf.data name refuses, naming the install command.
    done = _python(
        NO_TENSORFLOW
        + "from tf_svmax import data\n"
        + "x, y = data.load_digits_open_set()['train']\n"
        + "print(data.PKBatches(x, y, batch_p=2, batch_k=3, seed=0)[0][0].shape)\n"
        + "from tf_svmax.data import pk_batches",
        "jax",
    )
    assert done.returncode == 1
    assert done.stdout.strip() == "(6, 8, 8, 1)", done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: tf_svmax.data.pk_batches needs TensorFlow, which is not installed in this "
        "environment: pip install -e '.[cpu]' in the clone of the repository (or '.[gpu]', or "
        "your own tensorflow>=2.16)."
    ), done.stderr[-2000:]


def test_records_name_the_backend_without_importing_tensorflow():
    done = _python(
        NO_TENSORFLOW
        + "import json, tf_svmax.records as r\n"
        + "env = r.environment()\n"
        + "print(json.dumps([env['versions']['keras_backend'], env['machine']['gpus'],"
        + " sys.modules['tensorflow'] is not None]))",
        "jax",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == '["jax", [], false]'
