"""The embedded many-class open-set image set: characters rendered from the fonts matplotlib ships.

Several hundred character classes (Latin, Greek, Cyrillic, Armenian, Georgian, digits and
symbols), each image drawn with its own font (DejaVu Sans / Sans Mono / Serif and STIX in
regular, bold, italic and bold italic; Computer Modern for letters and digits), stroke width,
affine warp, position, contrast and noise. Nothing is downloaded: the fonts come with
matplotlib, the rasteriser with Pillow.

Classes that render alike (Latin ``A``, Greek ``Α``, Cyrillic ``А``; ``l``/``I``/``1``;
``O``/``0``) would be indistinguishable, so they are reduced to one class by a rule computed
from the fonts themselves (`confusable_groups`): every character is drawn once per font with
no warp (its advance centred, its baseline fixed, so x-height and cap height keep their
sizes), and two characters are one class when in at least `MERGE_QUANTILE` of the fonts that
have both their drawings differ by less than `MERGE_DISTANCE` (RMS pixel value in [0, 1]).
Groups close transitively; the first member (in `CANDIDATES` order) stays, the others are
dropped. `trainers/glyphs_report.py` writes every merge and the closest kept pairs to
``docs/glyphs.md``.

The classes are put in a seeded random order; the first half is the training split and the
disjoint second half the test split, as the papers split CUB-200, CARS196 and SOP.

    split = load_glyphs_open_set()        # < 1 s from the cache, ~6 s to generate (the
                                          # class rule's ~2 s once per process on top)
    x_train, y_train = split["train"]     # [n, 32, 32, 1] float32 in [0, 1], int64 labels
"""

import functools
import hashlib
import io
import json
import os
import tempfile
import zipfile
import zlib

import numpy as np

from tf_svmax import _extras, checks

# Bumped whenever the generator's output changes for the same arguments (part of the cache key).
GENERATOR_VERSION = 1

# Font families: every style of each. Computer Modern (TeX's OT1 encoding puts other symbols at
# the ASCII punctuation codes) is used for letters and digits only.
FULL_FONTS = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSans-BoldOblique.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSansMono-Oblique.ttf",
    "DejaVuSansMono-BoldOblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
    "STIXGeneralBolIta.ttf",
)
ALPHANUMERIC_FONTS = ("cmr10.ttf", "cmb10.ttf", "cmti10.ttf", "cmss10.ttf", "cmtt10.ttf")
_ALPHANUMERIC = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def _span(first, last, skip=""):
    return "".join(chr(c) for c in range(ord(first), ord(last) + 1) if chr(c) not in skip)


# Candidate characters in priority order (a confusable group keeps its first member).
CANDIDATES = (
    _span("A", "Z")
    + _span("a", "z")
    + _span("0", "9")
    + "#$%&?@{}<>[]()*+=/\\~^!"
    + _span("Α", "Ω", skip="\u03a2")
    + _span("α", "ω")
    + _span("А", "я")
    + "ЁЄІЇЎЂЋЉЊЏҐёєіїўђћљњџґ"
    + "∑∏∫√∞≈≠≤≥←→↑↓↔♠♣♥♦●■▲▼◆○□△▽◇⊕⊗∂∇∀∃∈∉∩∪⊂⊃∧∨¬±×÷§¶©®€£¥¢ßæœøþðÆŒØÞ"
    + _span("Ա", "Ֆ")
    + _span("ა", "ჰ")
)

# A character needs this many fonts to be a class: intra-class variation comes from the fonts.
MIN_FONTS = 8
# Two characters are one class when, in at least MERGE_QUANTILE of the fonts that have both,
# their canonical 32 x 32 renderings differ by less than MERGE_DISTANCE (RMS pixel value):
# see `confusable_groups`, and docs/glyphs.md for the pairs on either side of the threshold.
MERGE_DISTANCE = 0.08
MERGE_QUANTILE = 0.25
CANONICAL_SIZE = 32
# Font size and baseline as fractions of the square canvas: cap height + descender fit inside.
FONT_SIZE = 0.66
BASELINE = 0.74


def font_directory():
    """matplotlib's bundled TrueType folder."""
    import matplotlib

    return os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf")


def font_paths():
    """``{font file name: path}`` for every font the set draws with (`FULL_FONTS`, then
    `ALPHANUMERIC_FONTS`); FileNotFoundError when one is missing."""
    directory = font_directory()
    paths = {name: os.path.join(directory, name) for name in FULL_FONTS + ALPHANUMERIC_FONTS}
    missing = [p for p in paths.values() if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"Font files not found (is matplotlib installed?): {missing}")
    return paths


def font_coverage(characters=CANDIDATES):
    """``{character: [font file names that have a glyph for it]}`` for every character of
    `characters` (default: the candidates); Computer Modern counts for letters and digits only."""
    from fontTools.ttLib import TTFont

    coverage = {c: [] for c in characters}
    for name, path in font_paths().items():
        cmap = TTFont(path, lazy=True).getBestCmap()
        for c in coverage:
            if ord(c) in cmap and (name in FULL_FONTS or c in _ALPHANUMERIC):
                coverage[c].append(name)
    return coverage


def load_fonts(canvas):
    """Every font, sized for a `canvas`-pixel square (`FONT_SIZE` of its side)."""
    from PIL import ImageFont

    size = round(FONT_SIZE * canvas)
    return {name: ImageFont.truetype(path, size) for name, path in font_paths().items()}


def render(font, character, canvas, stroke_width=0):
    """The character drawn white on black in a `canvas` x `canvas` 8-bit image, its advance
    centred horizontally and its baseline at `BASELINE` of the height (no normalisation to its
    bounding box: x-height, cap height, ascenders and descenders keep their sizes, so ``o``
    and ``O`` differ as they do in text)."""
    from PIL import Image, ImageDraw

    image = Image.new("L", (canvas, canvas), 0)
    ImageDraw.Draw(image).text(
        (canvas / 2, BASELINE * canvas),
        character,
        fill=255,
        font=font,
        anchor="ms",  # middle of the advance, on the baseline
        stroke_width=stroke_width,
        stroke_fill=255,
    )
    return image


def canonical_renderings(characters=CANDIDATES, coverage=None):
    """``[len(fonts), len(characters), 32 * 32]`` float32 renderings (NaN where a font lacks
    the character) with no stroke, warp or noise; fonts in `font_coverage` order."""
    from PIL import Image

    coverage = font_coverage() if coverage is None else coverage
    loaded = load_fonts(2 * CANONICAL_SIZE)
    out = np.full((len(loaded), len(characters), CANONICAL_SIZE**2), np.nan, np.float32)
    for f, (name, font) in enumerate(loaded.items()):
        for c, character in enumerate(characters):
            if name in coverage[character]:
                image = render(font, character, 2 * CANONICAL_SIZE)
                small = image.resize((CANONICAL_SIZE,) * 2, Image.Resampling.BOX)
                out[f, c] = np.asarray(small, np.float32).reshape(-1) / 255.0
    return out


def font_distances(renderings):
    """``[F, C, C]`` RMS pixel difference between characters drawn in the same font (NaN
    where font ``f`` lacks one of them)."""
    x = renderings.astype(np.float64)
    squares = np.sum(x**2, axis=-1)  # NaN rows stay NaN through every step below
    # Squared distances by the Gram identity; clamped at 0 against cancellation.
    d2 = squares[:, :, None] + squares[:, None, :] - 2.0 * np.einsum("fcp,fdp->fcd", x, x)
    return np.sqrt(np.maximum(d2, 0.0) / x.shape[-1])


def lower_quantile(values, quantile):
    """`np.nanquantile(values, quantile, axis=0)` (linear interpolation) for a 3-D array,
    without its per-element Python loop; NaN where a column has no finite value."""
    ordered = np.sort(values, axis=0)  # NaN sorts last
    count = np.sum(~np.isnan(values), axis=0)
    position = quantile * np.maximum(count - 1, 0)
    low = np.floor(position).astype(np.int64)
    high = np.minimum(low + 1, np.maximum(count - 1, 0))
    at_low = np.take_along_axis(ordered, low[None], axis=0)[0]
    at_high = np.take_along_axis(ordered, high[None], axis=0)[0]
    value = at_low + (position - low) * (at_high - at_low)
    return np.where(count > 0, value, np.nan)


def confusable_groups(threshold=MERGE_DISTANCE, quantile=MERGE_QUANTILE):
    """How the classes are chosen, with the evidence.

    Two characters are confusable when, in at least a `quantile` share of the fonts that have
    both, their canonical renderings differ by less than `threshold` (RMS pixel value): the
    lower `quantile` of their per-font distances is below `threshold`.

    Returns a dict: ``characters`` (the candidates with at least `MIN_FONTS` fonts),
    ``distance`` (``[C, C]``, that lower quantile; NaN where no font has both), ``groups``
    (lists of characters joined by confusable pairs, transitively; the first member is the one
    kept) and ``classes`` (the kept characters, in `CANDIDATES` order).

    Computed once per process for the same arguments, font files and Pillow (about 2 s of
    renderings; every read of a cached set checks its class count against it).
    """
    found = _confusable_groups(threshold, quantile, fonts_fingerprint())
    return {
        "characters": list(found["characters"]),
        "distance": found["distance"].copy(),
        "groups": [list(g) for g in found["groups"]],
        "classes": list(found["classes"]),
    }


def fonts_fingerprint():
    """Pillow's version and the font files' SHA-256: what the renderings depend on besides the
    module's constants (the key of the per-process results computed from them)."""
    import PIL

    digest = hashlib.sha256(PIL.__version__.encode())
    for name, path in sorted(font_paths().items()):
        with open(path, "rb") as f:
            digest.update(name.encode() + hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _confusable_groups(threshold, quantile, fingerprint):
    del fingerprint  # the cache's key: the fonts and Pillow the result was computed with
    coverage = font_coverage()
    characters = [c for c in CANDIDATES if len(coverage[c]) >= MIN_FONTS]
    per_font = font_distances(canonical_renderings(characters, coverage=coverage))
    distance = lower_quantile(per_font, quantile)
    # Union-find over the confusable pairs; each root is the group's earliest member.
    parent = list(range(len(characters)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in np.argwhere(np.nan_to_num(distance, nan=np.inf) < threshold):
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups = {}
    for i in range(len(characters)):
        groups.setdefault(root(i), []).append(characters[i])
    return {
        "characters": characters,
        "distance": distance,
        "groups": [g for g in groups.values() if len(g) > 1],
        "classes": [characters[r] for r in sorted(groups)],
    }


def render_instance(font, character, rng, image_size):
    """One image of `character`: stroke, warp, placement, blur, contrast and noise from `rng`.
    `font` is loaded at the size for a canvas of twice `image_size`."""
    from PIL import Image, ImageFilter

    canvas = 2 * image_size
    image = render(font, character, canvas, stroke_width=int(rng.integers(0, 3)))
    # Warp about the canvas centre: rotation, shear, scale and aspect, then a shift.
    angle = np.deg2rad(rng.uniform(-12, 12))
    shear = rng.uniform(-0.25, 0.25)
    scale = np.exp(rng.uniform(-0.12, 0.12))
    aspect = np.exp(rng.uniform(-0.1, 0.1))
    rotate = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    forward = scale * rotate @ np.array([[aspect, shear], [0.0, 1.0 / aspect]])
    inverse = np.linalg.inv(forward)
    centre = np.array([canvas / 2, canvas / 2])
    shift = rng.uniform(-0.06, 0.06, size=2) * canvas
    offset = centre - inverse @ (centre + shift)  # output pixel p samples inverse @ p + offset
    warped = image.transform(
        image.size,
        Image.Transform.AFFINE,
        data=(*inverse[0], offset[0], *inverse[1], offset[1]),
        resample=Image.Resampling.BILINEAR,
    )
    if rng.uniform() < 0.5:
        warped = warped.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 1.2))))
    # Downsample the 2x canvas to the output size (box filter: antialiased).
    ink = np.asarray(warped.resize((image_size, image_size), Image.Resampling.BOX), np.float32)
    ink /= 255.0
    background, foreground = rng.uniform(0.0, 0.35), rng.uniform(0.65, 1.0)
    image = background + (foreground - background) * ink
    image += rng.normal(0.0, rng.uniform(0.02, 0.08), size=image.shape)
    return np.clip(image, 0.0, 1.0).astype(np.float32)


def generate_glyphs(*, seed=0, images_per_class=32, image_size=32):
    """Renders the whole set (no cache): ``(images [n, s, s, 1] float32, labels [n] int64,
    characters)`` where label ``i`` is ``characters[i]`` and classes come in seeded random order.

    Each image draws its font (among those that have the character), stroke, warp, placement,
    blur, contrast and noise from a generator seeded by ``(seed, character code, instance)``:
    the same arguments and font files give identical arrays.
    """
    classes = confusable_groups()["classes"]
    order = np.random.default_rng([seed, 0]).permutation(len(classes))
    characters = [classes[i] for i in order]
    return render_classes(
        characters,
        font_coverage(),
        seed=seed,
        images_per_class=images_per_class,
        image_size=image_size,
    )


def render_classes(characters, coverage, *, seed, images_per_class, image_size):
    """``(images [n, s, s, 1] float32, labels [n] int64, characters)``: `images_per_class`
    images of each character, label ``i`` for ``characters[i]``, grouped by class.

    Image ``k`` of a character draws its font (among ``coverage[character]``), stroke, warp,
    placement, blur, contrast and noise from a generator seeded by ``(seed, character code,
    k)``, so it depends neither on the other characters nor on `images_per_class`.
    """
    fonts = load_fonts(2 * image_size)
    images = np.empty((len(characters) * images_per_class, image_size, image_size, 1), np.float32)
    for label, character in enumerate(characters):
        names = sorted(coverage[character])
        for instance in range(images_per_class):
            rng = np.random.default_rng([seed, ord(character), instance])
            font = fonts[names[int(rng.integers(len(names)))]]
            index = label * images_per_class + instance
            images[index, ..., 0] = render_instance(font, character, rng, image_size)
    labels = np.repeat(np.arange(len(characters), dtype=np.int64), images_per_class)
    return images, labels, characters


# What drawing the set (and naming its cache file) needs beyond the core: the `trainers` extra.
RENDERING = {"matplotlib": "matplotlib", "PIL": "pillow", "fontTools": "fonttools"}


def default_cache_dir():
    """``~/.cache/tf_svmax`` (the user's cache directory)."""
    return os.path.join(os.path.expanduser("~"), ".cache", "tf_svmax")


def cache_key(*, seed, images_per_class, image_size):
    """Hash of the generator's settings, its version, Pillow's version and the font files."""
    import PIL

    digest = hashlib.sha256()
    settings = {
        "seed": seed,
        "images_per_class": images_per_class,
        "image_size": image_size,
        "generator_version": GENERATOR_VERSION,
        "pillow": PIL.__version__,
        "min_fonts": MIN_FONTS,
        "merge_distance": MERGE_DISTANCE,
        "merge_quantile": MERGE_QUANTILE,
        "font_size": FONT_SIZE,
        "baseline": BASELINE,
        "candidates": CANDIDATES,
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for name, path in sorted(font_paths().items()):
        with open(path, "rb") as f:
            digest.update(name.encode() + hashlib.sha256(f.read()).digest())
    return digest.hexdigest()[:20]


def check_render_settings(seed, images_per_class, image_size, cache_dir):
    """``(seed, images_per_class, image_size)`` of a rendered glyph set, validated (seed >= 0,
    images_per_class >= 2, image_size >= 16), and `cache_dir` checked (a folder path, None or
    False); a ValueError names the argument otherwise. Shared by every glyph source."""
    seed = checks.check_non_negative_int(seed, "seed")
    images_per_class = checks.check_positive_int(images_per_class, "images_per_class")
    if images_per_class < 2:
        raise ValueError(checks.invalid("images_per_class", "an int >= 2", images_per_class))
    image_size = checks.check_positive_int(image_size, "image_size")
    if image_size < 16:
        raise ValueError(checks.invalid("image_size", "an int >= 16", image_size))
    if not (cache_dir is None or cache_dir is False or isinstance(cache_dir, (str, os.PathLike))):
        raise ValueError(checks.invalid("cache_dir", "a folder path, None or False", cache_dir))
    return seed, images_per_class, image_size


def load_glyphs_open_set(*, seed=0, images_per_class=32, image_size=32, cache_dir=None):
    """The glyph set as an open-set split: ``{"train": (images, labels), "test": (images,
    labels), "characters": [...]}``.

    The first half of the (seeded) class order trains, the second half tests; labels index
    ``characters``. Images are ``[n, image_size, image_size, 1]`` float32 in [0, 1].

    Args:
      seed: Seeds the class order and every image.
      images_per_class: Images rendered per character (>= 2).
      image_size: Side of the square images in pixels (>= 16).
      cache_dir: Folder for the generated arrays (default `default_cache_dir()`); ``False``
        generates without reading or writing a cache. The file name is `cache_key`, so a change
        of settings, generator, Pillow or font files generates anew.
    """
    seed, images_per_class, image_size = check_render_settings(
        seed, images_per_class, image_size, cache_dir
    )
    _extras.require(RENDERING, "The glyph set (load_glyphs_open_set)")
    settings = {"seed": seed, "images_per_class": images_per_class, "image_size": image_size}
    path = None
    if cache_dir is not False:
        directory = default_cache_dir() if cache_dir is None else os.fspath(cache_dir)
        if os.path.exists(directory) and not os.path.isdir(directory):
            # Checked before the generation (seconds), which would otherwise fail only at the end.
            raise ValueError(
                checks.invalid(
                    "cache_dir", "a folder (or a path to create one); it is a file", directory
                )
            )
        path = os.path.join(directory, f"glyphs-{cache_key(**settings)}.npz")
    cached = _read_cache(path, **settings) if path else None
    if cached is None:
        images, labels, characters = generate_glyphs(**settings)
        if path:
            write_cache(path, images=images, labels=labels, characters=np.array(characters))
    else:
        images, labels, characters = cached
    train = labels < len(characters) // 2
    return {
        "train": (images[train], labels[train]),
        "test": (images[~train], labels[~train]),
        "characters": list(characters),
    }


def _read_cache(path, *, seed, images_per_class, image_size):
    """The cached arrays, or None when the file is missing, damaged (truncated, a failed CRC)
    or holds arrays that are not the set these settings generate (their shapes, dtypes, label
    layout and class count are checked); such a file is regenerated and replaced."""
    del seed  # part of the file name (the cache key), not of the arrays' layout
    arrays = read_cache(path, ("images", "labels", "characters"))
    if arrays is None:
        return None
    images, labels, characters = arrays[0], arrays[1], [str(c) for c in arrays[2]]
    classes = len(confusable_groups()["classes"])
    expected_labels = np.repeat(np.arange(classes, dtype=np.int64), images_per_class)
    if (
        images.dtype != np.float32
        or images.shape != (classes * images_per_class, image_size, image_size, 1)
        or labels.dtype != np.int64
        or not np.array_equal(labels, expected_labels)
        or len(characters) != classes
    ):
        return None
    return images, labels, characters


def read_cache(path, names):
    """The arrays `names` of the .npz file at `path` (a tuple, read in full), or None when the
    file is missing, damaged (truncated, a failed CRC) or lacks one of them."""
    if not os.path.isfile(path):
        return None
    try:
        with np.load(path) as f:
            return tuple(f[name] for name in names)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error):
        return None


def write_cache(path, **arrays):
    """Writes `arrays` to the .npz file at `path`, atomically: a crash leaves the old file or
    none, never a half-written one."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buffer.getvalue())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
