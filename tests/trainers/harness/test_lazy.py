"""`trainers.harness.lazy`: an experiment package's names are imported when first read, each
from its own submodule (the config without the training code), and bound as eager imports
would bind them."""

import subprocess
import sys
import textwrap
from pathlib import Path

# A package with a light submodule (as the config is), its training code ("heavy", which records
# its import and imports another listed submodule itself) and a function named as its own
# module (two_head's `evaluate` is so).
PACKAGE = {
    "pkg/__init__.py": """
        from trainers.harness import lazy
        EAGER = 0
        __getattr__, __all__ = lazy.exports(
            __name__,
            {"light": ("LIGHT",), "heavy": ("run", "CONSTANT"), "evaluate": ("evaluate",)},
        )
    """,
    "pkg/light.py": """
        LIGHT = 1
    """,
    "pkg/heavy.py": """
        import sys
        import pkg.evaluate
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
assert pkg.EAGER == 0 and not {"pkg.light", "pkg.heavy", "pkg.evaluate"} & set(sys.modules)
# Every public name, imported or lazy, once; not the `lazy` module the package imported.
assert pkg.__all__ == ["CONSTANT", "EAGER", "LIGHT", "evaluate", "run"], pkg.__all__
assert pkg.LIGHT == 1 and "pkg.light" in sys.modules  # its own submodule only
assert "pkg.heavy" not in sys.modules and "pkg.evaluate" not in sys.modules
assert pkg.run() == "ran" and pkg.imported == 1
# heavy imported pkg.evaluate, which bound the module as the package's `evaluate`: rebound to
# the function, as eager imports would have left it.
assert "pkg.evaluate" in sys.modules and "evaluate" in vars(pkg)
assert pkg.evaluate() == "evaluated"
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
