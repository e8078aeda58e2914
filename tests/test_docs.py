"""The Python examples of the README and of every documentation page run as written, each on its
own in a fresh process; the README stays a short landing page whose links resolve."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path):
    return FENCE.findall(path.read_text(encoding="utf-8"))


# Each distinct example once (the README's three also stand on the guide's pages), named by
# the first page that shows it.
EXAMPLES = {}
for _page in PAGES:
    for _index, _block in enumerate(python_blocks(_page)):
        EXAMPLES.setdefault(_block, f"{_page.relative_to(ROOT)}[{_index}]")
BLOCKS = list(EXAMPLES)


def block_containing(text):
    return next(b for b in BLOCKS if text in b)


def run(program, cwd):
    return subprocess.run(
        [sys.executable, "-c", program], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_the_readme_has_its_three_examples_and_the_site_shows_them_too():
    readme = python_blocks(README)
    assert len(readme) == 3, "SVMax on a ranking loss, OLE beside softmax, the TFA migration"
    assert "SVMaxLoss" in readme[0] and "TripletSemiHardLoss" in readme[0]
    assert "OLELoss" in readme[1] and "SparseCategoricalCrossentropy" in readme[1]
    assert "tensorflow_addons" in readme[2]
    site = [b for page in PAGES[1:] for b in python_blocks(page)]
    assert all(block in site for block in readme), "each README example is on a guide page"
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("block", BLOCKS, ids=[EXAMPLES[b] for b in BLOCKS])
def test_each_python_example_runs_alone(block, tmp_path):
    done = run(block, cwd=tmp_path)  # a user's own folder, not the checkout
    assert done.returncode == 0, f"{EXAMPLES[block]}:\n{block}\n{done.stderr[-2000:]}"


def test_the_readme_is_a_landing_page():
    size = README.stat().st_size
    assert size <= 12_288, f"README.md is {size} bytes; move details into docs/ (<= 12 KB)"


def test_the_readme_states_its_measured_times_with_their_machines():
    text = " ".join(README.read_text(encoding="utf-8").split())
    for claim in ("3 min 56 s", "11 min 24 s", "12 min 51 s", "24 min 13 s", "2-core AVX2"):
        assert claim in text, claim


@pytest.mark.parametrize("page", [README, *(ROOT / "docs").glob("*.md")], ids=str)
def test_relative_links_resolve(page):
    # The site's own pages are checked by the strict build (tests/test_docs_site.py); these are
    # the README and the reports, which GitHub shows as files.
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.name} links to {target}, which does not exist"


def test_the_functions_example_prints_the_bounds_it_claims():
    block = block_containing("ops.svmax_bounds(144, 128)")
    done = run(block + "\nprint(ops.svmax_bounds(144, 128))\n", cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lower, upper = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 (our own print)
    assert (lower, round(upper, 5)) == (0.09375, 1.06066)


def test_the_ole_example_puts_ole_on_the_features_not_the_logits():
    # The OLE paper applies OLE to the penultimate layer's features; the classifier's logits
    # take the cross-entropy. The README's example is the guide's (one block, run once).
    block = block_containing("OLELoss")
    assert [b for b in BLOCKS if "OLELoss(" in b] == [block], "one OLE example, README = guide"
    program = block + (
        "\nole = [k for k, v in model.loss.items() if isinstance(v, tf_svmax.losses.OLELoss)]"
        "\nprint(ole, model.output[ole[0]].shape[-1], model.output['logits'].shape[-1])\n"
    )
    done = run(program, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['features'] 128 10"


def test_the_ole_docstring_examples_put_ole_on_the_features():
    import tf_svmax

    doc = tf_svmax.losses.OLELoss.__doc__
    assert '"features": tf_svmax.losses.OLELoss(' in doc and '"logits": keras.losses' in doc
    assert "features" in tf_svmax.ops.ole_loss.__doc__


def test_custom_objects_claims_state_that_tf_svmax_must_be_imported():
    """`.keras` files load without `custom_objects` only in a process that imported tf_svmax
    (its classes register themselves with Keras on import): every page that promises loading
    without `custom_objects` says so next to it."""
    unconditional = []
    for page in PAGES:
        text = " ".join(page.read_text(encoding="utf-8").split())
        for match in re.finditer(r"no `custom_objects`", text):
            if "import tf_svmax" not in text[match.start() : match.end() + 80]:
                unconditional.append(f"{page.relative_to(ROOT)}: ...{text[match.start() :][:90]}")
    assert not unconditional, unconditional
