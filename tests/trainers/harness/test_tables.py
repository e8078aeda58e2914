"""The grid tables' helpers."""

from trainers.harness import tables


def test_figure_titles_say_what_the_backbone_started_from(tmp_path):
    assert tables.starting_weights(None) == ""
    assert tables.starting_weights("none") == ""
    assert tables.starting_weights("imagenet") == " fine-tuned from ImageNet weights"
    path = tmp_path / "pretrain_x" / "backbone.weights.h5"
    assert tables.starting_weights(str(path)) == " fine-tuned from pretrain_x/backbone.weights.h5"


def test_a_column_cell_is_mean_and_sample_std_of_the_values_it_has():
    percent = tables.Column("R@1 %", "recall_at_1", 100)
    evaluations = [{"recall_at_1": 0.5}, {"recall_at_1": None}, {}, {"recall_at_1": 0.75}]
    # 62.5 and sqrt(2 * 12.5^2 / (2 - 1)) = 17.68 over the two seeds that have a value.
    assert percent.cell(evaluations) == "62.50 ± 17.68"
    assert tables.Column("NMI", "nmi", digits=3).cell([{"nmi": 0.25}]) == "0.250"
    assert percent.cell([{"recall_at_1": None}, {}]) == "–"
