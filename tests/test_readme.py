"""The README's Python examples run as written (in order, sharing one namespace)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 3
    namespace = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
    lower, upper = namespace["ops"].svmax_bounds(144, 128)
    assert (lower, round(upper, 5)) == (0.09375, 1.06066)
