"""What the glyph sets' reports (`trainers.glyphs_report`, `trainers.glyphs_pretrain_report`)
share: a character as the reports name it, the tables of closest pairs, the opening line and
the writing of the report with its sample grid."""

import os
import sys


def character(c):
    """`c` as the reports name it: ``"`A` (U+0041)"``."""
    return f"`{c}` (U+{ord(c):04X})"


def pairs_table(caption, pairs, heads=("pair",)):
    """Markdown lines: `caption`, then a table of `pairs` (``(a, b, distance)`` each), the two
    characters in one cell under ``heads == ("pair",)`` or in one cell each under two `heads`,
    then the distance to three decimals."""
    separator = " " if len(heads) == 1 else " | "
    return [
        caption,
        "",
        "| " + " | ".join(heads) + " | distance |",
        "|" + "---|" * len(heads) + "---:|",
        *(f"| {character(a)}{separator}{character(b)} | {d:.3f} |" for a, b, d in pairs),
    ]


def written_by(program):
    """The report's opening line: the command (`sys.argv`) and the machine."""
    from tf_svmax import records  # imports Keras: the flags are checked by now

    device = records.device(records.environment()["machine"])
    return f"Written by `python -m trainers.{program} {' '.join(sys.argv[1:])}` on {device}."


def write(program, lines, report, sample, draw_sample):
    """Writes the report `lines` to `report`, the sample grid (``draw_sample(sample)``) to
    `sample`, and says so."""
    os.makedirs(os.path.dirname(os.path.abspath(report)) or ".", exist_ok=True)
    with open(report, "w") as f:
        f.write("\n".join(lines))
    draw_sample(sample)
    print(f"[{program}] wrote {report} and {sample}")
