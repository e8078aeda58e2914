"""The LORAC / XML evidence program end to end on a tiny grid, and its refusals."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*flags):
    return subprocess.run(
        [sys.executable, "-m", "trainers.reproduce_lorac_xml", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_tiny_grid_writes_table_figure_and_record(tmp_path):
    table = tmp_path / "report.md"
    done = _run(
        f"--output_dir={tmp_path / 'runs'}",
        "--seeds=0",
        "--methods=lorac",
        # One step each: every run evaluates at steps 0 and 1 (each evaluation a linear probe
        # or an open-set retrieval pass, most of the run), which the table's rows need.
        "--contrastive_train_steps=1",
        "--xml_train_steps=1",
        "--test_views=2",  # the paper's 32 views of every held-out image cost most of the run
        f"--table={table}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = table.read_text()
    assert "| LORAC (β = 2) |" in text and "| MoCo-M (β = ∞) |" not in text
    assert "| Untrained encoder (step 0) |" in text
    assert "Test ‖Q̂‖* (2 views)" in text and "32 views" not in text
    assert "| Contrastive + XML (λ = 0.01) |" in text
    record = json.loads(table.with_suffix(".json").read_text())
    assert set(record["contrastive"]) == {"lorac"}
    assert set(record["xml"]) == {"lambda=0", "lambda=0.01"}
    assert record["contrastive"]["lorac"][0]["status"] == "completed"
    assert table.with_suffix(".png").exists()
    assert (tmp_path / "runs" / "xml" / "lambda0.01_s0" / "results.json").exists()


def test_refuses_before_work(tmp_path):
    done = _run(f"--output_dir={tmp_path}", "--methods=simclr")
    assert done.returncode == 2 and "--methods='simclr'" in done.stderr
    assert not any(tmp_path.iterdir())
