"""docs/guide/adding-a-loss.md as CI runs it: its worked example applied to a copy of the package,
the tests and the docs (the module and the reference test written from the page's blocks, the
page's import line added to `tf_svmax/losses/__init__.py`, its table row to
docs/guide/backends.md), exactly those four files changed, and the new loss's reference test,
the registry test (tests/losses/test_registry_backends.py) and the docs' checks of the lists of
losses (tests/test_docs.py) passing in a process of this backend. Marked all_backends: the JAX
and PyTorch runs apply it too."""

import filecmp
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import backends, test_docs

pytestmark = pytest.mark.all_backends

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guide" / "adding-a-loss.md"
# The page's file blocks: ```py fences (not run alone by tests/test_docs.py: they are files of
# the repository), the first line of each a comment naming its file, but the import line's.
BLOCK = re.compile(r"^```py\n(.*?)^```", re.S | re.M)
INIT = Path("tf_svmax/losses/__init__.py")
COPIED = ("tf_svmax", "tests", "docs", "README.md")  # tests/test_docs.py reads the README too
# The page's table row: a ```md block whose first line names the page and the table.
ROW_BLOCK = re.compile(r"^```md\n<!-- (\S+): a row of the table \"(.+?)\" -->\n(\|.*?\n)```", re.M)


def page_row():
    """(docs page, its table's heading, the row) of the page's table-row block."""
    (found,) = ROW_BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    return Path(found[0]), found[1], found[2]


def page_files():
    """{path: text} of the page's file blocks and the import line for `INIT`."""
    files, line = {}, None
    for block in BLOCK.findall(PAGE.read_text(encoding="utf-8")):
        first, _, rest = block.partition("\n")
        if first.startswith("# ") and first.endswith(".py"):
            files[Path(first[2:])] = rest
        elif block.startswith("from tf_svmax.losses.") and block.count("\n") == 1:
            line = block
    assert line is not None and len(files) == 2, "the page's module, test and import line"
    return files, line


def _apply(copy):
    files, line = page_files()
    for path, text in files.items():
        assert not (copy / path).exists(), f"{path} exists already"
        (copy / path).write_text(text, encoding="utf-8")
    init = (copy / INIT).read_text(encoding="utf-8")
    # After the last import of a loss module, as the page says ("beside the others").
    last = list(
        re.finditer(r"^from tf_svmax\.losses\.\w+ import (?:\(.*?\)|.*?)$", init, re.S | re.M)
    )
    assert last, "tf_svmax/losses/__init__.py imports its modules"
    end = last[-1].end() + 1
    (copy / INIT).write_text(init[:end] + line + init[end:], encoding="utf-8")
    # The row after the last row of the table under its heading.
    docs_page, heading, row = page_row()
    text = (copy / docs_page).read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    table = re.search(r"(?:^\|.*\n)+", text[start:], re.M)
    assert table, f"{docs_page}: a table under {heading!r}"
    end = start + table.end()
    (copy / docs_page).write_text(text[:end] + row + text[end:], encoding="utf-8")
    return {**files, docs_page: row}


def _changed(original, copy):
    """The paths that differ between two trees (new files included), Python caches aside."""
    changed = []
    comparison = filecmp.dircmp(original, copy, ignore=["__pycache__"])

    def walk(cmp, prefix):
        changed.extend(prefix / name for name in cmp.right_only + cmp.diff_files)
        for name, sub in cmp.subdirs.items():
            walk(sub, prefix / name)

    walk(comparison, Path())
    return sorted(changed)


def test_the_worked_example_touches_four_files_and_passes_on_this_backend(tmp_path):
    original, copy = tmp_path / "original", tmp_path / "copy"
    for tree in (original, copy):
        tree.mkdir(parents=True)
        for name in COPIED:
            if (ROOT / name).is_dir():
                ignore = shutil.ignore_patterns("__pycache__")
                shutil.copytree(ROOT / name, tree / name, ignore=ignore)
            else:
                shutil.copy2(ROOT / name, tree / name)
    files = _apply(copy)
    changed = _changed(original, copy)
    assert changed == sorted([*files, INIT]), changed
    (test_file,) = [path for path in files if path.parts[0] == "tests" and path.suffix == ".py"]
    env = {**os.environ, "PYTHONPATH": str(copy), "KERAS_BACKEND": backends.BACKEND}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(test_file),
            "tests/losses/test_registry_backends.py",
            "tests/test_docs.py",
            "-k",
            "intra_class_variance or IntraClassVariance or every_public_loss"
            " or follow_the_registry",
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    # The reference test, the export check, the registry's checks of the class and the
    # function (config, name, memory and XML, .keras and fit; the function's names), and the
    # docs' lists of losses (one test each; named on the command line, tests/test_docs.py is
    # collected on every backend).
    lists = len(test_docs.LOSS_LISTS)
    assert re.match(rf"{7 + lists} passed\b", summary), summary
