"""The glyph pretraining set: over a thousand classes, none a look-alike of a retrieval glyph
candidate (checked against a plain-numpy reference of the rule), the held-out split,
determinism, the cache and the arguments."""

import shutil
import unicodedata

import numpy as np
import pytest

from tf_svmax import data
from tf_svmax.data import glyphs, glyphs_pretrain


@pytest.fixture(scope="module")
def selection():
    return glyphs_pretrain.pretraining_classes()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("glyph_pretraining_cache")


@pytest.fixture(scope="module")
def pretrain(cache):
    """Four images per class, the last held out."""
    return data.load_glyph_pretraining(images_per_class=4, held_out_per_class=1, cache_dir=cache)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Two images per class, none held out, generated apart from `pretrain`: its cache file."""
    folder = tmp_path_factory.mktemp("glyph_pretraining_small")
    split = data.load_glyph_pretraining(images_per_class=2, held_out_per_class=0, cache_dir=folder)
    (path,) = folder.glob("glyph_pretraining-*.npz")
    return split, path


# Blocks of the retrieval scripts' accented and extended variants: never a source.
RETRIEVAL_VARIANT_BLOCKS = (
    (0x0100, 0x024F),  # Latin Extended-A and -B
    (0x1E00, 0x1EFF),  # Latin Extended Additional
    (0x1F00, 0x1FFF),  # Greek Extended
    (0x0400, 0x052F),  # Cyrillic and Cyrillic Supplement
    (0x2DE0, 0x2DFF),  # Cyrillic Extended-A
    (0xA640, 0xA69F),  # Cyrillic Extended-B
    (0x0530, 0x058F),  # Armenian
    (0x10A0, 0x10FF),  # Georgian
    (0x2D00, 0x2D2F),  # Georgian Supplement
)


def test_over_a_thousand_classes_from_other_blocks(pretrain, selection):
    characters = pretrain["characters"]
    assert len(characters) >= 1000
    assert characters == selection["classes"] and len(set(characters)) == len(characters)
    assert not set(characters) & set(glyphs.CANDIDATES)
    for c in characters:
        glyphs_pretrain.block_name(c)  # in one of BLOCKS
        assert not any(first <= ord(c) <= last for first, last in RETRIEVAL_VARIANT_BLOCKS)
        assert unicodedata.category(c)[0] not in "MCZ"  # no mark, control, format or space


@pytest.mark.parametrize("character", ["ℝ", "Ⅻ", "⅓", "№", "\u212a", "\u2126", "❶", "➉", "ℓ"])
def test_unicode_forms_of_retrieval_letters_and_digits_are_not_candidates(character):
    assert character not in glyphs_pretrain.CANDIDATES


def test_candidates_are_visible_characters_of_the_blocks():
    assert "ɐ" in glyphs_pretrain.CANDIDATES and "א" in glyphs_pretrain.CANDIDATES
    assert "\u05b4" not in glyphs_pretrain.CANDIDATES  # a Hebrew point (a combining mark)
    assert "\u0600" not in glyphs_pretrain.CANDIDATES  # an Arabic format character


def test_every_class_has_enough_fonts_that_draw_it(selection):
    from fontTools.ttLib import TTFont

    paths = glyphs.font_paths()
    cmaps = {name: TTFont(paths[name], lazy=True).getBestCmap() for name in glyphs.FULL_FONTS}
    for character in selection["classes"]:
        fonts = selection["coverage"][character]
        assert len(fonts) >= glyphs_pretrain.MIN_FONTS == 4
        for name in fonts:  # never Computer Modern, and every font maps the character
            assert name in glyphs.FULL_FONTS and cmaps[name][ord(character)] != ".notdef"


def _per_font(renderings, pairs):
    """``[fonts, len(pairs)]`` RMS distances by direct differences (NaN where a font lacks one
    of the two characters); `renderings` is ``[fonts, characters, pixels]``."""
    a, b = renderings[:, pairs[:, 0]], renderings[:, pairs[:, 1]]
    return np.sqrt(np.mean((a.astype(np.float64) - b) ** 2, axis=-1))


def _reference_lower_quantile(renderings, rows, columns):
    """``{(row, column): lower MERGE_QUANTILE of the per-font distances}`` (np.nanquantile over
    the fonts drawing both, from direct differences) for every pair whose *smallest* per-font
    distance is below MERGE_DISTANCE + 0.001; any other pair's quantile is at least its minimum,
    so at least MERGE_DISTANCE. The minimum is screened per font with the Gram identity."""
    smallest = np.full((len(rows), len(columns)), np.inf)
    for x in renderings:
        r = np.flatnonzero(~np.isnan(x[rows, 0]))  # the rows and columns this font draws
        c = np.flatnonzero(~np.isnan(x[columns, 0]))
        a, b = x[rows[r]].astype(np.float64), x[columns[c]].astype(np.float64)
        d2 = np.sum(a**2, 1)[:, None] + np.sum(b**2, 1)[None, :] - 2.0 * a @ b.T
        d = np.sqrt(np.maximum(d2, 0.0) / x.shape[-1])
        smallest[np.ix_(r, c)] = np.minimum(smallest[np.ix_(r, c)], d)
    near = np.argwhere(smallest < glyphs.MERGE_DISTANCE + 0.001)
    pairs = np.stack([rows[near[:, 0]], columns[near[:, 1]]], axis=1)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    quantile = np.nanquantile(_per_font(renderings, pairs), glyphs.MERGE_QUANTILE, axis=0)
    return dict(zip(map(tuple, pairs), quantile, strict=True))


@pytest.fixture(scope="module")
def reference(selection):
    """Canonical renderings of the kept classes and of every retrieval candidate (with at least
    glyphs.MIN_FONTS fonts, recounted here), in the fonts that draw them."""
    coverage = glyphs.font_coverage()
    retrieval = [c for c in glyphs.CANDIDATES if len(coverage[c]) >= glyphs.MIN_FONTS]
    assert selection["retrieval"] == retrieval and len(retrieval) == 354
    assert set(retrieval) > set(glyphs.confusable_groups()["classes"])  # merged ones included
    classes = selection["classes"]
    extra = sorted({d["character"] for d in selection["dropped"]} | {"∆", "ا", "∼"})
    characters = classes + retrieval + extra
    coverage.update(glyphs.font_coverage(extra))
    coverage.update(selection["coverage"])
    rendered = glyphs.canonical_renderings(characters, coverage=coverage)
    return characters, rendered, len(classes), len(retrieval)


def test_blank_drawings_do_not_count_as_fonts(selection, reference):
    # The blank Braille cell maps in DejaVu but draws nothing: excluded, so not a class.
    assert "\u2800" in glyphs_pretrain.CANDIDATES
    assert ("\u2800", "DejaVuSans.ttf") in selection["excluded"]
    assert "\u2800" not in selection["characters"]
    _, rendered, n, _ = reference  # the classes first, in the fonts that draw them
    ink = np.sum(rendered[:, :n], axis=-1)  # NaN where a font does not draw the class
    assert np.all(ink[~np.isnan(ink)] > 0)
    assert np.array_equal(
        ~np.isnan(ink).T,
        [
            [name in selection["coverage"][c] for name in glyphs.font_paths()]
            for c in selection["classes"]
        ],
    )


def test_no_class_is_a_look_alike_of_any_retrieval_candidate(reference, selection):
    characters, rendered, n, m = reference
    quantiles = _reference_lower_quantile(rendered, np.arange(n), np.arange(n, n + m))
    threshold = glyphs.MERGE_DISTANCE
    close = {(characters[i], characters[j]): q for (i, j), q in quantiles.items() if q < threshold}
    assert not close
    assert len(quantiles) > 50  # the pairs near the threshold were checked exactly

    # The reference does flag look-alikes: every character dropped because it is (directly)
    # close to a retrieval candidate, among them known ones.
    index = {c: i for i, c in enumerate(characters)}
    direct = [d for d in selection["dropped"] if d["via"] is None]
    assert len(direct) > 50
    known = {("∆", "Δ"), ("ا", "l"), ("∼", "~")}
    assert known <= {(d["character"], d["retrieval"]) for d in direct}
    pairs = np.array([(index[d["character"]], index[d["retrieval"]]) for d in direct])
    quantile = np.nanquantile(_per_font(rendered, pairs), glyphs.MERGE_QUANTILE, axis=0)
    assert np.all(quantile < glyphs.MERGE_DISTANCE)
    expected = np.array([d["distance"] for d in direct])
    np.testing.assert_allclose(quantile, expected, atol=1e-7)
    # And every step of the chains that drop the others (a pretraining character next to
    # another, ..., next to a retrieval candidate).
    steps = {
        (index[a], index[b])
        for d in selection["dropped"]
        for a, b in zip(d["chain"][:-1], d["chain"][1:], strict=True)
    }
    assert len(steps) > len(direct)
    quantile = np.nanquantile(
        _per_font(rendered, np.array(sorted(steps))), glyphs.MERGE_QUANTILE, axis=0
    )
    assert np.all(quantile < glyphs.MERGE_DISTANCE)


def test_no_two_classes_are_look_alikes(reference, selection):
    characters, rendered, n, _ = reference
    quantiles = _reference_lower_quantile(rendered[:, :n], np.arange(n), np.arange(n))
    threshold = glyphs.MERGE_DISTANCE
    assert not [
        (characters[i], characters[j], q) for (i, j), q in quantiles.items() if q < threshold
    ]
    # ... while the members merged into a class are flagged next to it (a group's second
    # member joins its first directly or through a third: the smallest link is below 0.08).
    index = {c: i for i, c in enumerate(characters)}
    assert len(selection["groups"]) > 50
    for group in selection["groups"]:
        drawn = glyphs.canonical_renderings(group, coverage=selection["coverage"])
        pairs = np.array([(i, j) for i in range(len(group)) for j in range(i + 1, len(group))])
        quantile = np.nanquantile(_per_font(drawn, pairs), glyphs.MERGE_QUANTILE, axis=0)
        assert quantile.min() < glyphs.MERGE_DISTANCE, group
        assert group[0] in index and not any(member in index for member in group[1:])


def test_shapes_dtypes_and_label_layout(pretrain):
    classes = len(pretrain["characters"])
    (x, y), (x_held, y_held) = pretrain["train"], pretrain["held_out"]
    assert x.shape == (3 * classes, 32, 32, 1) and x_held.shape == (classes, 32, 32, 1)
    for images, labels in ((x, y), (x_held, y_held)):
        assert images.dtype == np.float32 and labels.dtype == np.int64
        assert 0.0 <= images.min() and images.max() <= 1.0 and images.std() > 0.1
    np.testing.assert_array_equal(y, np.repeat(np.arange(classes), 3))
    np.testing.assert_array_equal(y_held, np.arange(classes))


def test_held_out_images_are_the_last_instances_of_each_class(pretrain, cache):
    whole = data.load_glyph_pretraining(images_per_class=4, held_out_per_class=0, cache_dir=cache)
    assert len(list(cache.glob("glyph_pretraining-*.npz"))) == 1  # one file for both splits
    assert len(whole["held_out"][0]) == 0
    x = whole["train"][0].reshape(len(whole["characters"]), 4, 32, 32, 1)
    np.testing.assert_array_equal(pretrain["train"][0], x[:, :3].reshape(-1, 32, 32, 1))
    np.testing.assert_array_equal(pretrain["held_out"][0], x[:, 3])


def test_each_image_depends_on_seed_character_and_instance_only(pretrain, small):
    split, _ = small  # generated apart, with two images per class instead of four
    assert split["characters"] == pretrain["characters"]
    classes = len(split["characters"])
    four = pretrain["train"][0].reshape(classes, 3, 32, 32, 1)
    np.testing.assert_array_equal(split["train"][0].reshape(classes, 2, 32, 32, 1), four[:, :2])
    # Another seed, other images of the same classes.
    other, labels, characters = glyphs_pretrain.generate_glyph_pretraining(
        seed=1, images_per_class=1
    )
    assert characters == split["characters"]
    np.testing.assert_array_equal(labels, np.arange(classes))
    different = np.abs(other - four[:, 0]).reshape(classes, -1).max(axis=1) > 0.1
    assert different.all()


def test_the_cache_is_read_without_generating(pretrain, cache, monkeypatch):
    def generate(**kwargs):
        raise AssertionError("generated although the cache holds the set")

    monkeypatch.setattr(glyphs_pretrain, "generate_glyph_pretraining", generate)
    again = data.load_glyph_pretraining(images_per_class=4, held_out_per_class=1, cache_dir=cache)
    assert again["characters"] == pretrain["characters"]
    for part in ("train", "held_out"):
        for a, b in zip(again[part], pretrain[part], strict=True):
            np.testing.assert_array_equal(a, b)


def _crc_damaged(raw):
    """The zip archive with one byte of the first member's data flipped: its CRC fails."""
    header = raw.index(b"PK\x03\x04")
    name_length, extra_length = np.frombuffer(raw[header + 26 : header + 30], np.uint16)
    at = header + 30 + int(name_length) + int(extra_length) + 200
    return raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1 :]


def _foreign_arrays(path):
    """A valid .npz under the cache's name whose arrays are not the set's."""
    np.savez(
        path,
        images=np.zeros((2, 2, 2, 1), np.float32),
        labels=np.zeros(2, np.int64),
        characters=np.array(["a"]),
        key=np.array(path.stem.split("-")[1]),
    )


def _another_key(path):
    """This set's arrays, but stored under another key (a file copied from other settings)."""
    with np.load(path) as f:
        arrays = dict(f)
    np.savez(path, **{**arrays, "key": np.array("0" * 20)})


@pytest.mark.parametrize(
    "damage",
    [
        lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
        lambda path: path.write_bytes(_crc_damaged(path.read_bytes())),
        _foreign_arrays,
        _another_key,
    ],
    ids=["truncated", "crc", "foreign_arrays", "another_key"],
)
def test_a_damaged_or_foreign_cache_file_is_regenerated(small, tmp_path, damage):
    split, original = small
    path = tmp_path / original.name
    shutil.copyfile(original, path)
    damage(path)
    again = data.load_glyph_pretraining(
        images_per_class=2, held_out_per_class=0, cache_dir=tmp_path
    )
    np.testing.assert_array_equal(again["train"][0], split["train"][0])  # same arguments
    np.testing.assert_array_equal(again["train"][1], split["train"][1])
    assert again["characters"] == split["characters"]
    assert path.stat().st_size == original.stat().st_size  # replaced by the regenerated file
    with np.load(path) as f:
        np.testing.assert_array_equal(f["images"], split["train"][0].reshape(-1, 32, 32, 1))


def test_cache_key_covers_settings_and_font_files(tmp_path, monkeypatch):
    key = glyphs_pretrain.cache_key(seed=0, images_per_class=32, image_size=32)
    assert key != glyphs_pretrain.cache_key(seed=1, images_per_class=32, image_size=32)
    assert key != glyphs_pretrain.cache_key(seed=0, images_per_class=24, image_size=32)
    assert key != glyphs_pretrain.cache_key(seed=0, images_per_class=32, image_size=48)
    assert key != glyphs.cache_key(seed=0, images_per_class=32, image_size=32)
    fonts = tmp_path / "ttf"
    shutil.copytree(glyphs.font_directory(), fonts)
    monkeypatch.setattr(glyphs, "font_directory", lambda: str(fonts))
    assert glyphs_pretrain.cache_key(seed=0, images_per_class=32, image_size=32) == key
    with open(fonts / "DejaVuSans.ttf", "ab") as f:
        f.write(b"\0")  # one byte more in one font file
    assert glyphs_pretrain.cache_key(seed=0, images_per_class=32, image_size=32) != key


@pytest.fixture
def no_generation(monkeypatch):
    """Arguments must be refused before the (tens of seconds of) class selection."""

    def refuse(*args, **kwargs):
        raise AssertionError("started the selection before checking the arguments")

    monkeypatch.setattr(glyphs_pretrain, "pretraining_classes", refuse)
    monkeypatch.setattr(glyphs_pretrain, "generate_glyph_pretraining", refuse)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(seed=-1), r"`seed`. Expected an int >= 0. Received: seed=-1"),
        (dict(seed=1.5), r"`seed`"),
        (dict(images_per_class=1), r"`images_per_class`. Expected an int >= 2"),
        (dict(images_per_class="32"), r"`images_per_class`"),
        (dict(held_out_per_class=-1), r"`held_out_per_class`. Expected an int >= 0. Received"),
        (
            dict(images_per_class=4, held_out_per_class=4),
            r"`held_out_per_class`. Expected an int >= 0 and < images_per_class \(4\). "
            r"Received: held_out_per_class=4",
        ),
        (dict(held_out_per_class=True), r"`held_out_per_class`"),
        (dict(image_size=8), r"`image_size`. Expected an int >= 16. Received: image_size=8"),
        (dict(image_size="32"), r"`image_size`"),
        (dict(cache_dir=True), r"`cache_dir`. Expected a folder path, None or False"),
        (dict(cache_dir=3), r"`cache_dir`. Expected a folder path, None or False"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, message, no_generation):
    with pytest.raises(ValueError, match=message):
        data.load_glyph_pretraining(**{"cache_dir": False, **kwargs})


def test_a_cache_dir_that_is_a_file_is_refused_before_generating(tmp_path, no_generation):
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ValueError, match=r"`cache_dir`. Expected a folder .* is a file"):
        data.load_glyph_pretraining(images_per_class=2, held_out_per_class=1, cache_dir=a_file)


def test_block_name_refuses_a_character_outside_the_blocks():
    assert glyphs_pretrain.block_name("∀") == "Mathematical Operators"
    with pytest.raises(ValueError, match=r"`character`. Expected a character of BLOCKS"):
        glyphs_pretrain.block_name("A")
