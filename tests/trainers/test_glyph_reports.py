"""trainers/glyph_reports.py: what the two glyph reports share."""

from trainers import glyph_reports


def test_pairs_tables_in_one_cell_or_two():
    pairs = [("A", "Α", 0.0), ("e", "c", 0.12345)]
    assert glyph_reports.pairs_table("Closest:", pairs) == [
        "Closest:",
        "",
        "| pair | distance |",
        "|---|---:|",
        "| `A` (U+0041) `Α` (U+0391) | 0.000 |",
        "| `e` (U+0065) `c` (U+0063) | 0.123 |",
    ]
    assert glyph_reports.pairs_table("Across:", pairs[1:], heads=("kept", "candidate")) == [
        "Across:",
        "",
        "| kept | candidate | distance |",
        "|---|---|---:|",
        "| `e` (U+0065) | `c` (U+0063) | 0.123 |",
    ]
