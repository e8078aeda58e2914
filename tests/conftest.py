import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

TESTS = Path(__file__).resolve().parent
# The backend Keras will use in this process (fixed at its first import; Keras' own default).
BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
# The tests of the backend-neutral core: with KERAS_BACKEND=jax or torch only these files are
# collected (tasks.py runs them once per backend, each in its own process); every other test
# imports TensorFlow or tests a surface that is TensorFlow by nature.
ALL_BACKENDS = (
    "test_backend_helpers.py",
    "test_backend_ops.py",
    "test_checks.py",
    "test_docs_backends.py",
    "data/test_pk_sampler.py",
    "losses/test_center_backends.py",
    "losses/test_common.py",
    "losses/test_data_parallel_backends.py",
    "losses/test_loss_classes_backends.py",
    "losses/test_lorac_backends.py",
    "losses/test_nan_propagation_backends.py",
    "losses/test_paper_functions_backends.py",
    "losses/test_reference_rows.py",
    "losses/test_spectral_losses_backends.py",
    "losses/test_tfa_functions_backends.py",
    "losses/test_xbm_backends.py",
    "losses/test_xml_backends.py",
    "metrics/test_callbacks.py",
    "metrics/test_classification.py",
    "metrics/test_kmeans.py",
    "metrics/test_retrieval.py",
    "metrics/test_spectral_metrics_backends.py",
    "models/test_backbones.py",
    "models/test_heads_backends.py",
    "models/test_two_head.py",
    "ops/test_custom_gradient_errors.py",
    "ops/test_distances.py",
    "ops/test_ole.py",
    "ops/test_prototypes.py",
    "ops/test_ring.py",
    "ops/test_spectral.py",
    "regularizers/test_spectral_regularizers_backends.py",
    "training/test_schedules.py",
    "trainers/harness/test_runtime.py",
)


def pytest_ignore_collect(collection_path, config):
    if BACKEND == "tensorflow" or collection_path.suffix != ".py":
        return None
    if collection_path.name == "conftest.py" or collection_path.is_dir():
        return None
    relative = collection_path.resolve().relative_to(TESTS).as_posix()
    return relative not in ALL_BACKENDS or None


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# A test's user property (``record_property``): a dict key -> the largest relative error of its
# checks against a reference. Not a check (the test's asserts are): the terminal summary prints
# the maximum per key over the run's passed tests, for the record. Properties reach the
# summary from pytest-xdist's workers too.
MAX_RELATIVE_ERROR = "max_relative_error"


def pytest_terminal_summary(terminalreporter):
    worst = {}
    for report in terminalreporter.stats.get("passed", []):
        for name, errors in report.user_properties:
            if name == MAX_RELATIVE_ERROR:
                for key, error in errors.items():
                    worst[key] = max(worst.get(key, 0.0), error)
    if worst:
        terminalreporter.section(f"max relative errors against the references ({BACKEND})")
        for key in sorted(worst):
            terminalreporter.write_line(f"{key}: {worst[key]:.2e}")
