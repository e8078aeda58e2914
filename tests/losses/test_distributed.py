"""Batch-level losses, regularizers and metrics under tf.distribute.MirroredStrategy.

One SGD step (and, where a loss allows a remainder batch, a second step on an uneven 3-row
batch: 2 + 1 rows over 2 replicas, 1 + 1 + 1 + 0 over 4) on 2 and 4 logical CPU devices must
equal the same steps on one device (`tests/distributed_probe.py`, one process per replica
count). The reference is the one-device run of the same loss on the concatenated batch; the
opt-out (`global_batch=False`) is compared with one device averaging the loss over the
replicas' slices.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def probes():
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    runs = {
        replicas: subprocess.Popen(
            [sys.executable, "-m", "tests.distributed_probe", str(replicas)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        for replicas in (2, 4)
    }
    out = {}
    for replicas, run in runs.items():
        stdout, stderr = run.communicate(timeout=1500)
        assert run.returncode == 0, stderr[-3000:]
        out[replicas] = json.loads(stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("replicas", [2, 4])
def test_one_step_equals_the_single_device_step_on_the_global_batch(probes, replicas):
    cases = probes[replicas]["cases"]
    assert len(cases) == 15
    for case, row in cases.items():
        for size in ("even", "uneven"):
            if f"{size}_step" not in row:
                continue
            # The step itself is far larger than the tolerance, so equality means something.
            assert row[f"{size}_step"] > 1e-3, (case, size, row)
            assert row[f"{size}_weight_error"] < TOLERANCE, (case, size, row)


@pytest.mark.parametrize("replicas", [2, 4])
def test_evaluate_reports_the_single_device_values(probes, replicas):
    for case, row in probes[replicas]["cases"].items():
        if case == "svmax_regularizer":
            continue  # Keras' logged total for a gathered activity loss: see the README.
        for size in ("even", "uneven"):
            if f"{size}_logs" not in row:
                continue
            single, many = row[f"{size}_logs"]["single"], row[f"{size}_logs"]["replicas"]
            assert single.keys() == many.keys()
            for name, value in single.items():
                assert abs(many[name] - value) <= TOLERANCE * max(1.0, abs(value)), (case, name)
    assert "mean_singular_value" in probes[replicas]["cases"]["svmax"]["even_logs"]["single"]


@pytest.mark.parametrize("replicas", [2, 4])
def test_opt_out_is_the_average_of_per_replica_losses(probes, replicas):
    cases = probes[replicas]["cases"]
    compared = [case for case, row in cases.items() if "opt_out_vs_per_replica" in row]
    assert len(compared) == 12
    for case in compared:
        row = cases[case]
        assert row["opt_out_vs_per_replica"] < TOLERANCE, (case, row)
    # Per-replica evaluation is a different loss for everything that mixes rows across the
    # batch: the reason global batches are the default. (P x K contrastive pairs stay inside
    # each class block, so its per-replica loss is the global one.)
    for case in ("svmax", "ole", "triplet_semihard", "batch_hard", "pk_npair", "proxy_anchor"):
        assert cases[case]["opt_out_vs_global"] > 1e-3, (case, cases[case])


@pytest.mark.parametrize("replicas", [2, 4])
def test_reduction_none_gives_each_replica_its_own_rows(probes, replicas):
    assert probes[replicas]["per_row_error"] < TOLERANCE


def test_center_loss_refuses_per_replica_centers(probes):
    assert "global_batch=False" in probes[2]["center_opt_out"]
