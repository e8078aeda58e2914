"""The embedded glyph set: open-set split, determinism, cache, merged look-alikes, arguments."""

import os
import shutil
import sys

import numpy as np
import pytest

from tf_svmax import data
from tf_svmax.data import glyphs


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("glyph_cache")


@pytest.fixture(scope="module")
def split(cache):
    return data.load_glyphs_open_set(cache_dir=cache)


def test_open_set_split_of_many_classes(split):
    (x_train, y_train), (x_test, y_test) = split["train"], split["test"]
    train_classes, test_classes = np.unique(y_train), np.unique(y_test)
    assert len(train_classes) + len(test_classes) == len(split["characters"]) >= 200
    assert not set(train_classes) & set(test_classes)  # open set: disjoint classes
    # The first half of the class order trains, the second half tests.
    assert train_classes.max() < test_classes.min()
    assert abs(len(train_classes) - len(test_classes)) <= 1
    for x, y in ((x_train, y_train), (x_test, y_test)):
        assert x.shape[1:] == (32, 32, 1) and x.dtype == np.float32 and y.dtype == np.int64
        assert 0.0 <= x.min() and x.max() <= 1.0
        assert np.all(np.bincount(y)[np.unique(y)] == 32)
    assert len(set(split["characters"])) == len(split["characters"])


def test_images_vary_within_a_class(split):
    x, y = split["test"]
    for label in np.unique(y)[:10]:
        images = x[y == label].reshape(32, -1)
        d = np.linalg.norm(images[:, None] - images[None], axis=-1)
        off_diagonal = d[~np.eye(32, dtype=bool)]
        assert off_diagonal.min() > 1.0  # no two images alike (noise alone gives ~2)
        # The glyph itself moves: the ink's centre of mass varies by more than a pixel.
        pixels = x[y == label, ..., 0]
        low, high = pixels.min(axis=(1, 2), keepdims=True), pixels.max(axis=(1, 2), keepdims=True)
        ink = pixels > (low + high) / 2  # foreground, whatever the contrast
        rows = (ink.sum(2) * np.arange(32)).sum(1) / ink.sum((1, 2))
        columns = (ink.sum(1) * np.arange(32)).sum(1) / ink.sum((1, 2))
        assert rows.std() > 0.5 and columns.std() > 0.5


def test_same_arguments_give_identical_arrays_and_the_cache_returns_them(split, cache):
    # The cached default set (the fixture's) read back, then a second, smaller set: its own
    # cache file, another class order, and the same arrays when generated again without a cache.
    files = list(cache.glob("glyphs-*.npz"))
    assert len(files) == 1
    again = data.load_glyphs_open_set(cache_dir=cache)
    assert again["characters"] == split["characters"]
    np.testing.assert_array_equal(again["test"][0], split["test"][0])
    other = data.load_glyphs_open_set(seed=1, images_per_class=2, cache_dir=cache)
    assert other["characters"] != split["characters"]  # another seed, another class order
    assert len(list(cache.glob("glyphs-*.npz"))) == 2
    fresh = data.load_glyphs_open_set(seed=1, images_per_class=2, cache_dir=False)
    assert fresh["characters"] == other["characters"]
    for part in ("train", "test"):
        for a, b in zip(fresh[part], other[part], strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_damaged_cache_file_is_regenerated(tmp_path):
    first = data.load_glyphs_open_set(images_per_class=2, cache_dir=tmp_path)
    (path,) = tmp_path.glob("glyphs-*.npz")
    path.write_bytes(b"truncated")
    again = data.load_glyphs_open_set(images_per_class=2, cache_dir=tmp_path)
    np.testing.assert_array_equal(again["train"][0], first["train"][0])
    assert path.stat().st_size > 1000


def _crc_damaged(raw):
    """The zip archive with one byte of the first member's data flipped: its CRC fails."""
    header = raw.index(b"PK\x03\x04")
    name_length, extra_length = np.frombuffer(raw[header + 26 : header + 30], np.uint16)
    at = header + 30 + int(name_length) + int(extra_length) + 200
    return raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1 :]


def _foreign_arrays(path):
    """A valid .npz under the cache's name whose arrays are not the set's (a 2 x 2 image)."""
    np.savez(
        path,
        images=np.zeros((2, 2, 2, 1), np.float32),
        labels=np.zeros(2, np.int64),
        characters=np.array(["a"]),
    )


@pytest.mark.parametrize(
    "damage",
    [
        lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
        lambda path: path.write_bytes(_crc_damaged(path.read_bytes())),
        _foreign_arrays,
    ],
    ids=["truncated", "crc", "foreign_arrays"],
)
def test_a_damaged_or_foreign_cache_file_is_regenerated(tmp_path, damage):
    first = data.load_glyphs_open_set(images_per_class=2, cache_dir=tmp_path)
    (path,) = tmp_path.glob("glyphs-*.npz")
    size = path.stat().st_size
    damage(path)
    again = data.load_glyphs_open_set(images_per_class=2, cache_dir=tmp_path)
    for split in ("train", "test"):
        np.testing.assert_array_equal(again[split][0], first[split][0])
        np.testing.assert_array_equal(again[split][1], first[split][1])
    assert again["characters"] == first["characters"] and path.stat().st_size == size


@pytest.mark.parametrize("cache_dir", [True, 3, ["x"]])
def test_a_cache_dir_that_is_not_a_folder_name_is_refused(cache_dir):
    with pytest.raises(ValueError, match=r"`cache_dir`. Expected a folder path, None or False"):
        data.load_glyphs_open_set(images_per_class=2, cache_dir=cache_dir)


def test_a_cache_dir_that_is_a_file_is_refused_before_generating(tmp_path, monkeypatch):
    def generate(**kwargs):
        raise AssertionError("generated before the cache folder was checked")

    monkeypatch.setattr(glyphs, "generate_glyphs", generate)
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ValueError, match=r"`cache_dir`. Expected a folder .* is a file"):
        data.load_glyphs_open_set(images_per_class=2, cache_dir=a_file)


def test_cache_key_covers_settings_and_font_files(tmp_path, monkeypatch):
    key = glyphs.cache_key(seed=0, images_per_class=32, image_size=32)
    assert key != glyphs.cache_key(seed=1, images_per_class=32, image_size=32)
    assert key != glyphs.cache_key(seed=0, images_per_class=24, image_size=32)
    assert key != glyphs.cache_key(seed=0, images_per_class=32, image_size=48)
    fonts = tmp_path / "ttf"
    shutil.copytree(glyphs.font_directory(), fonts)
    monkeypatch.setattr(glyphs, "font_directory", lambda: str(fonts))
    assert glyphs.cache_key(seed=0, images_per_class=32, image_size=32) == key
    with open(fonts / "cmtt10.ttf", "ab") as f:
        f.write(b"\0")  # one byte more in one font file
    assert glyphs.cache_key(seed=0, images_per_class=32, image_size=32) != key


# Characters drawn alike in the same font (Unicode's confusables for Latin, Greek, Cyrillic and
# Armenian, plus the look-alikes the issue names). At most one of each set may be a class.
HOMOGLYPHS = (
    "AΑА",
    "BΒВ",
    "CС",
    "EΕЕ",
    "HΗН",
    "KΚК",
    "MΜМ",
    "OΟО0Օ",
    "PΡР",
    "TΤТ",
    "XΧХ",
    "aа",
    "cс",
    "eе",
    "oοо",
    "pр",
    "xх",
    "yу",
    "lI1Ιі",
    "ΓГ",
    "ΠП",
    "UՍ",
)


@pytest.mark.parametrize("look_alikes", HOMOGLYPHS)
def test_look_alikes_are_one_class(look_alikes, split):
    kept = [c for c in look_alikes if c in split["characters"]]
    assert len(kept) <= 1, kept


def test_kept_classes_are_never_drawn_identically_in_most_fonts(split):
    """Independent of the merge rule's quantile: no two kept characters render to (nearly)
    the same pixels in more than a quarter of the fonts that have both."""
    characters = split["characters"]
    rendered = glyphs.canonical_renderings(characters)  # [fonts, classes, pixels]
    identical = np.zeros((len(characters),) * 2)
    shared = np.zeros_like(identical)
    for per_font in rendered:
        has = ~np.isnan(per_font[:, 0])
        index = np.flatnonzero(has)
        for i in index:
            d = np.sqrt(np.mean((per_font[index] - per_font[i]) ** 2, axis=1))
            identical[i, index] += d < 0.02
            shared[i, index] += 1
    np.fill_diagonal(identical, 0)
    assert np.all(identical <= 0.25 * shared)


def test_font_distances_and_lower_quantile_match_numpy(rng):
    x = rng.uniform(size=(5, 7, 12)).astype(np.float32)
    x[1, 3] = np.nan  # font 1 lacks character 3
    x[:, 6] = np.nan  # no font has character 6
    d = glyphs.font_distances(x)
    for f in range(5):
        for i in range(7):
            for j in range(7):
                expected = np.sqrt(np.mean((x[f, i].astype(np.float64) - x[f, j]) ** 2))
                np.testing.assert_allclose(d[f, i, j], expected, atol=1e-7)
    for q in (0.0, 0.25, 0.5, 1.0):
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
            expected = np.nanquantile(d, q, axis=0)
        np.testing.assert_allclose(glyphs.lower_quantile(d, q), expected, atol=1e-12)


def test_every_class_has_enough_fonts():
    coverage = glyphs.font_coverage()
    for character in glyphs.confusable_groups()["classes"]:
        assert len(coverage[character]) >= glyphs.MIN_FONTS
        # Computer Modern's OT1 encoding is used for letters and digits only.
        if not character.isascii() or not character.isalnum():
            assert not any(name.startswith("cm") for name in coverage[character])


def test_confusable_groups_are_computed_once_and_handed_out_as_copies(tmp_path, monkeypatch):
    first = glyphs.confusable_groups()
    first["classes"].clear()
    first["groups"][0].append("?")
    first["distance"][:] = 0.0
    again = glyphs.confusable_groups()  # unchanged by what its caller did to the first answer
    assert len(again["classes"]) >= 200 and "?" not in again["groups"][0]
    assert np.nanmax(again["distance"]) > 0.0
    # Other font files are another key: the rule is computed from them, not reused.
    fonts = tmp_path / "ttf"
    shutil.copytree(glyphs.font_directory(), fonts)
    (fonts / "DejaVuSans.ttf").write_bytes((fonts / "DejaVuSerif.ttf").read_bytes())
    monkeypatch.setattr(glyphs, "font_directory", lambda: str(fonts))
    other = glyphs.confusable_groups()
    assert not np.array_equal(other["distance"], again["distance"], equal_nan=True)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(seed=-1), r"`seed`. Expected an int >= 0. Received: seed=-1"),
        (dict(seed=1.5), r"`seed`"),
        (dict(images_per_class=1), r"`images_per_class`. Expected an int >= 2"),
        (dict(image_size=8), r"`image_size`. Expected an int >= 16. Received: image_size=8"),
        (dict(image_size="32"), r"`image_size`"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        data.load_glyphs_open_set(cache_dir=False, **kwargs)


def test_default_cache_dir_is_the_users_cache():
    expected = os.path.join(os.path.expanduser("~"), ".cache", "tf_svmax")
    assert glyphs.default_cache_dir() == expected


@pytest.mark.parametrize(
    "load, what",
    [
        (data.load_glyphs_open_set, "The glyph set (load_glyphs_open_set)"),
        (data.load_glyph_pretraining, "The glyph pretraining set (load_glyph_pretraining)"),
    ],
)
def test_without_the_trainers_extra_the_glyph_sets_name_it_in_one_sentence(
    load, what, monkeypatch, tmp_path
):
    """Pillow and fontTools are the `trainers` extra's, not the core's (issue 59): a JAX-only
    install gets one sentence naming the extra, not an ImportError from inside the renderer."""
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL now raises ModuleNotFoundError
    monkeypatch.setitem(sys.modules, "fontTools", None)
    with pytest.raises(ModuleNotFoundError) as raised:
        load(cache_dir=tmp_path)
    assert str(raised.value) == (
        f"{what} needs pillow, fonttools, which the `trainers` extra installs: "
        'pip install ".[trainers]" (in the clone of the repository).'
    )
