"""The losses' declared capabilities read from their source (`tf_svmax.losses._declared`, which
the retrieval trainer's records read before Keras is imported) against Python's own attribute
lookup on the imported classes: for every class of the registry (`tf_svmax.losses._registry`,
no table of loss names here) and every capability `Loss` declares.

Runs once per backend (marked all_backends: tests/conftest.py)."""

import importlib.util
import shutil
import textwrap

import pytest

import tf_svmax.losses as L
from tf_svmax.losses import _base, _declared, _registry

pytestmark = pytest.mark.all_backends

# The capabilities: every class attribute of `Loss` (and of `LabelLoss`, its ``per_sample``)
# that is a flag or None (the values a declaration takes), read from the classes themselves.
CAPABILITIES = sorted(
    {
        name
        for cls in (_base.Loss, _base.LabelLoss)
        for name, value in vars(cls).items()
        if not name.startswith("_") and (value is None or isinstance(value, bool))
    }
)
CLASSES = [entry.obj for entry in _registry.entries("loss", "base")]


def test_the_tables_are_not_empty():
    # The derivations above must find what the docstring of `Loss` lists, and the losses.
    assert {
        "accepts_reference_rows",
        "accepts_ref_mask",
        "splits_anchors",
        "class_block_rows",
        "ranks_embeddings",
        "per_sample",
    } <= set(CAPABILITIES)
    assert {L.Loss, L.LabelLoss, L.PKContrastiveLoss, L.TripletSemiHardLoss} <= set(CLASSES)


@pytest.mark.parametrize("attribute", CAPABILITIES)
@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_the_source_declares_what_the_class_has(cls, attribute):
    if not hasattr(cls, attribute):  # `per_sample` is `LabelLoss`'
        with pytest.raises(ValueError, match=f"{cls.__name__} declares no {attribute}"):
            _declared.declared(cls.__name__, attribute)
        return
    value = _declared.declared(cls.__name__, attribute)
    expected = getattr(cls, attribute)
    assert (type(value), value) == (type(expected), expected)


def test_a_declaration_is_read_from_the_class_then_its_bases():
    assert _declared.declared("PKContrastiveLoss", "class_block_rows") == 4  # its own
    assert _declared.declared("PKContrastiveLoss", "ranks_embeddings") is True  # LabelLoss'
    assert _declared.declared("PKContrastiveLoss", "accepts_reference_rows") is False  # Loss'


def test_an_unknown_class_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"`class_name`.*Received: class_name='NoSuchLoss'"):
        _declared.declared("NoSuchLoss", "class_block_rows")


# A module of one's own beside a copy of the library's `_base.py`: the reader must follow its
# bases into `_base` as Python does, and refuse what it cannot read as a literal.
OWN = '''
import keras

from tf_svmax.losses import BatchPenaltyLoss, _base
from tf_svmax.losses._base import BatchPenaltyLoss as Penalty

K = 3


class Mine(Penalty):
    class_block_rows = 3
    splits_anchors: bool = True


class Child(Mine):
    """A docstring."""

    accepts_ref_mask = False
    accepts_ref_mask = True  # the last assignment counts, as in Python


class Dotted(_base.PerSampleLabelLoss):
    pass


class Exported(BatchPenaltyLoss):  # as `tf_svmax.losses` re-exports it
    accepts_ref_mask = True


class Computed(Penalty):
    class_block_rows = 2 * K


class Named(Penalty):
    class_block_rows = K


class Conditional(Penalty):
    if K > 2:
        class_block_rows = 3


class Patched(Penalty):
    pass


Patched.class_block_rows = 3


class Outside(keras.losses.Loss):
    pass


class Two(Mine, Dotted):
    pass
'''


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """``(reader, module)``: a reader of a folder holding `OWN` and a copy of ``_base.py``, and
    `OWN` imported (its ``_base`` the library's, the same source)."""
    folder = tmp_path_factory.mktemp("losses")
    shutil.copy(_base.__file__, folder / "_base.py")
    (folder / "own.py").write_text(textwrap.dedent(OWN))
    spec = importlib.util.spec_from_file_location("own_losses_for_the_reader", folder / "own.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _declared.Declarations(str(folder), "tf_svmax.losses"), module


@pytest.mark.parametrize("attribute", CAPABILITIES)
@pytest.mark.parametrize("name", ["Mine", "Child", "Dotted", "Exported"])
def test_a_class_of_ones_own_is_read_as_python_reads_it(own, name, attribute):
    reader, module = own
    value = reader.declared(name, attribute)
    expected = getattr(getattr(module, name), attribute)
    assert (type(value), value) == (type(expected), expected)


@pytest.mark.parametrize(
    "name, message",
    [
        ("Computed", r"Computed\.class_block_rows is not a literal .*own\.py line \d+: `2 \* K`"),
        ("Named", r"Named\.class_block_rows is not a literal .*own\.py line \d+: `K`"),
        ("Conditional", r"Conditional\.class_block_rows is assigned .*own\.py line \d+"),
        ("Patched", r"Patched\.class_block_rows is assigned outside its class body .*line \d+"),
        ("Outside", r"Outside declares no class_block_rows, .*keras\.losses\.Loss"),
        ("Two", r"Two has 2 bases \(Mine, Dotted\)"),
    ],
)
def test_what_is_no_literal_declaration_is_refused_naming_the_class(own, name, message):
    reader, _ = own
    with pytest.raises(ValueError, match=message):
        reader.declared(name, "class_block_rows")


def test_a_class_defined_twice_is_refused(own, tmp_path):
    reader, _ = own
    folder = tmp_path / "losses"
    shutil.copytree(reader.folder, folder)
    (folder / "again.py").write_text("class Mine:\n    class_block_rows = 2\n")
    twice = _declared.Declarations(str(folder), "tf_svmax.losses")
    with pytest.raises(ValueError, match=r"Mine is defined in 2 modules \(again\.py, own\.py\)"):
        twice.declared("Mine", "class_block_rows")
