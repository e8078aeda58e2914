"""The retrieval trainer's loss records (`trainers.retrieval.ranking`): each --loss builds the
library loss the papers' settings name, and the flags, checks and Table 1 read the records."""

import dataclasses

import pytest

from tf_svmax import losses
from tf_svmax.losses import _registry
from trainers import retrieval
from trainers.retrieval.ranking import RankingLoss, number

# What each --loss trains with, written out by hand from the papers (SVMax Sec. 4.1; the XBM
# paper's all-pairs contrastive loss; dissertation Sec. 3.4.1 for Proxy-Anchor): the class and
# the configuration it must carry with the flags left unset.
EXPECTED = {
    "contrastive": (losses.PKContrastiveLoss, {"margin": 1.0}),
    "triplet_hard": (losses.BatchHardTripletLoss, {"margin": 0.2}),
    "triplet_semihard": (losses.TripletSemiHardLoss, {"margin": 0.2}),
    "npair": (losses.PKNpairLoss, {}),
    "angular": (losses.PKAngularLoss, {}),
    "lifted": (losses.LiftedStructLoss, {"margin": 1.0}),
    "contrastive_pairs": (losses.AllPairsContrastiveLoss, {"neg_margin": 0.5}),
    "proxy_anchor": (losses.ProxyAnchorLoss, {"delta": 0.1, "alpha": 32.0}),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_loss_builds_its_library_class_with_the_papers_margin(name):
    config = retrieval.resolve(retrieval.RetrievalConfig(output_dir="x", loss=name))
    built = retrieval.build_loss(dataclasses.replace(config, regularizer="none"))
    if isinstance(built, dict):  # a loss on the proxies: the head's
        built = built[retrieval.head_output(config)]
    cls, expected = EXPECTED[name]
    assert type(built) is cls
    got = built.get_config()
    assert {k: got[k] for k in expected} == expected
    # --margin reaches the argument the record names.
    margins = [k for k in expected if k in ("margin", "neg_margin", "delta")]
    if margins:
        other = retrieval.build_loss(dataclasses.replace(config, regularizer="none", margin=0.7))
        other = other[retrieval.head_output(config)] if isinstance(other, dict) else other
        assert other.get_config()[margins[0]] == 0.7


def test_the_tables_of_losses_are_read_from_the_records():
    assert retrieval.LOSSES == tuple(EXPECTED)
    # The memory applies to the losses whose class `CrossBatchMemory` accepts: those that
    # accept reference rows.
    assert retrieval.XBM_LOSSES == tuple(
        name for name, (cls, _) in EXPECTED.items() if cls.accepts_reference_rows
    )
    in_table1 = {x.name for x in retrieval.RANKING_LOSSES if x.in_table1}
    paper = {"contrastive", "triplet_hard", "triplet_semihard", "npair", "angular", "lifted"}
    assert paper <= in_table1 and not in_table1 & {"contrastive_pairs", "proxy_anchor"}
    # SVMax Table 1 reports the triplet losses with lambda 1 and 0.1, the others with one.
    several = {x.name: x.table1_svmax_lambdas for x in retrieval.RANKING_LOSSES}
    assert {name for name in paper if several[name]} == {"triplet_hard", "triplet_semihard"}
    assert several["triplet_hard"] == several["triplet_semihard"] == (1.0, 0.1)


# The capability facts the trainer reads, and the declaration of the class each derives from
# (`tf_svmax.losses.Loss`: the memory wraps a loss that accepts reference rows; a P x K loss
# fixes K).
DERIVED = {"cross_batch_memory": "accepts_reference_rows", "required_k": "class_block_rows"}


def test_the_records_capability_facts_are_their_class_declarations():
    # Not restated in the records: no field holds them.
    assert not set(DERIVED) & {field.name for field in dataclasses.fields(RankingLoss)}
    for record in retrieval.RANKING_LOSSES:
        cls = getattr(losses, record.constructor)
        for fact, declaration in DERIVED.items():
            assert getattr(record, fact) == getattr(cls, declaration), (record.name, fact)
    # A record of another class reads that class' declarations: every loss class the library
    # registers, whatever the trainer offers.
    for entry in _registry.entries("loss"):
        record = RankingLoss(
            "x", label="x", constructor=entry.name, batch_p=2, batch_k=2, svmax_lambda=1.0
        )
        for fact, declaration in DERIVED.items():
            assert getattr(record, fact) == getattr(entry.obj, declaration), (entry.name, fact)


def test_a_record_of_an_unknown_class_is_refused_naming_it():
    record = RankingLoss(
        "x", label="x", constructor="NoSuchLoss", batch_p=2, batch_k=2, svmax_lambda=1.0
    )
    with pytest.raises(ValueError, match="Received: class_name='NoSuchLoss'"):
        assert record.required_k is None  # a property: reading it reads the class


def test_a_record_with_a_margin_names_the_argument_it_sets():
    with pytest.raises(ValueError, match="margin and margin_argument"):
        RankingLoss(
            "x", label="x", constructor="X", batch_p=2, batch_k=2, svmax_lambda=1.0, margin=0.1
        )
    with pytest.raises(ValueError, match="margin and margin_argument"):
        RankingLoss(
            "x",
            label="x",
            constructor="X",
            batch_p=2,
            batch_k=2,
            svmax_lambda=1.0,
            margin_argument="margin",
        )


@pytest.mark.parametrize(
    "value, text", [(1.0, "1"), (0.2, "0.2"), (1e-4, "1e-4"), (2.5e-5, "2.5e-5"), (0.0, "0")]
)
def test_help_numbers(value, text):
    assert number(value) == text


# What each --regularizer adds to the ranking loss, written out by hand (SVMax paper Eq. 4 and
# Eq. 1; the spread-out baseline with --spread_out_alpha), and what a figure's title says of it.
REGULARIZER_TERMS = {
    "none": ([], "no regularizer"),
    "svmax": ([(losses.SVMaxLoss, {"lambda_": 0.3, "bounded": True})], "SVMax λ = 0.3"),
    "svmax_unbounded": (
        [(losses.SVMaxLoss, {"lambda_": 0.3, "bounded": False})],
        "unbounded SVMax λ = 0.3",
    ),
    "spread_out": (
        [(losses.SpreadOutLoss, {"alpha": 2.0, "seed": 7})],
        "spread-out α = 2",
    ),
}


@pytest.mark.parametrize("name", list(REGULARIZER_TERMS))
def test_each_regularizer_builds_its_library_terms_and_titles_its_figures(name):
    config = retrieval.resolve(
        retrieval.RetrievalConfig(
            output_dir="x", regularizer=name, svmax_lambda=0.3, spread_out_alpha=2.0, seed=7
        )
    )
    built = retrieval.build_loss(config)
    terms, title = REGULARIZER_TERMS[name]
    got = built.regularizers if isinstance(built, losses.RegularizedLoss) else []
    assert [type(term) for term in got] == [cls for cls, _ in terms]
    for term, (_, expected) in zip(got, terms, strict=True):
        assert {k: term.get_config()[k] for k in expected} == expected
    assert title in retrieval.run_title(dataclasses.asdict(config))
    assert tuple(retrieval.REGULARIZERS) == tuple(REGULARIZER_TERMS)
