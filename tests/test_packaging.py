"""pyproject.toml's promises that are cheap to check here; .ci/check_wheel.sh builds the sdist
and the wheel and installs the wheel into a fresh environment (CI runs it after the suite)."""

import ast
from pathlib import Path

import pytest

import tf_svmax

ROOT = Path(__file__).resolve().parents[1]


def _pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_version_lives_in_tf_svmax_init_as_a_literal_read_without_tensorflow():
    # setuptools reads `attr = "tf_svmax.__version__"` statically only when it is a literal
    # assignment; anything else makes it import tf_svmax, hence TensorFlow, in the build
    # environment, where TensorFlow is not installed.
    config = _pyproject()
    assert "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tf_svmax.__version__"}
    tree = ast.parse((ROOT / "tf_svmax" / "__init__.py").read_text(encoding="utf-8"))
    literals = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
    ]
    assert literals == [tf_svmax.__version__]


def test_every_directory_of_the_library_is_a_package_the_wheel_takes():
    setuptools = pytest.importorskip("setuptools")
    include = _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    found = set(setuptools.find_packages(str(ROOT), include=include))
    with_modules = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "tf_svmax").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert with_modules <= found, "directories without __init__.py would be left out"
    assert all(name == "tf_svmax" or name.startswith("tf_svmax.") for name in found)


def test_the_library_imports_no_module_beside_its_package_and_the_wheel_takes_none():
    # The wheel takes the package only (its Keras-free argument layer is tf_svmax/_args.py,
    # issue 61): a module of the repository's top level that the library imported would be
    # missing from the installed wheel.
    imported = set()
    for path in (ROOT / "tf_svmax").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
    beside = {path.stem for path in ROOT.glob("*.py")} & imported
    assert beside == set()
    assert "py-modules" not in _pyproject()["tool"]["setuptools"]


def test_the_test_extras_take_the_docs_tools_and_test_is_cpu_plus_testtools():
    extras = _pyproject()["project"]["optional-dependencies"]
    assert extras["docs"]
    assert "tf_svmax[docs]" in extras["testtools"]
    assert set(extras["test"]) == set(extras["cpu"]) | set(extras["testtools"])


# What only the trainers and the glyph set need (issue 59: a JAX- or PyTorch-only install pulled
# them for parts that do not run there). Keras itself depends on absl-py.
TRAINERS_ONLY = {"absl-py", "tensorboard", "matplotlib", "pillow", "fonttools"}


def _names(requirements):
    """The distribution names of `requirements` (lower case, without extras and versions)."""
    import re

    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_core_needs_only_what_the_library_imports_and_the_trainers_extra_the_rest():
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    assert _names(project["dependencies"]) == {"keras", "numpy", "scikit-learn"}
    assert _names(extras["trainers"]) == TRAINERS_ONLY
    for extra in ("jax", "torch"):
        assert not _names(extras[extra]) & TRAINERS_ONLY, extra
    # The test suite runs the trainers: both test extras take them.
    assert "tf_svmax[trainers]" in extras["testtools"]


def test_tasks_py_installs_the_trainers_extra_and_the_wheel_check_the_core_without_it():
    tasks = (ROOT / "tasks.py").read_text(encoding="utf-8")
    assert 'extras = f"{tensorflow_extra()},trainers,testtools"' in tasks
    # The installed wheel's checks run without it: the core must not need it.
    check_wheel = (ROOT / ".ci" / "check_wheel.sh").read_text(encoding="utf-8")
    assert '"$WHEEL[cpu]"' in check_wheel and '"$WHEEL[jax]"' in check_wheel
    assert '"trainers"' in check_wheel  # among the extras the wheel's METADATA must list
    smoke = (ROOT / ".ci" / "backend_smoke.py").read_text(encoding="utf-8")
    assert "TRAINERS_ONLY" in smoke and "check_without_the_trainers_extra()" in smoke
