"""The grid tables' helpers."""

from trainers.harness import tables


def test_figure_titles_say_what_the_backbone_started_from(tmp_path):
    assert tables.starting_weights(None) == ""
    assert tables.starting_weights("none") == ""
    assert tables.starting_weights("imagenet") == " fine-tuned from ImageNet weights"
    path = tmp_path / "pretrain_x" / "backbone.weights.h5"
    assert tables.starting_weights(str(path)) == " fine-tuned from pretrain_x/backbone.weights.h5"
