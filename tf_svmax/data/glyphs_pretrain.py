"""A glyph *pretraining* set whose classes are disjoint from the retrieval glyphs.

Backbones can be pretrained by softmax classification on these characters before they are
fine-tuned on the open-set retrieval glyphs (`tf_svmax.data.glyphs`), as the papers' backbones
were pretrained on ImageNet: over a thousand classes from Unicode blocks that the retrieval set
does not draw from (mathematical operators, arrows, box drawing, geometric shapes, technical and
miscellaneous symbols, dingbats, IPA, Hebrew, Arabic, Lao, Braille, ...), drawn
from the fonts matplotlib ships and rendered exactly like the retrieval glyphs
(`glyphs.render_instance`: stroke, warp, placement, blur, contrast and noise per image).

The accented and extended variants of the retrieval scripts (Latin Extended-A/B and Additional,
Greek Extended, Cyrillic Supplement/Extended, the rest of Armenian and Georgian) are *not* used:
they are the retrieval letters with diacritics, not a disjoint source. Neither are characters
that Unicode decomposes into retrieval-script letters or digits (double-struck ``ℝ``, Roman
numerals, fractions, ``№``, the Kelvin and Ohm signs) nor the circled digits of the dingbats.
Turned letters (IPA's ``ɐ``, ``Ⅎ``) stay: a half-turn is another shape, which the ±12° rotation
of the rendering never reaches.

Classes follow the retrieval set's look-alike rule (`glyphs.MERGE_DISTANCE`,
`glyphs.MERGE_QUANTILE`, the canonical renderings of `glyphs.canonical_renderings`), run over
the union of every retrieval candidate (all of `glyphs.CANDIDATES` with at least
`glyphs.MIN_FONTS` fonts, the ones the retrieval set merged away included) and the pretraining
candidates: a pretraining character whose transitive group holds any retrieval candidate is
dropped, the other groups keep their first member. `pretraining_classes` returns the selection
with its evidence; `trainers/glyphs_pretrain_report.py` writes it to
``docs/glyphs_pretraining.md``.

    split = load_glyph_pretraining()          # from the cache in ~1 s; see the docs for the
    x_train, y_train = split["train"]         # generation time ([n, 32, 32, 1] float32, int64)
    x_held, y_held = split["held_out"]        # the last 4 images of every class
"""

import functools
import hashlib
import json
import os
import unicodedata

import numpy as np

from tf_svmax import _extras, checks
from tf_svmax.data import glyphs

# Bumped whenever the generator's output changes for the same arguments (part of the cache key).
GENERATOR_VERSION = 1

# Unicode blocks the candidates come from, in priority order (a look-alike group keeps its
# earliest member). Runic and Ogham have no glyph, or fewer than MIN_FONTS, in matplotlib's fonts;
# the Canadian syllabics (~240 more classes, DejaVu Sans only), the eight-dot Braille cells and
# the pictographic blocks (Yijing, Tai Xuan Jing, dominoes, playing cards, emoticons) are left
# out to keep the generation within a minute on a 2-core machine.
BLOCKS = (
    ("Mathematical Operators", 0x2200, 0x22FF),
    ("Supplemental Mathematical Operators", 0x2A00, 0x2AFF),
    ("Miscellaneous Mathematical Symbols-A", 0x27C0, 0x27EF),
    ("Miscellaneous Mathematical Symbols-B", 0x2980, 0x29FF),
    ("Arrows", 0x2190, 0x21FF),
    ("Supplemental Arrows-A", 0x27F0, 0x27FF),
    ("Supplemental Arrows-B", 0x2900, 0x297F),
    ("Miscellaneous Symbols and Arrows", 0x2B00, 0x2BFF),
    ("Geometric Shapes", 0x25A0, 0x25FF),
    ("Box Drawing", 0x2500, 0x257F),
    ("Block Elements", 0x2580, 0x259F),
    ("Miscellaneous Technical", 0x2300, 0x23FF),
    ("Miscellaneous Symbols", 0x2600, 0x26FF),
    ("Dingbats", 0x2700, 0x27BF),
    ("Letterlike Symbols", 0x2100, 0x214F),
    ("Number Forms", 0x2150, 0x218F),
    ("Currency Symbols", 0x20A0, 0x20CF),
    ("IPA Extensions", 0x0250, 0x02AF),
    ("Hebrew", 0x0590, 0x05FF),
    ("Arabic", 0x0600, 0x06FF),
    ("Arabic Presentation Forms-A", 0xFB50, 0xFDFF),
    ("Arabic Presentation Forms-B", 0xFE70, 0xFEFF),
    ("Lao", 0x0E80, 0x0EFF),
    # The 63 six-dot cells of standard Braille (U+2800, the blank cell, draws nothing); the
    # 192 eight-dot cells would add as many classes and a fifth to the generation time.
    ("Braille Patterns", 0x2800, 0x283F),
)
# Scripts of the retrieval set: a character whose decomposition holds one of their letters or
# digits is a styled copy of a retrieval class (``ℂ`` -> ``C``, ``Ⅻ`` -> ``XII``, ``⅓``).
_RETRIEVAL_SCRIPTS = ("LATIN", "GREEK", "CYRILLIC", "ARMENIAN", "GEORGIAN", "DIGIT")


def _copies_a_retrieval_class(character):
    """Whether Unicode declares `character` a form of retrieval-script letters or digits: its
    compatibility decomposition holds one, or it is a circled digit or number (the dingbats'
    ``❶`` ... ``❿``, which Unicode does not decompose)."""
    name = unicodedata.name(character, "")
    if "CIRCLED" in name and ("DIGIT" in name or "NUMBER" in name):
        return True
    decomposed = unicodedata.normalize("NFKD", character)
    return decomposed != character and any(
        d.isalnum()
        and (d in glyphs.CANDIDATES or unicodedata.name(d, "").split(" ")[0] in _RETRIEVAL_SCRIPTS)
        for d in decomposed
    )


def _candidates():
    """Every code point of `BLOCKS` that is a visible character (no mark, control, format or
    space), not a retrieval candidate itself and not a copy of one, in `BLOCKS` order."""
    out = []
    retrieval = set(glyphs.CANDIDATES)
    for _, first, last in BLOCKS:
        for code in range(first, last + 1):
            character = chr(code)
            if unicodedata.category(character)[0] in "MCZ" or character in retrieval:
                continue
            if not _copies_a_retrieval_class(character):
                out.append(character)
    return "".join(out)


# Candidate characters in priority order (a look-alike group keeps its first member).
CANDIDATES = _candidates()

# A character needs this many fonts that draw it (the retrieval set asks glyphs.MIN_FONTS = 8).
# Hebrew, Arabic, Lao, Braille and many symbols are drawn only by DejaVu Sans
# (regular, bold, oblique, bold oblique) or DejaVu Sans + Mono: asking for 8 would leave mostly
# the operators, arrows and box drawing that DejaVu Serif and STIX also have, fewer than 1,000
# classes. With 4 (one family in its four styles), the variation within a class comes mostly
# from each image's stroke, warp, placement, blur, contrast and noise (`glyphs.render_instance`),
# as pretraining on a synthetic source may: the retrieval set keeps its stricter minimum.
MIN_FONTS = 4
# A code point no font maps: each font draws its .notdef box for it.
_UNMAPPED = "\U0010fffd"


def block_name(character):
    """The name of the `BLOCKS` entry holding `character` (ValueError when none does)."""
    code = ord(character)
    for name, first, last in BLOCKS:
        if first <= code <= last:
            return name
    raise ValueError(checks.invalid("character", "a character of BLOCKS", character))


def pretraining_classes():
    """How the pretraining classes are chosen, with the evidence.

    Returns a dict:

    - ``characters``: the candidates drawn by at least `MIN_FONTS` fonts (a font whose drawing
      of the character is blank or its .notdef box does not count), in `CANDIDATES` order;
    - ``coverage``: ``{character: [font file names that draw it]}`` for them;
    - ``retrieval``: the retrieval candidates (`glyphs.CANDIDATES` with at least
      `glyphs.MIN_FONTS` fonts, the ones the retrieval set merged away included);
    - ``distance``: ``[len(characters), len(characters) + len(retrieval)]``, the lower
      `glyphs.MERGE_QUANTILE` of the per-font RMS distances between canonical renderings
      (columns: ``characters``, then ``retrieval``; NaN where no font has both);
    - ``dropped``: the characters dropped because their group holds a retrieval candidate, as
      dicts ``character``, ``retrieval`` (the closest retrieval candidate), ``distance`` (to
      it), ``chain`` (a shortest chain of look-alike pairs from the character to a retrieval
      candidate: ``[character, ..., retrieval candidate]``, each step below
      `glyphs.MERGE_DISTANCE`) and ``via`` (None when the character is itself next to a
      retrieval candidate, else ``(the chain's next character, distance to it)``);
    - ``groups``: the other groups of look-alikes (lists; the first member is kept);
    - ``classes``: the kept characters, in `CANDIDATES` order;
    - ``excluded``: ``(character, font file name)`` drawings left out as blank or .notdef.

    Computed once per process for the same font files and Pillow (a few seconds).
    """
    selection = _selection(glyphs.fonts_fingerprint())
    out = dict(selection)
    for key in ("characters", "retrieval", "dropped", "groups", "classes", "excluded"):
        out[key] = list(selection[key])
    out["groups"] = [list(g) for g in selection["groups"]]
    out["dropped"] = [{**d, "chain": list(d["chain"])} for d in selection["dropped"]]
    out["coverage"] = {c: list(f) for c, f in selection["coverage"].items()}
    out["distance"] = selection["distance"].copy()
    return out


@functools.lru_cache(maxsize=1)
def _selection(fingerprint):
    del fingerprint  # the cache's key: the fonts and Pillow the result was computed with
    from PIL import Image

    # Pretraining candidates: fonts that map the character and draw something other than blank
    # or their .notdef box.
    coverage = glyphs.font_coverage(CANDIDATES)
    mapped = [c for c in CANDIDATES if len(coverage[c]) >= MIN_FONTS]
    fonts = list(glyphs.load_fonts(2 * glyphs.CANONICAL_SIZE).items())
    full = len(glyphs.FULL_FONTS)  # Computer Modern (the last fonts) draws none of these
    rendered = glyphs.canonical_renderings(mapped, coverage=coverage)[:full]
    excluded = []
    for f, (name, font) in enumerate(fonts[:full]):
        box = glyphs.render(font, _UNMAPPED, 2 * glyphs.CANONICAL_SIZE)
        box = box.resize((glyphs.CANONICAL_SIZE,) * 2, Image.Resampling.BOX)
        box = np.asarray(box, np.float32).reshape(-1) / 255.0
        drawn = ~np.isnan(rendered[f, :, 0])
        blank = drawn & (rendered[f].max(axis=1, initial=0.0) == 0.0)
        notdef = drawn & np.all(rendered[f] == box, axis=1)
        for c in np.flatnonzero(blank | notdef):
            excluded.append((mapped[c], name))
            coverage[mapped[c]] = [n for n in coverage[mapped[c]] if n != name]
            rendered[f, c] = np.nan
    keep = [i for i, c in enumerate(mapped) if len(coverage[c]) >= MIN_FONTS]
    characters = [mapped[i] for i in keep]
    rendered = rendered[:, keep]
    # Retrieval candidates, drawn in the same fonts (Computer Modern is never shared).
    retrieval_coverage = glyphs.font_coverage()
    retrieval = [c for c in glyphs.CANDIDATES if len(retrieval_coverage[c]) >= glyphs.MIN_FONTS]
    drawn_retrieval = glyphs.canonical_renderings(retrieval, coverage=retrieval_coverage)[:full]
    distance = _lower_quantile_distances(rendered, drawn_retrieval)
    groups, dropped, classes = _groups(characters, retrieval, distance)
    return {
        "characters": characters,
        "coverage": {c: coverage[c] for c in characters},
        "retrieval": retrieval,
        "distance": distance,
        "dropped": dropped,
        "groups": groups,
        "classes": classes,
        "excluded": excluded,
    }


def _lower_quantile_distances(renderings, others):
    """``[C, C + O]``: for each character of `renderings` (``[fonts, C, pixels]``, NaN where a
    font lacks it) and each of `renderings` then `others` (``[fonts, O, pixels]``), the lower
    `glyphs.MERGE_QUANTILE` of their RMS distances over the fonts that draw both (NaN where none
    does), as `glyphs.font_distances` + `glyphs.lower_quantile` give for one set.

    The full ``[fonts, C + O, C + O]`` array would take gigabytes, and most of it would be NaN
    (many characters are in one family only). Characters are grouped by the set of fonts that
    draw them: for two groups every pair shares the same fonts, so their distances form a dense
    ``[shared fonts, rows, columns]`` block. One row group at a time, each of its fonts gives the
    distances to the columns it draws in one product (float64, by the Gram identity as in
    `glyphs.font_distances`), shared out to the blocks; within `renderings` only the blocks on
    and after the diagonal are computed, the others are their transposes.
    """
    count = renderings.shape[1]
    columns = np.concatenate([renderings, others], axis=1)
    own = _font_sets(renderings)
    theirs = [(mask, index + count) for mask, index in _font_sets(others)]
    out = np.full((count, columns.shape[1]), np.nan)
    for a, (row_fonts, rows) in enumerate(own):
        targets = own[a:] + theirs
        for (_, index), value in zip(
            targets, _block_quantiles(columns, row_fonts, rows, targets), strict=True
        ):
            if value is not None:
                out[np.ix_(rows, index)] = value
                if index[0] < count:
                    out[np.ix_(index, rows)] = value.T
    return out


def _block_quantiles(columns, row_fonts, rows, targets):
    """For the characters `rows` (all drawn by exactly the fonts `row_fonts`) and each
    ``(fonts, indices)`` of `targets`, the lower quantile of the per-font distances over the
    shared fonts (``[len(rows), len(indices)]``), or None where they share no font."""
    pixels = columns.shape[-1]
    blocks = [np.empty((np.sum(row_fonts & mask), len(rows), len(i))) for mask, i in targets]
    filled = [0] * len(targets)
    for f in np.flatnonzero(row_fonts):
        drawn = [t for t, (mask, _) in enumerate(targets) if mask[f]]
        index = np.concatenate([targets[t][1] for t in drawn])
        x, y = columns[f, rows].astype(np.float64), columns[f, index].astype(np.float64)
        d2 = np.sum(x**2, axis=1)[:, None] + np.sum(y**2, axis=1)[None, :] - 2.0 * (x @ y.T)
        d = np.sqrt(np.maximum(d2, 0.0) / pixels)  # clamped against cancellation
        at = 0
        for t in drawn:
            size = len(targets[t][1])
            blocks[t][filled[t]] = d[:, at : at + size]
            filled[t] += 1
            at += size
    return [
        glyphs.lower_quantile(block, glyphs.MERGE_QUANTILE) if len(block) else None
        for block in blocks
    ]


def _font_sets(renderings):
    """``[(fonts mask [F] bool, indices of the characters drawn by exactly those fonts)]``."""
    drawn = ~np.isnan(renderings[..., 0])  # [F, characters]
    sets = {}
    for i, column in enumerate(drawn.T):
        sets.setdefault(column.tobytes(), (column, []))[1].append(i)
    return [(mask, np.array(index)) for mask, index in sets.values() if mask.any()]


def _groups(characters, retrieval, distance):
    """The look-alike rule over the union (rows: pretraining characters; columns: them, then
    the retrieval candidates). Pairs of two retrieval candidates are not needed: a path from a
    pretraining character to a retrieval candidate reaches its first one through pretraining
    characters only, so they cannot change which groups hold one."""
    n, m = len(characters), len(retrieval)
    # Nodes: the retrieval candidates 0 .. m - 1, then the pretraining characters. Each root is
    # its group's smallest node: a retrieval candidate wherever the group holds one, else its
    # earliest pretraining character.
    parent = list(range(m + n))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    close = np.nan_to_num(distance, nan=np.inf) < glyphs.MERGE_DISTANCE
    for i, j in np.argwhere(close):
        a, b = root(m + int(i)), root(m + int(j) if j < n else int(j) - n)
        if a != b:
            parent[max(a, b)] = min(a, b)
    members = {}
    for i in range(n):
        members.setdefault(root(m + i), []).append(i)
    groups, dropped, classes = [], [], []
    for r, group in members.items():
        if r >= m:  # no retrieval candidate in the group: its first member is a class
            classes.append(group[0])
            if len(group) > 1:
                groups.append([characters[i] for i in group])
            continue
        dropped += _chains(characters, retrieval, distance, group)
    return groups, dropped, [characters[i] for i in sorted(classes)]


def _chains(characters, retrieval, distance, group):
    """The `dropped` entries of a group that holds a retrieval candidate: each member's closest
    retrieval candidate, and the shortest chain of look-alike pairs (each below
    `glyphs.MERGE_DISTANCE`) that leads from it to one."""
    n = len(characters)
    close = np.nan_to_num(distance, nan=np.inf) < glyphs.MERGE_DISTANCE
    # Breadth-first from the members that are next to a retrieval candidate themselves.
    step = {i: None for i in group if close[i, n:].any()}
    frontier = list(step)
    while frontier:
        reached = []
        for i in frontier:
            for k in group:
                if k not in step and close[k, i]:
                    step[k] = i
                    reached.append(k)
        frontier = reached
    entries = []
    for i in group:
        path = [i]
        while step[path[-1]] is not None:
            path.append(step[path[-1]])
        last = path[-1]  # next to a retrieval candidate: its closest one ends the chain
        end = int(np.nanargmin(distance[last, n:]))
        j = int(np.nanargmin(distance[i, n:]))
        entries.append(
            {
                "character": characters[i],
                "retrieval": retrieval[j],
                "distance": float(distance[i, n + j]),
                "via": None
                if len(path) == 1
                else (characters[path[1]], float(distance[i, path[1]])),
                "chain": [characters[k] for k in path] + [retrieval[end]],
            }
        )
    return entries


def generate_glyph_pretraining(*, seed=0, images_per_class=32, image_size=32):
    """Renders the whole set (no cache, no held-out split): ``(images [n, s, s, 1] float32,
    labels [n] int64, characters)`` where label ``i`` is ``characters[i]`` (the classes of
    `pretraining_classes`, in its order) and class ``i`` holds images
    ``i * images_per_class, ..., (i + 1) * images_per_class - 1``.

    Each image draws its font (among those that draw the character), stroke, warp, placement,
    blur, contrast and noise from a generator seeded by ``(seed, character code, instance)``,
    as `glyphs.generate_glyphs` does: the same arguments and font files give identical arrays,
    and instance ``k`` does not depend on `images_per_class`.
    """
    selection = pretraining_classes()
    return glyphs.render_classes(
        selection["classes"],
        selection["coverage"],
        seed=seed,
        images_per_class=images_per_class,
        image_size=image_size,
    )


def cache_key(*, seed, images_per_class, image_size):
    """Hash of the generator's settings, its version and the retrieval generator's, the look-alike
    rule's constants, both candidate lists, Pillow's version and the font files."""
    settings = {
        "seed": seed,
        "images_per_class": images_per_class,
        "image_size": image_size,
        "generator_version": GENERATOR_VERSION,
        "glyphs_generator_version": glyphs.GENERATOR_VERSION,
        "min_fonts": MIN_FONTS,
        "retrieval_min_fonts": glyphs.MIN_FONTS,
        "merge_distance": glyphs.MERGE_DISTANCE,
        "merge_quantile": glyphs.MERGE_QUANTILE,
        "canonical_size": glyphs.CANONICAL_SIZE,
        "font_size": glyphs.FONT_SIZE,
        "baseline": glyphs.BASELINE,
        "candidates": CANDIDATES,
        "retrieval_candidates": glyphs.CANDIDATES,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    digest.update(glyphs.fonts_fingerprint().encode())  # Pillow's version and the font files
    return digest.hexdigest()[:20]


def load_glyph_pretraining(
    *, seed=0, images_per_class=32, held_out_per_class=4, image_size=32, cache_dir=None
):
    """The glyph pretraining set: ``{"train": (images, labels), "held_out": (images, labels),
    "characters": [...]}``.

    Every class of `pretraining_classes` (none of them a look-alike of a retrieval glyph
    candidate) with `images_per_class` images; the last `held_out_per_class` instances of each
    class are held out (a held-out top-1 for the classification), the others train. Labels index
    ``characters``; images are ``[n, image_size, image_size, 1]`` float32 in [0, 1], grouped by
    class in label order.

    Args:
      seed: Seeds every image.
      images_per_class: Images rendered per character (>= 2), the held-out ones included.
      held_out_per_class: The last instances of each class held out (>= 0, below
        `images_per_class`).
      image_size: Side of the square images in pixels (>= 16).
      cache_dir: Folder for the generated arrays (default `glyphs.default_cache_dir()`);
        ``False`` generates without reading or writing a cache. The file name is `cache_key`, so
        a change of settings, generator, candidates, Pillow or font files generates anew; the
        held-out split is taken after loading and shares the file.
    """
    seed, images_per_class, image_size = glyphs.check_render_settings(
        seed, images_per_class, image_size, cache_dir
    )
    held_out_per_class = checks.check_non_negative_int(held_out_per_class, "held_out_per_class")
    if held_out_per_class >= images_per_class:
        raise ValueError(
            checks.invalid(
                "held_out_per_class",
                f"an int >= 0 and < images_per_class ({images_per_class})",
                held_out_per_class,
            )
        )
    _extras.require(glyphs.RENDERING, "The glyph pretraining set (load_glyph_pretraining)")
    settings = {"seed": seed, "images_per_class": images_per_class, "image_size": image_size}
    path = key = None
    if cache_dir is not False:
        directory = glyphs.default_cache_dir() if cache_dir is None else os.fspath(cache_dir)
        if os.path.exists(directory) and not os.path.isdir(directory):
            # Checked before the generation (tens of seconds), which would fail only at its end.
            raise ValueError(
                checks.invalid(
                    "cache_dir", "a folder (or a path to create one); it is a file", directory
                )
            )
        key = cache_key(**settings)
        path = os.path.join(directory, f"glyph_pretraining-{key}.npz")
    cached = _read_cache(path, key, **settings) if path else None
    if cached is None:
        images, labels, characters = generate_glyph_pretraining(**settings)
        if path:
            glyphs.write_cache(
                path,
                images=images,
                labels=labels,
                characters=np.array(characters),
                key=np.array(key),
            )
    else:
        images, labels, characters = cached
    held_out = np.tile(
        np.arange(images_per_class) >= images_per_class - held_out_per_class, len(characters)
    )
    return {
        "train": (images[~held_out], labels[~held_out]),
        "held_out": (images[held_out], labels[held_out]),
        "characters": list(characters),
    }


def _read_cache(path, key, *, seed, images_per_class, image_size):
    """The cached arrays, or None when the file is missing, damaged or not this set's: its
    stored key must be the file's, its characters distinct candidates, and its images and labels
    the shapes, dtypes and label layout these settings generate. The class selection is not
    recomputed (seconds): the key covers everything it depends on."""
    del seed  # part of the key
    arrays = glyphs.read_cache(path, ("images", "labels", "characters", "key"))
    if arrays is None:
        return None
    images, labels, characters, stored_key = arrays
    characters = [str(c) for c in characters.reshape(-1)]
    classes = len(characters)
    if (
        str(stored_key) != key
        or len(set(characters)) != classes
        or not all(len(c) == 1 and c in CANDIDATES for c in characters)
        or images.dtype != np.float32
        or images.shape != (classes * images_per_class, image_size, image_size, 1)
        or labels.dtype != np.int64
        or not np.array_equal(labels, np.repeat(np.arange(classes), images_per_class))
    ):
        return None
    return images, labels, characters
