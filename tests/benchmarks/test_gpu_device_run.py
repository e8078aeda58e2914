"""benchmarks/gpu_device_run.sh (issue 58's one call of the GPU machine) on the CPU with tiny
settings: no wheels to install, the tiny grid, one backend-neutral test file per backend. It
must leave in $OUT what the device tool brings back: at most 8 files, each a plain file directly
in $OUT, the JUnit reports of both backends among them."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

from tests.benchmarks import ROOT

EXPECTED = {
    "run.log",
    "gpu.json",
    "gpu.csv",
    "gpu.png",
    "junit_jax.xml",
    "junit_torch.xml",
    "tests_jax.log",
    "tests_torch.log",
}


def test_the_device_script_leaves_every_report_in_out(tmp_path):
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OUT": str(out),
        "PYTHON": sys.executable,
        "GPU_RUN_SKIP_INSTALL": "1",
        "GPU_RUN_GRID": "tiny",
        # The benchmark's rows are tests/benchmarks/test_gpu.py's: here a spent budget (every case
        # recorded as skipped) keeps the CPU time to the script's own steps.
        "GPU_RUN_BENCH_BUDGET_S": "1",
        "GPU_RUN_TOTAL_S": "3000",
        "GPU_RUN_TESTS": "tests/test_checks.py",
        "GPU_RUN_TEST_WORKERS": "0",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_device_run.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert set(os.listdir(out)) == EXPECTED
    assert all((out / name).is_file() and (out / name).stat().st_size > 0 for name in EXPECTED)
    for backend in ("jax", "torch"):
        suite = ET.parse(out / f"junit_{backend}.xml").getroot().find("testsuite")
        assert int(suite.get("tests")) > 0, backend
        assert suite.get("failures") == "0" and suite.get("errors") == "0", backend
    log = (out / "run.log").read_text()
    assert "benchmark exit status 0" in log and "tests on jax: exit status 0" in log
    assert "tests on torch: exit status 0" in log and "done after" in log
