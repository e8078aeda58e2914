"""The backends in one place (issue 60): every backend-specific primitive lives in
`tf_svmax._backend`, one module per Keras backend, and the backend-neutral library (losses,
ops, regularizers, metrics, checks) compares no backend names and imports no TensorFlow. Read
from the source, so the check needs no backend of its own."""

import ast
import re
from pathlib import Path

import tf_svmax
from tf_svmax.ops import replicas

PACKAGE = Path(tf_svmax.__file__).resolve().parent
NEUTRAL = ("losses", "ops", "regularizers", "metrics")
# A TensorFlow import or a comparison of backend names, in either spelling.
BACKEND_SPECIFIC = re.compile(r"import tensorflow|backend\(\) *[!=]=|BACKEND *[!=]=")
# TensorFlow's only: the `tf.distribute` replica context's helpers (the context is None elsewhere,
# and nothing calls them there; `ops.replicas` reaches them where it exists) and the first
# replica's variable.
TENSORFLOW_ONLY = {*replicas.CONTEXT_HELPERS, "first_replica_variable"}


def test_the_backend_neutral_library_has_no_backend_specific_lines():
    files = [PACKAGE / "checks.py"]
    files += sorted(path for name in NEUTRAL for path in (PACKAGE / name).rglob("*.py"))
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BACKEND_SPECIFIC.search(line)
    ]
    assert found == []


def _exported(module):
    """The names in `__all__` of `tf_svmax/_backend/<module>.py`, read without importing it."""
    tree = ast.parse((PACKAGE / "_backend" / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__all__"]:
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"_backend/{module}.py has no __all__")


def test_each_backend_module_defines_the_same_primitives():
    tensorflow, jax, torch = (_exported(name) for name in ("tensorflow", "jax", "torch"))
    assert jax == torch
    assert tensorflow - TENSORFLOW_ONLY == jax
    assert TENSORFLOW_ONLY <= tensorflow


def test_each_exported_name_is_defined_in_its_module():
    for module in ("tensorflow", "jax", "torch"):
        tree = ast.parse((PACKAGE / "_backend" / f"{module}.py").read_text())
        defined = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.ImportFrom):
                defined.update(alias.asname or alias.name for alias in node.names)
        assert _exported(module) <= defined, module
