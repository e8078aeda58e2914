"""Writes how the glyph pretraining set is made, with the evidence that none of its classes is a
look-alike of a retrieval glyph: `docs/glyphs_pretraining.md` and
`docs/glyphs_pretraining_sample.png`.

    python -m trainers.glyphs_pretrain_report         # regenerates both (about a minute)

The report gives the class count per Unicode block, the font minimum, the generation time
(generated anew, no cache, selection and rendering timed apart), every character dropped as a
look-alike of a retrieval candidate with the candidate and the distance, the closest pairs of a
kept class and a retrieval candidate, and a sample grid (a class drawn from each block).
"""

import os
import time
import unicodedata

import numpy as np
from absl import flags

from trainers import quiet_start
from trainers.glyph_reports import character, pairs_table, write, written_by
from trainers.harness import flags as harness_flags
from trainers.harness.plots import image_grid

FLAGS = flags.FLAGS
flags.DEFINE_string("report", "docs/glyphs_pretraining.md", "Markdown output.")
flags.DEFINE_string(
    "sample", "docs/glyphs_pretraining_sample.png", "Sample grid (classes x instances)."
)
flags.DEFINE_integer("sample_instances", 12, "Columns of the sample grid.")


def _visible(character):
    return unicodedata.category(character)[0] not in "MCZ"


def sample_grid(split, columns, path):
    """One class per block (drawn at random, seeded), `columns` training instances each."""
    from tf_svmax.data import glyphs_pretrain

    x, y = split["train"]
    characters = split["characters"]
    rng = np.random.default_rng(0)
    rows = []
    for name, _, _ in glyphs_pretrain.BLOCKS:
        labels = [i for i, c in enumerate(characters) if glyphs_pretrain.block_name(c) == name]
        label = int(rng.choice(labels))
        rows.append((f"U+{ord(characters[label]):04X} {name}", x[y == label][:columns, ..., 0]))
    image_grid(
        rows,
        path,
        f"tf_svmax glyph pretraining set ({len(characters)} classes, none a look-alike of a "
        f"retrieval glyph):\none class per Unicode block (rows) x {columns} training "
        f"instances (columns), {x.shape[1]} x {x.shape[2]} px",
        figsize=(columns * 0.62 + 2.6, len(rows) * 0.62 + 0.9),
        top=0.95,
        ha="right",
        va="center",
        fontsize=7,
    )


def main(argv):
    del argv
    quiet_start.import_tensorflow()  # the flags are parsed: the work starts
    from tf_svmax.data import glyphs, glyphs_pretrain

    load = os.getloadavg()[0]
    started = time.perf_counter()
    selection = glyphs_pretrain.pretraining_classes()
    selecting = time.perf_counter() - started
    started = time.perf_counter()
    split = glyphs_pretrain.load_glyph_pretraining(cache_dir=False)  # the selection is reused
    rendering = time.perf_counter() - started
    load = max(load, os.getloadavg()[0])

    classes, characters = selection["classes"], selection["characters"]
    dropped, groups = selection["dropped"], selection["groups"]
    retrieval, distance = selection["retrieval"], selection["distance"]
    n, index = len(characters), {c: i for i, c in enumerate(characters)}
    (x_train, _), (x_held, _) = split["train"], split["held_out"]
    per_class = len(x_train) // len(classes) + len(x_held) // len(classes)
    held = len(x_held) // len(classes)
    coverage = selection["coverage"]
    fonts = [len(coverage[c]) for c in classes]
    retrieval_set = set(glyphs.CANDIDATES)
    merged = {m for g in groups for m in g[1:]}

    rows = []
    for name, first, last in glyphs_pretrain.BLOCKS:
        inside = [chr(code) for code in range(first, last + 1)]
        visible = [c for c in inside if _visible(c)]
        rows.append(
            (
                name,
                f"U+{first:04X}–U+{last:04X}",
                sum(c in retrieval_set for c in visible),
                sum(
                    c not in retrieval_set and c not in glyphs_pretrain.CANDIDATES for c in visible
                ),
                sum(c in glyphs_pretrain.CANDIDATES for c in inside),
                sum(glyphs_pretrain.block_name(c) == name for c in characters),
                sum(glyphs_pretrain.block_name(d["character"]) == name for d in dropped),
                sum(glyphs_pretrain.block_name(c) == name for c in merged),
                sum(glyphs_pretrain.block_name(c) == name for c in classes),
            )
        )
    totals = [sum(r[k] for r in rows) for k in range(2, 9)]

    # Closest pairs of a kept class and a retrieval candidate, and of two kept classes.
    kept = np.array([index[c] for c in classes])
    cross = distance[kept][:, n:]
    order = np.argsort(np.nan_to_num(cross, nan=np.inf), axis=None)[:25]
    closest_cross = [
        (classes[i], retrieval[j], cross[i, j])
        for i, j in zip(*np.unravel_index(order, cross.shape), strict=True)
    ]
    within = distance[np.ix_(kept, kept)].copy()
    within[np.tril_indices(len(kept))] = np.nan
    order = np.argsort(np.nan_to_num(within, nan=np.inf), axis=None)[:15]
    closest_within = [
        (classes[i], classes[j], within[i, j])
        for i, j in zip(*np.unravel_index(order, within.shape), strict=True)
    ]
    direct = [d for d in dropped if d["via"] is None]

    lines = [
        "# The glyph pretraining set",
        "",
        written_by("glyphs_pretrain_report"),
        "",
        "A source for pretraining backbones by softmax classification before they are "
        "fine-tuned on the [retrieval glyphs](glyphs.md), standing in for ImageNet "
        "pretraining: characters from Unicode blocks the retrieval set does not use, drawn from "
        "the fonts matplotlib ships and rendered exactly like the retrieval glyphs (the same "
        "`glyphs.render_instance`: stroke, warp, placement, blur, contrast and noise per image), "
        "with no class that the retrieval set's look-alike rule would merge with any retrieval "
        "candidate.",
        "",
        "```",
        "from tf_svmax.data import load_glyph_pretraining, glyphs_pretrain",
        "split = load_glyph_pretraining()  # seed=0, images_per_class=32, held_out_per_class=4,",
        "                                  # image_size=32, cache_dir=None",
        'x_train, y_train = split["train"]        # [n, 32, 32, 1] float32 in [0, 1], int64',
        'x_held, y_held = split["held_out"]       # the last 4 instances of every class',
        "evidence = glyphs_pretrain.pretraining_classes()  # classes, groups, dropped, distances",
        "```",
        "",
        f"- **{len(classes)} classes** × {per_class} images of 32 × 32 px: the last {held} "
        f"instances of each class are held out ({len(x_held)} images, for a held-out top-1), "
        f"the other {per_class - held} train ({len(x_train)} images). Labels index "
        "`characters`, classes in `glyphs_pretrain.CANDIDATES` order.",
        f"- Generated in **{selecting + rendering:.1f} s** on this machine (one process, no "
        f"cache; the 1-minute load average was {load:.1f} on its {os.cpu_count()} cores, shared "
        f"with other work): {selecting:.1f} s to choose the classes (canonical renderings of "
        f"{n + len(retrieval)} characters and their distances) and {rendering:.1f} s to render "
        "the images. Later loads read `~/.cache/tf_svmax/glyph_pretraining-<key>.npz`, whose "
        "key covers the settings, both generators' versions, both candidate lists, the "
        "look-alike rule's constants, Pillow's version and the font files' SHA-256; a damaged "
        "or foreign file is regenerated.",
        f"- {len(glyphs_pretrain.CANDIDATES)} candidate characters; {n} are drawn by at least "
        f"{glyphs_pretrain.MIN_FONTS} fonts; {len(dropped)} of those are dropped as look-alikes "
        f"of retrieval candidates and {len(merged)} merged into another pretraining class, "
        f"leaving {len(classes)}.",
        f"- Fonts per class: min {min(fonts)}, median {int(np.median(fonts))}, max {max(fonts)}"
        f" ({sum(f == 4 for f in fonts)} classes in exactly 4: one family's four styles).",
        "",
        "## Where the classes come from",
        "",
        "| block | code points | retrieval candidates | forms of retrieval letters / digits "
        f"| candidates | ≥ {glyphs_pretrain.MIN_FONTS} fonts | look-alikes of retrieval "
        "(dropped) | merged | classes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    lines += [
        "| **all** | | " + " | ".join(f"**{v}**" for v in totals) + " |",
        "",
        "Not used, on purpose:",
        "",
        "- **The accented and extended variants of the retrieval scripts** (Latin-1 letters, "
        "Latin Extended-A/B and Additional, Greek Extended, Cyrillic Supplement and Extended, "
        "the rest of Armenian and Georgian, mathematical alphanumerics, small capitals, "
        "super- and subscripts): they are the retrieval letters with diacritics or in another "
        "style, diacritic copies of retrieval classes rather than a disjoint source.",
        "- **Forms of retrieval letters and digits** (the column above): characters whose "
        "Unicode compatibility decomposition holds a Latin, Greek, Cyrillic, Armenian or "
        "Georgian letter or a digit (double-struck `ℝ`, Roman numerals `Ⅻ`, fractions `⅓`, "
        "`№`, `℃`, the Kelvin and Ohm signs) and the dingbats' circled digits and numbers "
        "(`❶` … `➓`, which Unicode does not decompose). Some would pass the pixel rule "
        "(`ℝ` differs from `R` by more than the threshold) but are still copies. Turned letters "
        "(IPA's `ɐ`, `Ⅎ`) stay: a half-turn is another shape, out of reach of the ±12° "
        "rotation of the rendering.",
        "- **Marks, controls, format characters and spaces** (Hebrew points, Arabic harakat): "
        "they draw nothing, or nothing on their own. Drawings that are blank or a font's "
        f".notdef box do not count as fonts: {len(selection['excluded'])} such drawings "
        f"({', '.join(sorted({character(c) for c, _ in selection['excluded']}))}).",
        "- **For time**: the Canadian syllabics (about 240 more classes, DejaVu Sans only), the "
        "192 eight-dot Braille cells and the pictographic blocks (Yijing, Tai Xuan Jing, "
        "dominoes, playing cards, emoticons) would keep the generation above a minute on this "
        "2-core machine. Runic and Ogham have no glyph, or fewer than "
        f"{glyphs_pretrain.MIN_FONTS} fonts, in matplotlib's fonts.",
        "",
        f"## The font minimum: {glyphs_pretrain.MIN_FONTS}",
        "",
        f"The retrieval set asks {glyphs.MIN_FONTS} fonts of a class: its variation within a "
        "class comes from the fonts. Hebrew, Arabic, Lao, Braille and many symbols are drawn "
        "only by DejaVu Sans (regular, bold, oblique, bold oblique) or DejaVu Sans and Sans "
        f"Mono; asking {glyphs.MIN_FONTS} here would leave mostly the operators, arrows and box "
        f"drawing that DejaVu Serif and STIX also have, fewer than 1,000 classes. With "
        f"{glyphs_pretrain.MIN_FONTS} (one family in its four styles) the variation within a "
        "class comes mostly from each image's stroke, warp, placement, blur, contrast and "
        "noise, which a synthetic pretraining source can afford; the retrieval set keeps its "
        "stricter minimum. Computer Modern draws none of these characters.",
        "",
        "## Disjoint from the retrieval glyphs",
        "",
        "The retrieval set's look-alike rule, with its constants and canonical renderings (each "
        "character drawn once per font, no warp; two characters are one class when the lower "
        f"{glyphs.MERGE_QUANTILE:g} quantile of their per-font RMS distances is below "
        f"{glyphs.MERGE_DISTANCE:g}; groups close transitively), is run over the union of "
        f"**every retrieval candidate** ({len(retrieval)}: all of `glyphs.CANDIDATES` drawn by "
        f"at least {glyphs.MIN_FONTS} fonts, including the "
        f"{len(retrieval) - len(glyphs.confusable_groups()['classes'])} the retrieval set "
        f"merged away) and the {n} pretraining candidates. **{len(dropped)} pretraining "
        "characters** are in a group that holds a retrieval candidate and are dropped "
        f"({len(direct)} directly below the threshold next to one, {len(dropped) - len(direct)}"
        " through a chain of other pretraining characters); the other groups keep their first "
        "member, as in the retrieval set. Pairs of two retrieval candidates need not be "
        "computed: a path from a pretraining character to a retrieval candidate reaches its "
        "first one through pretraining characters only. The union's distance matrix is "
        "computed per set of fonts (characters drawn by the same fonts form dense blocks) "
        f"rather than as a `[fonts, C, C]` array, which for {n + len(retrieval)} characters "
        "would take gigabytes.",
        "",
        "`tests/data/test_glyphs_pretrain.py` checks the result against an independent "
        "reference: for every kept class and every retrieval candidate, and for every two kept "
        "classes, the per-font RMS distances are recomputed with plain numpy from the canonical "
        "renderings (direct differences; the pairs whose smallest per-font distance is below "
        "the threshold, screened by the Gram identity, since a quantile is never below the "
        f"minimum) and reduced with `np.nanquantile(..., {glyphs.MERGE_QUANTILE:g}, axis=0)`: "
        f"all are at least {glyphs.MERGE_DISTANCE:g}. The same reference puts every character "
        "dropped directly (e.g. `∆`/`Δ`, Arabic `ا`/`l`, `∼`/`~`) and every step of the "
        "chains below the threshold, so the check can fail.",
        "",
        *pairs_table(
            "The 25 closest pairs of a kept class and a retrieval candidate:",
            closest_cross,
            heads=("kept class", "retrieval candidate"),
        ),
        "",
        *pairs_table("The 15 closest pairs of two kept classes:", closest_within),
        "",
        f"### The {len(dropped)} characters dropped as look-alikes of retrieval candidates",
        "",
        "Each with its closest retrieval candidate and their distance; where that is not below "
        "the threshold, a shortest chain of look-alike pairs (each below it) from the "
        "character to a retrieval candidate.",
        "",
    ]
    for name, _, _ in glyphs_pretrain.BLOCKS:
        entries = [d for d in dropped if glyphs_pretrain.block_name(d["character"]) == name]
        if entries:
            lines.append(
                f"- {name}: "
                + ", ".join(
                    f"`{d['character']}` → `{d['retrieval']}` {d['distance']:.3f}"
                    + (
                        ""
                        if d["via"] is None
                        else " (chain " + " → ".join(f"`{c}`" for c in d["chain"]) + ")"
                    )
                    for d in entries
                )
            )
    largest = sorted(groups, key=len, reverse=True)[:10]
    lines += [
        "",
        f"### Look-alikes merged within the pretraining set: {len(groups)} groups",
        "",
        "The ten largest (the first member is the class):",
        "",
    ]
    lines += ["- " + " ".join(f"`{c}`" for c in group) for group in largest]
    lines += [
        "",
        f"![Sample: one class per block x instances]({os.path.basename(FLAGS.sample)})",
        "",
    ]
    write(
        "glyphs_pretrain_report",
        lines,
        FLAGS.report,
        FLAGS.sample,
        lambda path: sample_grid(split, FLAGS.sample_instances, path),
    )


if __name__ == "__main__":
    harness_flags.run(main)
