"""`trainers.harness.lazy`: an experiment package's training code is imported when one of its
names is first read, and then every listed name is bound as an eager import would bind it."""

import subprocess
import sys
import textwrap
from pathlib import Path

# A package whose training code ("heavy") is a submodule that records its import, with a
# function named as its own module (two_head's `evaluate` is so).
PACKAGE = {
    "pkg/__init__.py": """
        from trainers.harness import lazy
        LIGHT = 1
        __getattr__, __all__ = lazy.exports(
            __name__, {"heavy": ("run", "CONSTANT"), "evaluate": ("evaluate",)}
        )
    """,
    "pkg/heavy.py": """
        import sys
        sys.modules["pkg"].imported = sys.modules["pkg"].__dict__.get("imported", 0) + 1
        CONSTANT = 42
        def run():
            return "ran"
    """,
    "pkg/evaluate.py": """
        def evaluate():
            return "evaluated"
    """,
}

CHECK = """
import sys
import pkg
assert pkg.LIGHT == 1 and "pkg.heavy" not in sys.modules and "pkg.evaluate" not in sys.modules
# Every public name, imported or lazy, once; not the `lazy` module the package imported.
assert pkg.__all__ == ["CONSTANT", "LIGHT", "evaluate", "run"], pkg.__all__
assert pkg.run() == "ran" and pkg.imported == 1
assert "pkg.heavy" in sys.modules and "pkg.evaluate" in sys.modules  # every listed module
assert pkg.evaluate() == "evaluated"  # the function, not its module
assert pkg.CONSTANT == 42 and pkg.imported == 1  # imported once
from pkg import run  # noqa: E402
assert run is pkg.run
try:
    pkg.missing
except AttributeError as error:
    assert "module 'pkg' has no attribute 'missing'" in str(error), error
else:
    raise AssertionError("pkg.missing did not raise")
print("ok")
"""


def test_names_are_imported_on_first_read_and_bound_as_eager_imports(tmp_path):
    root = Path(__file__).resolve().parents[3]
    for name, text in PACKAGE.items():
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(text))
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{tmp_path}:{root}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr[-2000:]
