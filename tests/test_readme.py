"""The README's Python examples run as written, each on its own in a fresh process."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def test_the_readme_has_its_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_readme_python_example_runs_alone(index, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]],
        cwd=tmp_path,  # a user's own folder, not the checkout
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"README block {index}:\n{BLOCKS[index]}\n{done.stderr[-2000:]}"


def test_the_functions_example_prints_the_bounds_it_claims():
    block = next(b for b in BLOCKS if "ops.svmax_bounds(144, 128)" in b)
    program = block + "\nprint(ops.svmax_bounds(144, 128))\n"
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lower, upper = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 (our own print)
    assert (lower, round(upper, 5)) == (0.09375, 1.06066)


def test_the_ole_example_puts_ole_on_the_features_not_the_logits():
    # The OLE paper applies OLE to the penultimate layer's features; the classifier's logits
    # take the cross-entropy.
    block = next(b for b in BLOCKS if "OLELoss" in b)
    program = block + (
        "\nole = [k for k, v in model.loss.items() if isinstance(v, tf_svmax.losses.OLELoss)]"
        "\nprint(ole, model.output[ole[0]].shape[-1], model.output['logits'].shape[-1])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['features'] 128 10"
