"""The Python examples of the README and of every documentation page run as written, each on its
own in a fresh process (forked from one that has only imported NumPy, Keras and tf_svmax:
`tests.backends.Zygote`), and print what they show (a value stated in a comment beside a `print`
is the value it prints); the README stays a short landing page whose links resolve, and the
README, getting-started and guide pages keep their paragraphs short enough to skim; the pages'
lists and tables of losses name exactly the losses the registry gives them (TFA or not, the
capabilities each class declares; every loss class has its row in docs/guide/backends.md). On JAX
and PyTorch the same examples run in tests/test_docs_backends.py."""

import ast
import io
import math
import re
import sys
import tokenize
from decimal import Decimal
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


# A comment beside a top-level `print(...)` states what it prints: words as printed, numbers to
# the digits written, "about" (or "~") before the numbers that are only approximate.
# An explanation may follow the expected output after ": ", " (" or "; ".
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?", re.I)
TOKEN = re.compile(NUMBER.pattern + r"|about|~|[A-Za-z_][\w.]*", re.I)
# Tolerances: a number written with n decimals matches a printed value within half a unit of its
# last digit (it is the printed value, rounded); after "about", within 10 % or one unit of
# its last digit, whichever is larger (values that move a little between CPUs, or training).
ABOUT = 0.10


def expected_outputs(block):
    """(line, expected text) of every top-level print with a comment, in the order they run."""
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(block).readline)
        if token.type == tokenize.COMMENT
    }
    prints = []
    for node in ast.parse(block).body:
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "print":
            comment = comments.get(node.end_lineno)
            prints.append((node.end_lineno, comment))
    return prints


def expected_part(comment):
    return re.split(r": | \(|; ", comment, maxsplit=1)[0].strip()


def last_digit(number):
    """The value of one unit in the last written digit: 0.01 for "0.63", 1e-5 for "1e-5"."""
    return 10.0 ** Decimal(number).as_tuple().exponent


def matches(expected, printed):
    """Whether a printed line shows the expected text (see the tolerances above)."""
    want = TOKEN.findall(expected)
    got = [t for t in TOKEN.findall(printed) if t.lower() not in ("about", "~")]
    about, pairs = False, []
    for token in want:
        if token.lower() in ("about", "~"):
            about = True  # for every number after it
            continue
        pairs.append((token, about))
    if len(pairs) != len(got):
        return False
    for (token, approximate), shown in zip(pairs, got, strict=True):
        if not NUMBER.fullmatch(token):
            if token != shown:
                return False
            continue
        if not NUMBER.fullmatch(shown):
            return False
        unit = last_digit(token)
        target, value = float(token), float(shown)
        limit = max(ABOUT * abs(target), unit) if approximate else 0.5 * unit * (1 + 1e-9)
        if not math.isclose(value, target, abs_tol=limit, rel_tol=0.0):
            return False
    return True


def test_the_readme_has_its_three_examples_and_the_site_shows_them_too():
    readme = python_blocks(README)
    assert len(readme) == 3, "SVMax on a ranking loss, OLE beside softmax, the TFA migration"
    assert "SVMaxLoss" in readme[0] and "TripletSemiHardLoss" in readme[0]
    assert "OLELoss" in readme[1] and "SparseCategoricalCrossentropy" in readme[1]
    assert "tensorflow_addons" in readme[2]
    site = [b for page in PAGES[1:] for b in python_blocks(page)]
    assert all(block in site for block in readme), "each README example is on a guide page"
    assert len(BLOCKS) >= 8


# Examples that show code rather than a result: the TFA-era loader needs the user's own file.
PRINTS_NOTHING = ("load_tfa_era_h5",)


def check_printed(block, stdout):
    """Each example prints what it shows; a commented print's line matches its comment. The
    examples keep one line per top-level print (no print in a loop), so the n-th print is the
    n-th line."""
    name = EXAMPLES[block]
    lines = stdout.splitlines()
    if not any(marker in block for marker in PRINTS_NOTHING):
        assert lines, f"{name} prints nothing:\n{block}"
    prints = expected_outputs(block)
    assert len(lines) == len(prints), f"{name}: {len(prints)} prints, output:\n{stdout}"
    for (line, comment), printed in zip(prints, lines, strict=True):
        if comment is not None:
            want = expected_part(comment)
            assert matches(want, printed), f"{name}, line {line}: printed {printed!r}, # {want}"


# A Python warning as `warnings` writes it to stderr: "file:line: Category: message".
PYTHON_WARNING = re.compile(r"^.+:\d+: (\w*Warning): (.+)$", re.M)


def check_no_warnings(block, stderr):
    """An example prints no Python warning on stderr but one it announces (a reader then knows
    to expect it): the first 40 characters of its message quoted in the example."""
    for category, message in PYTHON_WARNING.findall(stderr):
        assert message[:40] in block, f"{EXAMPLES[block]} warns: {category}: {message}"


@pytest.mark.parametrize("block", BLOCKS, ids=[EXAMPLES[b] for b in BLOCKS])
def test_each_python_example_runs_alone_and_prints_what_it_says(block, tmp_path, examples):
    done = examples.run(block, cwd=tmp_path, timeout=600)  # a user's folder, not the checkout
    assert done.returncode == 0, f"{EXAMPLES[block]}:\n{block}\n{done.stderr[-2000:]}"
    check_printed(block, done.stdout)
    check_no_warnings(block, done.stderr)


def test_python_warnings_on_stderr_are_found_and_an_announced_one_is_allowed():
    stderr = (
        "/x/keras/src/backend/torch/numpy.py:657: UserWarning: Tensor.T is deprecated on 0-D "
        "tensors.\n  return cast(torch.count_nonzero(x, dim=axis).T, 'int32')\n"
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    )
    assert PYTHON_WARNING.findall(stderr) == [
        ("UserWarning", "Tensor.T is deprecated on 0-D tensors.")
    ]
    block = BLOCKS[0]
    with pytest.raises(AssertionError, match="warns: UserWarning: Tensor.T is deprecated"):
        check_no_warnings(block, stderr)
    ole = block_containing("OLELoss(")
    check_no_warnings(
        ole,
        "/x/ole.py:492: RuntimeWarning: tf_svmax: ole_loss computes in "
        "float64, which JAX has only with jax_enable_x64; computing in float32",
    )


def test_the_readme_examples_state_exact_values_so_every_backend_is_held_to_them():
    """Issue 59: the first example promised "the same weights" but printed other values on JAX
    and PyTorch, within its "about" (10 %). Its weights and data now come from NumPy, the same on
    every backend, and each README value is stated to its digits: tests/test_docs_backends.py
    holds JAX and PyTorch to them (half a unit of the last digit), as this file does TensorFlow."""
    for block in python_blocks(README):
        for line, comment in expected_outputs(block):
            if comment is not None:
                assert not re.search(r"\babout\b|~", expected_part(comment)), (line, comment)
    assert "set_random_seed" not in README.read_text(encoding="utf-8")


def test_expected_output_comments_are_parsed_with_their_tolerance():
    assert matches("0.09375 1.06066", "(0.09375, 1.0606601717798212)")
    assert not matches("0.09375 1.06066", "(0.09375, 1.0607)")
    assert matches("about 0.63", "0.6712") and not matches("about 0.63", "0.70")
    assert matches("about 0.005", "0.0059") and not matches("about 0.005", "0.0061")
    assert matches("True", "True") and not matches("True", "False")
    assert matches("LORAC about 5.4", "LORAC 5.1") and not matches("XML about 5.4", "LORAC 5.4")
    assert matches("1 about 2.0 3.0", "1 2.1 2.9") and not matches("1.0 about 2", "1.1 2")
    assert not matches("8", "8 8"), "every printed value is stated"
    assert expected_part("16: the rows filled (one batch)") == "16"
    assert expected_outputs("x = 1\nprint(x)  # 1\nprint(\n  x,\n)  # about 1\nprint(2)\n") == [
        (2, "1"),
        (5, "about 1"),
        (6, None),
    ]


# Paragraphs a reader can skim: no paragraph or list item of these pages over 150 words, counted
# as a reader sees them (code blocks, tables and headings are not prose; inline code counts as
# the words it shows).
GUIDE = sorted((ROOT / "docs" / "guide").glob("*.md"))
SKIMMED = [README, ROOT / "docs" / "getting-started.md", *GUIDE]
MAX_WORDS = 150


def prose_paragraphs(text):
    """(first line, word count) of each paragraph and list item, skipping fenced code blocks,
    tables, headings, images and admonition markers."""
    found, current, start, fenced = [], [], 0, False

    def close():
        if current:
            found.append((start, len(" ".join(current).split())))
        current.clear()

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            close()
            fenced = not fenced
            continue
        if fenced or not stripped or stripped.startswith(("|", "#", "![", "!!!", "--8<--")):
            close()
            continue
        if re.match(r"\s*(?:[-*+]|\d+[.)])\s", line):
            close()  # a list item is a paragraph of its own
        if not current:
            start = number
        current.append(re.sub(r"^(?:[-*+]|\d+[.)])\s+", "", stripped))  # the marker is no word
    close()
    return found


def test_paragraph_counting_skips_code_and_tables_and_splits_list_items():
    text = "one two\nthree\n\n```python\na b c d\n```\n| a | b |\n- x y\n- z\n  w\n"
    assert prose_paragraphs(text) == [(1, 3), (8, 2), (9, 2)]


@pytest.mark.parametrize("page", SKIMMED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_paragraph_is_over_150_words(page):
    long = [
        f"line {line}: {words} words"
        for line, words in prose_paragraphs(page.read_text(encoding="utf-8"))
        if words > MAX_WORDS
    ]
    assert not long, f"{page.relative_to(ROOT)}: split these (<= {MAX_WORDS} words): {long}"


def test_the_readme_is_a_landing_page():
    size = README.stat().st_size
    assert size <= 12_288, f"README.md is {size} bytes; move details into docs/ (<= 12 KB)"


def test_the_readme_states_its_measured_times_with_their_machines():
    text = " ".join(README.read_text(encoding="utf-8").split())
    for claim in ("3 min 56 s", "11 min 24 s", "12 min 51 s", "32–36 min", "2-core AVX2"):
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


def test_the_functions_example_prints_the_bounds_it_claims(examples):
    block = block_containing("ops.svmax_bounds(144, 128)")
    program = block + "\nprint(ops.svmax_bounds(144, 128))\n"
    done = examples.run(program, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lower, upper = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 (our own print)
    assert (lower, round(upper, 5)) == (0.09375, 1.06066)


def test_the_ole_example_puts_ole_on_the_features_not_the_logits(examples):
    # The OLE paper applies OLE to the penultimate layer's features; the classifier's logits
    # take the cross-entropy. The README's example is the guide's (one block, run once).
    block = block_containing("OLELoss")
    assert [b for b in BLOCKS if "OLELoss(" in b] == [block], "one OLE example, README = guide"
    program = block + (
        "\nole = [k for k, v in model.loss.items() if isinstance(v, tf_svmax.losses.OLELoss)]"
        "\nprint(ole, model.output[ole[0]].shape[-1], model.output['logits'].shape[-1])\n"
    )
    done = examples.run(program, cwd=ROOT, timeout=600)
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


@pytest.mark.parametrize("page", GUIDE, ids=lambda p: p.name)
def test_each_guide_page_opens_with_its_purpose_and_an_example(page):
    """Before its first section: a title, a few sentences saying what the page is for, and a
    code block (a runnable example)."""
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# "), f"{page.name} starts with its title"
    opening = text.split("\n## ")[0]
    assert "```" in opening, f"{page.name}: an example before the first section"
    purpose = opening.split("```")[0].split("\n", 1)[1]
    words = len(purpose.split())
    assert 10 <= words <= 80, f"{page.name}: {words} words before the example (a few sentences)"


# tf_svmax is installed from its repository's clone (or a wheel built there), not from PyPI.
PIP_FROM_PYPI = re.compile(r"pip install[^`\n]*[\"' ]tf_svmax\[")


def test_install_commands_install_from_the_clone_and_torch_as_its_cpu_build():
    """Issue 59: `pip install "tf_svmax[jax]"` cannot work (the package is not on PyPI), and
    `[torch]` alone pulled 5.9 GB of CUDA wheels on a CPU machine."""
    pages = {path: path.read_text(encoding="utf-8") for path in PAGES}
    from_pypi = [str(p.relative_to(ROOT)) for p, t in pages.items() if PIP_FROM_PYPI.search(t)]
    assert not from_pypi, f"pip install of tf_svmax[...] from PyPI in {from_pypi}"
    cpu_torch = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    for name in ("README.md", "docs/getting-started.md", "docs/guide/backends.md"):
        text = pages[ROOT / name]
        assert 'pip install ".[jax]"' in text, name
        assert cpu_torch in text or "getting-started.md#" in text, name
    assert cpu_torch in pages[ROOT / "docs" / "getting-started.md"]


# The docs' lists and tables of losses stay hand-written prose, but each one that names losses
# by a fact of the registry (tf_svmax/losses/_registry.py: TFA or not, the capabilities a loss
# class declares) is checked against the registry here, so a new loss, or a changed capability,
# cannot leave a page stale. Each check: the page, the text between two anchors (unique on the
# page), the registered names that text must name, exactly, and why.
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def losses_registry():
    """The registry, filled (importing it imports `tf_svmax.losses`, whose modules register
    their objects); imported here, not at module level: tests/test_docs_backends.py imports
    this module on every backend."""
    from tf_svmax.losses import _registry

    return _registry


def named(text, registry):
    """The registered names in `text`'s code spans (``Name(...)``, ``losses.Name``)."""
    found = set()
    for span in CODE_SPAN.findall(text):
        match = re.match(r"(?:tf_svmax\.)?(?:losses\.)?([A-Za-z_]\w*)", span)
        if match and match.group(1) in registry.REGISTRY:
            found.add(match.group(1))
    return found


def between(page, start, end):
    text = (ROOT / page).read_text(encoding="utf-8")
    assert text.count(start) == 1, f"{page}: the anchor {start!r} is not found once"
    rest = text.split(start, 1)[1]
    assert end in rest, f"{page}: no {end!r} after {start!r}"
    return rest.split(end, 1)[0]


def loss_classes(registry, fact):
    return {e.name for e in registry.entries("loss") if fact(e.obj)}


def takes_reference_rows(registry):
    """The loss functions whose signature takes reference rows."""
    import inspect

    return {
        e.name
        for e in registry.entries("function")
        if "ref_labels" in inspect.signature(e.obj).parameters
    }


def capability(name):
    return lambda cls: bool(getattr(cls, name, False))


def ref_mask_losses(registry):
    """The loss classes that take a `ref_mask` (XML's and the memory's masked rows)."""
    return loss_classes(registry, capability("accepts_ref_mask"))


def class_block_losses(registry):
    """The loss classes that need class blocks of K rows (the P x K losses)."""
    return loss_classes(registry, lambda c: getattr(c, "class_block_rows", None) is not None)


def tfa(registry, *kinds):
    return {e.name for e in registry.entries(*kinds) if e.tfa}


# (page, start anchor, end anchor, what the text must name: registry -> names, why)
LOSS_LISTS = [
    (
        "docs/guide/ranking-losses.md",
        "losses under their TFA names (",
        "; see",
        lambda r: tfa(r, "loss"),
        "the loss classes registered with tfa=True",
    ),
    (
        "docs/guide/ranking-losses.md",
        "It wraps any loss that accepts reference rows",
        "or a loss of your own",
        lambda r: loss_classes(r, capability("accepts_reference_rows")),
        "the loss classes with accepts_reference_rows",
    ),
    (
        "docs/guide/ranking-losses.md",
        "## Reference rows",
        "mine their anchors",
        takes_reference_rows,
        "the loss functions taking ref_labels",
    ),
    (
        "docs/guide/backends.md",
        "losses that take it run there",
        "The P × K losses",
        ref_mask_losses,
        "the loss classes with accepts_ref_mask",
    ),
    (
        "docs/guide/backends.md",
        "The P × K losses",
        "take no mask",
        class_block_losses,
        "the loss classes with class_block_rows",
    ),
    (
        "docs/guide/lorac-xml.md",
        "the losses that take `ref_mask`",
        "and the first and last",
        ref_mask_losses,
        "the loss classes with accepts_ref_mask",
    ),
    (
        "docs/guide/lorac-xml.md",
        "class blocks for the P × K losses",
        "which are the class halves",
        class_block_losses,
        "the loss classes with class_block_rows",
    ),
    (
        "docs/guide/tfa-migration.md",
        "Available: ",
        "`ops.pairwise_distance`",
        lambda r: tfa(r, "loss", "function"),
        "the loss classes and functions registered with tfa=True",
    ),
    (
        "docs/guide/multiple-devices.md",
        "returns 1/N of it |\n",
        "\n| `PKContrastiveLoss`",
        lambda r: loss_classes(r, capability("splits_anchors")),
        "the loss classes with splits_anchors (the rows of those that split the work)",
    ),
    (
        # The rows of the losses computed whole: none of them splits its anchors.
        "docs/guide/multiple-devices.md",
        "| what each replica computes |",
        "returns 1/N of it |",
        lambda r: set(),
        "a loss class without splits_anchors",
        lambda r: loss_classes(r, lambda c: not getattr(c, "splits_anchors", False)),
    ),
    (
        "docs/guide/multiple-devices.md",
        "| splits by proxies: all b rows against C/N proxies |",
        "\n\n",
        lambda r: set(),
        "a loss class without splits_anchors",
        lambda r: loss_classes(r, lambda c: not getattr(c, "splits_anchors", False)),
    ),
    (
        # Every loss class and every layer holding a loss' state has its row (or its place in
        # one): which backends run it.
        "docs/guide/backends.md",
        "## What runs where",
        "\n## ",
        lambda r: {e.name for e in r.entries("loss", "layer")},
        "every registered loss class and layer",
        # The functions and helpers may stand beside them.
        lambda r: {e.name for e in r.entries("function", "helper")},
    ),
]


def list_problems(page, start, end, want, why, registry, also=None):
    """What is wrong with one list: its missing and its stale names, in words (none: []).
    `also`: the registered names it may name besides (registry -> names)."""
    got = named(between(page, start, end), registry)
    expected = want(registry)
    stale = got - expected - (also(registry) if also else set())
    problems = []
    if expected - got:
        problems.append(f"{page}, after {start!r}: missing {sorted(expected - got)} ({why})")
    if stale:
        problems.append(f"{page}, after {start!r}: stale {sorted(stale)} (not {why})")
    return problems


@pytest.mark.parametrize("case", LOSS_LISTS, ids=[f"{p}:{s[:30]}" for p, s, *_ in LOSS_LISTS])
def test_the_docs_lists_of_losses_follow_the_registry(case):
    page, start, end, want, why, *also = case
    problems = list_problems(page, start, end, want, why, losses_registry(), *also)
    assert not problems, "\n".join(problems)


def test_the_papers_table_states_each_loss_class_block_layout():
    """docs/guide/ranking-losses.md's table of the papers' losses: its batch column says
    P × K for a loss with ``class_block_rows = K``, never for another loss."""
    registry = losses_registry()
    table = between("docs/guide/ranking-losses.md", "| loss | batch | SVMax λ | notes |", "\n\n")
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| `")]
    assert rows, "the papers' table has rows"
    for first, batch in rows:
        for name in named(first, registry):
            k = getattr(registry.REGISTRY[name].obj, "class_block_rows", None)
            stated = re.fullmatch(r"P × (\d+)", batch.strip())
            assert (int(stated.group(1)) if stated else None) == k, (
                f"docs/guide/ranking-losses.md: the row of {name} says batch {batch.strip()!r}; "
                f"its class_block_rows is {k}"
            )


# Where a page counts the losses of a capability in words: (page, the text with {n}).
COUNTED = [
    ("docs/guide/backends.md", "The {n} losses that take it run there"),
    ("docs/guide/ranking-losses.md", "library's {n}, which take `ref_mask`"),
]
NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


@pytest.mark.parametrize("page, phrase", COUNTED)
def test_the_count_of_losses_taking_ref_mask_is_the_registry_s(page, phrase):
    registry = losses_registry()
    n = len(ref_mask_losses(registry))
    text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
    want = phrase.format(n=NUMBER_WORDS[n])
    assert want in text, f"{page}: expected {want!r} ({n} loss classes with accepts_ref_mask)"


def test_a_loss_list_check_names_a_missing_and_a_stale_loss(tmp_path, monkeypatch):
    """The check can fail: a list without one of its losses, or with one more, is named."""
    registry = losses_registry()
    page = "docs/guide/lorac-xml.md"
    text = (ROOT / page).read_text(encoding="utf-8")
    edited = text.replace("`TripletHardLoss`,", "`TripletHardLoss`, `PKNpairLoss`,", 1)
    edited = edited.replace("`LiftedStructLoss`, ", "", 1)
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    (tmp_path / page).write_text(edited, encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    problems = list_problems(
        page,
        "the losses that take `ref_mask`",
        "and the first and last",
        ref_mask_losses,
        "the loss classes with accepts_ref_mask",
        registry,
    )
    assert len(problems) == 2, problems
    assert "missing ['LiftedStructLoss']" in problems[0]
    assert "stale ['PKNpairLoss']" in problems[1]
