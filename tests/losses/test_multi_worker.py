"""Global-batch losses on MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1.

Three SGD steps of `RegularizedLoss(TripletSemiHardLoss, [SVMaxLoss])` on two workers (one CPU
replica each, TF_CONFIG, free ports) must give the weights one process gets on the same global
batches (`tests/multi_worker_probe.py`). The steps are a custom loop: Keras 3's `fit` does not
run on this strategy (keras-team/keras#20585).
"""

import subprocess
import sys
from pathlib import Path

import numpy as np

from tests import programs
from tests.cluster import finish, free_ports

ROOT = Path(__file__).resolve().parents[2]


def launch(*args):
    env = programs.checkout_env()
    env.pop("TF_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.multi_worker_probe", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def test_two_workers_train_like_one_process_on_the_global_batch(tmp_path):
    ports = ",".join(map(str, free_ports(2)))
    workers = [launch("worker", i, ports, tmp_path / f"worker{i}.npz") for i in range(2)]
    single = launch("single", tmp_path / "single.npz")
    for process in [*workers, single]:
        code, stderr = finish(process, timeout=300)
        assert code == 0, stderr[-3000:]
    reference = np.load(tmp_path / "single.npz")
    for i in range(2):
        result = np.load(tmp_path / f"worker{i}.npz")
        assert result.files == reference.files
        for name in reference.files:
            np.testing.assert_allclose(result[name], reference[name], atol=1e-5, err_msg=name)
    # The steps moved the weights far beyond the tolerance: equality is not trivial.
    assert float(reference["moved"]) > 0.05
