"""trainers/glyphs_report.py: the glyph set's report and sample grid."""

import os
import subprocess
import sys
from pathlib import Path

from tf_svmax.data import glyphs

ROOT = Path(__file__).resolve().parents[2]


def test_report_lists_every_merge_and_writes_the_sample(tmp_path):
    report, sample = tmp_path / "g.md", tmp_path / "g.png"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.glyphs_report",
            f"--report={report}",
            f"--sample={sample}",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = report.read_text()
    groups = glyphs.confusable_groups()
    assert f"**{len(groups['classes'])} classes** × 32 images" in text
    for group in groups["groups"]:
        line = next(line for line in text.splitlines() if line.startswith(f"- `{group[0]}` ("))
        for dropped in group[1:]:
            assert f"`{dropped}` (U+{ord(dropped):04X})" in line
    assert "R@1" in text and sample.stat().st_size > 10_000
