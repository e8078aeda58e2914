"""The trainers' shared figure helpers."""

import numpy as np
from matplotlib.font_manager import FontProperties

from trainers.harness import plots

PNG = b"\x89PNG\r\n\x1a\n"


def test_finish_figure_titles_lays_out_writes_and_closes(tmp_path):
    plt = plots.pyplot()
    sized, titled, untitled = (plt.subplots()[0] for _ in range(3))
    plots.finish_figure(sized, str(tmp_path / "sized.png"), "a title", title_size=7)
    plots.finish_figure(titled, str(tmp_path / "titled.png"), "a title")
    plots.finish_figure(untitled, str(tmp_path / "untitled.png"))
    assert sized.get_suptitle() == titled.get_suptitle() == "a title"
    assert sized._suptitle.get_fontsize() == 7
    # No title_size: matplotlib's figure-title size, not the plain text size.
    default = FontProperties(size=plt.rcParams["figure.titlesize"]).get_size_in_points()
    assert titled._suptitle.get_fontsize() == default != plt.rcParams["font.size"]
    assert untitled.get_suptitle() == ""
    for name in ("sized", "titled", "untitled"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG
    open_figures = plt.get_fignums()
    assert not {sized.number, titled.number, untitled.number} & set(open_figures)


def test_image_grid_draws_a_row_per_name_one_row_included(tmp_path):
    plt = plots.pyplot()
    images = np.linspace(0, 1, 3 * 8 * 8).reshape(3, 8, 8)
    before = plt.get_fignums()
    plots.image_grid(
        [("first", images), ("second", 1 - images)],
        str(tmp_path / "two.png"),
        "two rows",
        figsize=(3, 2),
        top=0.9,
        fontsize=6,
    )
    plots.image_grid(
        [("only", images)], str(tmp_path / "one.png"), "one row", figsize=(3, 1), top=0.8
    )
    assert plt.imread(tmp_path / "two.png").shape[:2] == (200, 300)  # figsize x 100 dpi
    assert plt.imread(tmp_path / "one.png").shape[:2] == (100, 300)
    assert plt.get_fignums() == before
