"""The trainers' dataset records (`trainers.harness.datasets`): a trainer's table of them."""

import pytest

from trainers.contrastive import config as contrastive
from trainers.harness.datasets import Dataset, embedded_names, file_names, records
from trainers.retrieval import config as retrieval
from trainers.two_head import config as two_head


def test_a_table_keeps_its_order_splits_embedded_from_file_sets_and_refuses_a_name_twice():
    table = records(Dataset("a", 10, load=list), Dataset("b", 20), Dataset("c", 30, load=dict))
    assert list(table) == ["a", "b", "c"]
    assert embedded_names(table) == ["a", "c"] and file_names(table) == ["b"]
    with pytest.raises(ValueError, match="'a' is given twice"):
        records(Dataset("a", 10), Dataset("a", 20))


@pytest.mark.parametrize(
    "module, config",
    [
        (retrieval, retrieval.RetrievalConfig),
        (two_head, two_head.TwoHeadConfig),
        (contrastive, contrastive.ContrastiveConfig),
    ],
)
def test_each_trainers_dataset_flag_offers_its_records_and_names_its_embedded_sets(module, config):
    field = config.__dataclass_fields__["dataset"]
    assert field.metadata["choices"] == tuple(module.DATASETS)
    for name in embedded_names(module.DATASETS):
        assert f"{name}: " in field.metadata["help"]
