"""Writes how the embedded glyph set is made, with the evidence: `docs/glyphs.md` and
`docs/glyphs_sample.png`.

    python -m trainers.glyphs_report                  # regenerates both (about 30 s)

The report gives the class and image counts, the generation time (generated anew, no cache),
the fonts, every merged group of look-alike characters with the distance that merged it, the
closest pairs that stayed apart, and the raw-pixel retrieval baseline on the test classes.
"""

import os
import time

import numpy as np
from absl import flags

from trainers import quiet_start
from trainers.glyph_reports import character, pairs_table, write, written_by
from trainers.harness import flags as harness_flags
from trainers.harness.plots import image_grid

FLAGS = flags.FLAGS
flags.DEFINE_string("report", "docs/glyphs.md", "Markdown output.")
flags.DEFINE_string("sample", "docs/glyphs_sample.png", "Sample grid (classes x instances).")
flags.DEFINE_integer("sample_classes", 12, "Rows of the sample grid (test classes).")
flags.DEFINE_integer("sample_instances", 12, "Columns of the sample grid.")


def _pairs(groups, distance, characters):
    """(merged pairs as (a, b, d) within groups, the closest pairs across kept classes)."""
    from tf_svmax.data import glyphs

    index = {c: i for i, c in enumerate(characters)}
    kept = [g[0] for g in groups["groups"]] + [
        c for c in groups["classes"] if all(c not in g for g in groups["groups"])
    ]
    merged = []  # (kept, dropped, distance to kept, (closest member, its distance) or None)
    for group in groups["groups"]:
        for member in group[1:]:
            d = distance[index[member], index[group[0]]]
            via = None
            if not d < glyphs.MERGE_DISTANCE:  # joined through another member of the group
                others = [o for o in group if o != member]
                closest = min(others, key=lambda o: distance[index[member], index[o]])
                via = (closest, distance[index[member], index[closest]])
            merged.append((group[0], member, d, via))
    apart = []
    for i, a in enumerate(kept):
        for b in kept[i + 1 :]:
            d = distance[index[a], index[b]]
            if np.isfinite(d):
                apart.append((a, b, d))
    return merged, sorted(apart, key=lambda t: t[2])


def sample_grid(split, rows, columns, path):
    """The first `rows` test classes, `columns` instances each."""
    x, y = split["test"]
    image_grid(
        [(split["characters"][c], x[y == c][:columns, ..., 0]) for c in np.unique(y)[:rows]],
        path,
        f"tf_svmax embedded glyph set: {rows} test classes (rows) x {columns} instances "
        f"(columns), {x.shape[1]} x {x.shape[2]} px",
        figsize=(columns * 0.62, rows * 0.68 + 0.8),
        top=0.96,
        labelpad=12,
        fontsize=10,
    )


def main(argv):
    del argv
    quiet_start.import_tensorflow()  # the flags are parsed: the work starts
    from tf_svmax import metrics
    from tf_svmax.data import glyphs

    started = time.perf_counter()
    split = glyphs.load_glyphs_open_set(cache_dir=False)
    seconds = time.perf_counter() - started
    groups = glyphs.confusable_groups()
    characters, distance = groups["characters"], groups["distance"]
    merged, apart = _pairs(groups, distance, characters)
    (x_train, y_train), (x_test, y_test) = split["train"], split["test"]
    raw = x_test.reshape(len(x_test), -1).astype(np.float64)
    raw -= raw.mean(axis=1, keepdims=True)
    raw /= np.linalg.norm(raw, axis=1, keepdims=True)
    baseline = metrics.evaluate_retrieval(raw, y_test, ks=(1, 8), seed=0, verbose=0)
    coverage = glyphs.font_coverage()
    lines = [
        "# The embedded glyph set",
        "",
        written_by("glyphs_report"),
        "",
        f"- **{len(split['characters'])} classes** × 32 images of 32 × 32 px: "
        f"{len(np.unique(y_train))} training classes ({len(x_train)} images), "
        f"{len(np.unique(y_test))} disjoint test classes ({len(x_test)} images).",
        f"- Generated in **{seconds:.1f} s** (this machine, one process, no cache); later "
        "loads read `~/.cache/tf_svmax/glyphs-<key>.npz`, whose key covers the settings, the "
        "generator version, Pillow's version and the font files' SHA-256.",
        f"- {len(glyphs.CANDIDATES)} candidate characters; {len(characters)} are drawn by at "
        f"least {glyphs.MIN_FONTS} of the {len(glyphs.FULL_FONTS) + len(glyphs.ALPHANUMERIC_FONTS)}"
        f" fonts; merging look-alikes leaves {len(groups['classes'])}.",
        f"- Raw pixels (mean-removed, unit norm) retrieve the test classes with R@1 "
        f"{100 * baseline['recall_at_1']:.1f} %, R@8 {100 * baseline['recall_at_8']:.1f} %, "
        f"NMI {baseline['nmi']:.3f}.",
        "",
        "Fonts (each image draws one among those that have its character): "
        + ", ".join(f"`{f}`" for f in glyphs.FULL_FONTS)
        + "; and for letters and digits only "
        + ", ".join(f"`{f}`" for f in glyphs.ALPHANUMERIC_FONTS)
        + ". Per image: stroke 0–2 px, rotation ±12°, shear ±0.25, scale ×e^±0.12, aspect "
        "×e^±0.1, shift ±6 % of the side, Gaussian blur (half of the images), background "
        "0–0.35, ink 0.65–1.0, Gaussian noise σ 0.02–0.08.",
        "",
        "## Which characters are one class",
        "",
        "Each character is rendered once per font without any warp (advance centred, baseline "
        "fixed, so x-height and cap height keep their sizes). For two characters, the RMS "
        "pixel difference of their renderings is taken in every font that has both; they are "
        f"the same class when the lower {glyphs.MERGE_QUANTILE:g} quantile of those distances "
        f"is below {glyphs.MERGE_DISTANCE:g}, i.e. when at least a quarter of the fonts draw "
        "them (nearly) alike. Groups are closed transitively and keep their first member "
        "(Latin before Greek before Cyrillic); the others are dropped. Homoglyphs across "
        "scripts (`A`/`Α`/`А`) sit at exactly 0; the rule is conservative and also drops some "
        "characters a careful reader could tell apart (e.g. `e` next to `c`, `Q` next to `O`).",
        "",
        f"{len(groups['groups'])} groups (kept ← dropped, each with its distance to the kept "
        "character; where that is above the threshold, the member that joined it):",
        "",
    ]
    for group in groups["groups"]:
        dropped = [m for m in merged if m[0] == group[0]]
        lines.append(
            f"- {character(group[0])} ← "
            + ", ".join(
                f"{character(b)} {d:.3f}"
                + ("" if via is None else f" (via `{via[0]}` {via[1]:.3f})")
                for _, b, d, via in dropped
            )
        )
    lines += [
        "",
        *pairs_table(
            f"The 25 closest pairs that stay apart (the threshold is {glyphs.MERGE_DISTANCE:g}):",
            apart[:25],
        ),
        "",
        f"Fonts per kept class: min {min(len(coverage[c]) for c in groups['classes'])}, "
        f"median {int(np.median([len(coverage[c]) for c in groups['classes']]))}.",
        "",
        f"![Sample: test classes x instances]({os.path.basename(FLAGS.sample)})",
        "",
    ]
    write(
        "glyphs_report",
        lines,
        FLAGS.report,
        FLAGS.sample,
        lambda path: sample_grid(split, FLAGS.sample_classes, FLAGS.sample_instances, path),
    )


if __name__ == "__main__":
    harness_flags.run(main)
