"""AllPairsContrastiveLoss against independent references: pytorch-metric-learning's
`ContrastiveLoss` (values and autograd gradients, cosine / dot / Euclidean), a float64 NumPy
loop for the anchor and normalizer rows, and pytorch-metric-learning's own `CrossBatchMemory`
fed the same batches (through the ring buffer's wrap-around); errors, dtypes, config and
`.keras` round trips.

pytorch-metric-learning is no test dependency (CI has no torch): its values, gradients and
inputs are stored in golden/pml_contrastive.npz by make_pml_golden.py, and every test here
runs everywhere."""

import json
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import backends
from tf_svmax import losses
from tf_svmax.losses import AllPairsContrastiveLoss, CrossBatchMemory, all_pairs_contrastive_loss

# --- float64 NumPy loop reference ---


def ref_all_pairs(
    labels,
    x,
    *,
    pos_margin=1.0,
    neg_margin=0.5,
    distance="cosine_similarity",
    anchors=None,
    normalizer=None,
):
    """Pair terms of the anchors `anchors` (rows, default all) against every other row, each
    kind summed and divided by its number of terms > 0 among the `normalizer` rows' pairs."""
    x = np.asarray(x, np.float64)
    n = len(x)
    anchors = range(n) if anchors is None else anchors
    normalizer = range(n) if normalizer is None else normalizer
    if distance == "cosine_similarity":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)

    def terms(a):
        out = []
        for r in range(n):
            if r == a:
                continue
            diff = x[a] - x[r]
            if distance in ("cosine_similarity", "dot"):
                s = float(x[a] @ x[r])
                pos, neg = pos_margin - s, s - neg_margin
            else:
                d = {
                    "L2": np.sqrt(diff @ diff),
                    "squared-L2": diff @ diff,
                    "cosine": 1.0 - x[a] @ x[r],  # the cosine distance of the rows as given
                }[distance]
                pos, neg = d - pos_margin, neg_margin - d
            positive = labels[a] == labels[r]
            out.append((positive, max(pos if positive else neg, 0.0)))
        return out

    value = 0.0
    for kind in (True, False):
        total = sum(t for a in anchors for k, t in terms(a) if k == kind)
        count = sum(t > 0 for a in normalizer for k, t in terms(a) if k == kind)
        value += total / count if count else 0.0
    return value


def _data(rng, n=12, dim=5, classes=3):
    x = rng.standard_normal((n, dim)).astype(np.float32)
    y = rng.integers(0, classes, n)
    y[:2] = [0, 1]
    return x, y


# Margins that leave some terms of each kind at 0 and some above it on Gaussian rows.
METRIC_MARGINS = {
    "cosine_similarity": {"pos_margin": 1.0, "neg_margin": 0.5},
    "dot": {"pos_margin": 1.0, "neg_margin": 0.0},
    "L2": {"pos_margin": 2.0, "neg_margin": 3.5},
    "squared-L2": {"pos_margin": 4.0, "neg_margin": 12.0},
    "cosine": {"pos_margin": 0.0, "neg_margin": 1.0},
}


@pytest.mark.parametrize("metric", sorted(METRIC_MARGINS))
def test_all_rows_and_reference_rows_match_the_numpy_loops(rng, metric):
    x, y = _data(rng)
    kw = {"distance": metric, **METRIC_MARGINS[metric]}
    got = float(all_pairs_contrastive_loss(y, x, **kw))
    assert got == pytest.approx(ref_all_pairs(y, x, **kw), rel=1e-5)
    # Anchors 3..7 against all rows (the references), normalized over those anchors' pairs.
    refs = dict(ref_labels=y, ref_embeddings=x, **kw)
    got = float(all_pairs_contrastive_loss(y[3:8], x[3:8], **refs, ref_offset=3))
    want = ref_all_pairs(y, x, anchors=range(3, 8), normalizer=range(3, 8), **kw)
    assert got == pytest.approx(want, rel=1e-5)
    got = float(all_pairs_contrastive_loss(y[:8], x[:8], **refs))
    assert got == pytest.approx(ref_all_pairs(y, x, anchors=range(8), normalizer=range(8), **kw))


def test_disjoint_anchor_ranges_add_up_to_the_loss_and_its_gradient(rng):
    # What each replica computes under tf.distribute: its anchors' reference parts against the
    # batch, the counts summed over the replicas.
    x, y = _data(rng, n=10)
    x = tf.constant(x, tf.float64)
    loss = AllPairsContrastiveLoss()
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        whole = all_pairs_contrastive_loss(y, x)
        split = backends.split_value(loss, y, x, ((0, 2), (2, 4), (6, 4)))
    assert float(whole) == pytest.approx(ref_all_pairs(y, x.numpy()), rel=1e-12)
    assert float(split) == pytest.approx(float(whole), rel=1e-12)
    np.testing.assert_allclose(tape.gradient(split, x), tape.gradient(whole, x), atol=1e-12)


def test_docstring_example():
    value = all_pairs_contrastive_loss([0, 0, 1], [[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    assert float(value) == pytest.approx(0.7, rel=1e-6)


def test_no_term_above_zero_gives_zero_and_a_zero_gradient():
    x = tf.constant([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = all_pairs_contrastive_loss([0, 0, 1], x)
    assert float(value) == 0.0
    np.testing.assert_array_equal(tape.gradient(value, x), np.zeros((3, 2)))
    # Duplicate rows under the Euclidean distance: distance 0, a finite (zero) gradient.
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = all_pairs_contrastive_loss([0, 0, 1], x, distance="L2", pos_margin=0.0)
    assert np.all(np.isfinite(tape.gradient(value, x)))


@pytest.mark.parametrize("metric", sorted(METRIC_MARGINS))
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf_function"])
def test_a_nan_row_gives_nan_even_when_no_finite_term_is_above_zero(metric, graph):
    # Every finite term is 0 (duplicates, orthogonal negatives past their margin), so the
    # NaN terms of row 3 were the only candidates for the non-zero counts, which NaN fails.
    x = np.array([[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [np.nan, 0, 0, 0]], np.float32)
    fn = tf.function(all_pairs_contrastive_loss) if graph else all_pairs_contrastive_loss
    assert np.isnan(float(fn([0, 0, 1, 1], x, distance=metric)))
    # Also when only the anchors' pairs with the NaN row are NaN (rows 0 and 1 normalized).
    labels = np.array([0, 0, 1, 1])
    value = fn(labels[:2], x[:2], distance=metric, ref_labels=labels, ref_embeddings=x)
    assert np.isnan(float(value))
    assert np.isnan(float(AllPairsContrastiveLoss(distance=metric)([0, 0, 1, 1], x)))


# --- pytorch-metric-learning, through its stored values ---
# CI has no torch, and a skipped test is no test: tests/losses/make_pml_golden.py computes
# PML's values and gradients (by hand, where torch and PML are installed; `--check` compares
# them with the file) into golden/pml_contrastive.npz with their inputs, and these tests
# compare ours with that file.

GOLDEN = Path(__file__).resolve().parent / "golden" / "pml_contrastive.npz"


@pytest.fixture(scope="module")
def pml():
    """The stored PML values: a dict of arrays, plus its settings under ``"meta"``."""
    with np.load(GOLDEN) as f:
        golden = {key: f[key] for key in f.files}
    golden["meta"] = json.loads(str(golden.pop("__meta__")))
    return golden


# Our arguments matching each PML setting, and whether our input is L2-normalized first.
PML_SETTINGS = {
    # PML's defaults: LpDistance normalizes, margins 0 and 1.
    "lp_default": ({"distance": "L2", "pos_margin": 0.0, "neg_margin": 1.0}, True),
    "lp_raw": ({"distance": "L2", **METRIC_MARGINS["L2"]}, False),
    "cosine": ({}, False),  # the XBM paper's setting, our defaults
    "dot": ({"distance": "dot", **METRIC_MARGINS["dot"]}, False),
}


def _our_kw(pml, setting):
    """Our arguments of a setting, checked against the PML loss the file was made with."""
    kw, normalize = PML_SETTINGS[setting]
    theirs = pml["meta"]["settings"][setting]
    loss = AllPairsContrastiveLoss(**kw)
    assert (loss.pos_margin, loss.neg_margin) == (theirs["pos_margin"], theirs["neg_margin"])
    distance, options = theirs["distance"]
    want = {"LpDistance": "L2", "CosineSimilarity": "cosine_similarity"}.get(distance, "dot")
    assert loss.distance == want
    assert options.get("normalize_embeddings", True) == (normalize or want == "cosine_similarity")
    return kw, normalize


def test_the_golden_file_covers_every_setting(pml):
    assert sorted(pml["meta"]["settings"]) == sorted(PML_SETTINGS)
    assert pml["meta"]["values"]["dtypes"] == ["float32", "float64"]
    assert GOLDEN.stat().st_size < 200_000


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("setting", ["lp_default", "lp_raw", "cosine", "dot"])
def test_values_and_gradients_match_pytorch_metric_learning(pml, setting, dtype):
    kw, normalize = _our_kw(pml, setting)
    x, y = pml["values/x"].astype(dtype), pml["values/y"]
    want = pml[f"values/{setting}/{dtype}/value"]
    want_grad = pml[f"values/{setting}/{dtype}/grad"]
    xv = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xv)
        got = all_pairs_contrastive_loss(
            y, tf.math.l2_normalize(xv, axis=1) if normalize else xv, **kw
        )
    assert got.dtype == dtype
    tol = 1e-5 if dtype == "float32" else 1e-12
    assert float(got) == pytest.approx(float(want), rel=tol, abs=tol)
    np.testing.assert_allclose(tape.gradient(got, xv), want_grad, atol=tol)
    assert float(got) > 0.1  # both kinds of terms present: the comparison means something


def test_a_single_positive_and_negative_pair_is_the_documented_difference(pml):
    # PML returns 0 when there is at most one positive and one negative (ordered) pair; here
    # they count. One anchor (row 0) against a positive and a negative reference.
    x, y = pml["single_pair/x"].astype(np.float32), pml["single_pair/y"]
    np.testing.assert_array_equal(x, np.float32([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6]]))
    np.testing.assert_array_equal(y, [0, 0, 1])
    assert float(pml["single_pair/pml_value"]) == 0.0
    ours = all_pairs_contrastive_loss(y[:1], x[:1], ref_labels=y, ref_embeddings=x)
    assert float(ours) == pytest.approx(0.4 + 0.3, rel=1e-6)


@pytest.mark.parametrize("setting", ["cosine", "lp_raw"])
def test_cross_batch_memory_matches_pytorch_metric_learning_s(pml, setting):
    """Ours with memory_size M reads batch ∪ the last M rows before it; PML enqueues the batch
    first and reads its memory, so its memory_size M + b holds the same rows (the batch's
    self-pairs removed by index). Values are equal at every step, wrap-arounds included
    (ours wraps at step 2, PML's at step 3). Gradients: ours is PML's ContrastiveLoss on
    batch ∪ memory with the batch's reference copy live; PML's XBM detaches it (the memory's
    copy), which its own ContrastiveLoss on that reference set reproduces."""
    kw, _ = _our_kw(pml, setting)
    meta = pml["meta"]["xbm"]
    b, size = meta["b"], meta["memory_size"]
    assert meta["pml_memory_size"] == size + b and setting in meta["settings"]
    keys = ("x", "y", "value", "xbm_grad", "live_value", "live_grad", "detached_grad")
    ref = {key: pml[f"xbm/{setting}/{key}"] for key in keys}
    steps = meta["steps"]
    assert ref["x"].shape == (steps, b, meta["dim"]) and steps * b > size + b  # PML wraps too
    ours = CrossBatchMemory(AllPairsContrastiveLoss(**kw), size)
    for step in range(steps):
        x, y = ref["x"][step].astype(np.float32), ref["y"][step]
        want, pml_xbm_grad = ref["value"][step], ref["xbm_grad"][step]
        xv = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xv)
            got = ours(y, xv)
        grad = tape.gradient(got, xv).numpy()
        assert float(got) == pytest.approx(float(want), rel=1e-5, abs=1e-6), step
        live = ref["live_value"][step]
        assert float(live) == pytest.approx(float(want), rel=1e-5, abs=1e-6), step
        np.testing.assert_allclose(grad, ref["live_grad"][step], atol=1e-5)
        np.testing.assert_allclose(pml_xbm_grad, ref["detached_grad"][step], atol=1e-6)
        assert np.abs(grad - pml_xbm_grad).max() > 1e-3  # the documented difference
        assert int(ours.memory.filled.numpy()) == min((step + 1) * b, size)
    assert int(ours.memory.pointer.numpy()) == (steps * b) % size  # it wrapped


def test_cross_batch_memory_matches_the_numpy_loop(rng):
    # Without pytorch-metric-learning: batch ∪ memory, the batch's rows the anchors and the
    # normalizer.
    b, size = 6, 10
    xbm = CrossBatchMemory(AllPairsContrastiveLoss(), size)
    memory_x, memory_y = np.zeros((0, 4), np.float32), np.zeros(0, np.int64)
    for step in range(4):
        x, y = _data(rng, n=b, dim=4)
        ref_x, ref_y = np.concatenate([x, memory_x]), np.concatenate([y, memory_y])
        want = ref_all_pairs(ref_y, ref_x, anchors=range(b), normalizer=range(b))
        assert float(xbm(y, x)) == pytest.approx(want, rel=1e-5), step
        memory_x = np.concatenate([memory_x, x])[-size:]
        memory_y = np.concatenate([memory_y, y])[-size:]


# --- errors, dtypes, configuration, saving ---


def test_bad_arguments_are_refused_in_the_library_s_format():
    x = np.eye(3, dtype=np.float32)
    names = r"\['L2', 'squared-L2', .*'cosine', 'cosine_similarity', 'dot'\]"
    with pytest.raises(ValueError, match=rf"argument `distance`. Expected one of {names}\. Rec"):
        all_pairs_contrastive_loss([0, 1, 1], x, distance="L1")
    with pytest.raises(ValueError, match=r"argument `distance`.*Received: distance='euclidian'"):
        AllPairsContrastiveLoss(distance="euclidian")
    for margin in (float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match=r"argument `pos_margin`"):
            AllPairsContrastiveLoss(pos_margin=margin)
        with pytest.raises(ValueError, match=r"argument `neg_margin`"):
            all_pairs_contrastive_loss([0, 1, 1], x, neg_margin=margin)
    with pytest.raises(ValueError, match=r"argument `y_true`.*one label per row"):
        all_pairs_contrastive_loss([0, 1], x)
    with pytest.raises(ValueError, match=r"argument `y_true`.*\[N\] or \[N, 1\]"):
        all_pairs_contrastive_loss(np.zeros((3, 2)), x)
    with pytest.raises(TypeError, match=r"argument `y_true`. Expected numbers"):
        all_pairs_contrastive_loss(["a", "b", "c"], x)
    with pytest.raises(ValueError, match=r"argument `y_pred`"):
        all_pairs_contrastive_loss([0, 1, 1], np.ones(3, np.float32))


@pytest.mark.parametrize("label_dtype", ["int8", "uint8", "int16", "uint16", "int32", "int64"])
def test_integer_label_dtypes_give_the_same_value(rng, label_dtype):
    x, y = _data(rng)
    want = float(all_pairs_contrastive_loss(y, x))
    assert float(all_pairs_contrastive_loss(y.astype(label_dtype), x)) == pytest.approx(want)


def test_int64_labels_above_2_to_the_24_stay_distinct(rng):
    x, _ = _data(rng, n=6)
    y = np.array([2**40, 2**40 + 1, 2**40, 2**40 + 1, 2**40 + 2, 2**40 + 3], np.int64)
    got = float(AllPairsContrastiveLoss()(tf.constant(y, tf.int64), x))
    assert got == pytest.approx(ref_all_pairs(y, x), rel=1e-5)
    assert got != pytest.approx(ref_all_pairs(np.zeros(6), x), rel=1e-3)  # float32 would merge


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_embedding_dtypes(rng, dtype):
    x, y = _data(rng)
    value = all_pairs_contrastive_loss(y, tf.cast(x, dtype))
    assert value.dtype == dtype
    tol = 1e-2 if dtype in ("float16", "bfloat16") else 1e-6
    assert float(value) == pytest.approx(ref_all_pairs(y, tf.cast(x, dtype).numpy()), rel=tol)


def test_get_config_round_trips_and_the_string_name_resolves():
    loss = AllPairsContrastiveLoss(pos_margin=0.0, neg_margin=1.0, distance="L2", name="c")
    config = loss.get_config()
    again = AllPairsContrastiveLoss.from_config(config)
    assert again.get_config() == config
    assert (again.pos_margin, again.neg_margin, again.distance) == (0.0, 1.0, "L2")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(restored, AllPairsContrastiveLoss) and restored.get_config() == config
    by_name = losses.get("tf_svmax>AllPairsContrastiveLoss")
    assert isinstance(by_name, AllPairsContrastiveLoss) and by_name.distance == "cosine_similarity"
    assert keras.losses.get("tf_svmax>AllPairsContrastiveLoss").neg_margin == 0.5
    wrapped = CrossBatchMemory(loss, 16, start_step=3)
    assert CrossBatchMemory.from_config(wrapped.get_config()).get_config() == wrapped.get_config()


def test_keras_file_round_trip_of_a_compiled_model(rng, tmp_path):
    x = rng.standard_normal((16, 5)).astype(np.float32)
    y = np.repeat(np.arange(4), 4)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4)])
    loss = AllPairsContrastiveLoss(pos_margin=0.2, neg_margin=0.3, distance="dot")
    model.compile(keras.optimizers.SGD(0.1), loss=loss)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    want = model.evaluate(x, y, batch_size=16, verbose=0)
    assert want == pytest.approx(
        ref_all_pairs(
            y, model.predict(x, verbose=0), pos_margin=0.2, neg_margin=0.3, distance="dot"
        ),
        rel=1e-5,
    )
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert isinstance(loaded.loss, AllPairsContrastiveLoss)
    assert loaded.loss.get_config() == loss.get_config()
    assert loaded.evaluate(x, y, batch_size=16, verbose=0) == pytest.approx(want, rel=1e-6)


# --- `metric=`, the former name of `distance=` ---

# The former names and the table's names of the same pair matrices.
FORMER = {"cosine": "cosine_similarity", "dot": "dot", "euclidean": "L2"}


def test_the_metric_keyword_is_refused_naming_distance_and_the_value_to_pass():
    x = np.eye(3, dtype=np.float32)
    for old, new in FORMER.items():
        message = rf"`metric` is now `distance` \(pass distance='{new}' for metric='{old}'\)"
        with pytest.raises(TypeError, match="all_pairs_contrastive_loss: the argument " + message):
            all_pairs_contrastive_loss([0, 1, 1], x, metric=old)
        with pytest.raises(TypeError, match="AllPairsContrastiveLoss: the argument " + message):
            AllPairsContrastiveLoss(metric=old)
    spellings = r"metric='cosine' -> distance='cosine_similarity', metric='dot' -> distance='dot'"
    with pytest.raises(TypeError, match=rf"the old values map as {spellings}, metric='euclidean'"):
        AllPairsContrastiveLoss(metric="angular")


@pytest.mark.parametrize("old", sorted(FORMER))
def test_a_config_saved_with_metric_loads_with_the_same_values(rng, old):
    # As get_config wrote it before `distance=`.
    margins = METRIC_MARGINS[FORMER[old]]
    saved = backends.saved_loss(
        "pair_contrastive",
        "AllPairsContrastiveLoss",
        "all_pairs_contrastive",
        **margins,
        metric=old,
    )
    loss = keras.saving.deserialize_keras_object(saved)
    assert isinstance(loss, AllPairsContrastiveLoss) and loss.distance == FORMER[old]
    x, y = _data(rng)
    want = ref_all_pairs(y, x, distance=FORMER[old], **METRIC_MARGINS[FORMER[old]])
    assert float(loss(y, x)) == pytest.approx(want, rel=1e-5)
    # Inside the memory's config too.
    memory = keras.saving.serialize_keras_object(CrossBatchMemory(AllPairsContrastiveLoss(), 16))
    memory["config"]["loss"] = saved
    restored = keras.saving.deserialize_keras_object(memory)
    assert restored.loss.get_config() == loss.get_config()


def test_a_keras_file_saved_with_metric_loads(rng, tmp_path):
    x = rng.standard_normal((16, 5)).astype(np.float32)
    y = np.repeat(np.arange(4), 4)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4)])
    loss = AllPairsContrastiveLoss(pos_margin=0.2, neg_margin=0.3, distance="L2")
    model.compile(keras.optimizers.SGD(0.1), loss=loss)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    model.save(tmp_path / "new.keras")
    # The same file as the code before `distance=` wrote it: the loss' "metric": "euclidean".
    with zipfile.ZipFile(tmp_path / "new.keras") as new:
        files = {name: new.read(name) for name in new.namelist()}
    config = files["config.json"].decode()
    assert config.count('"distance": "L2"') == 1
    files["config.json"] = config.replace('"distance": "L2"', '"metric": "euclidean"').encode()
    with zipfile.ZipFile(tmp_path / "old.keras", "w") as old:
        for name, data in files.items():
            old.writestr(name, data)
    loaded = keras.models.load_model(tmp_path / "old.keras")
    assert isinstance(loaded.loss, AllPairsContrastiveLoss) and loaded.loss.distance == "L2"
    want = ref_all_pairs(
        y, model.predict(x, verbose=0), pos_margin=0.2, neg_margin=0.3, distance="L2"
    )
    assert loaded.evaluate(x, y, batch_size=16, verbose=0) == pytest.approx(want, rel=1e-5)
