"""CrossBatchMemory on every Keras backend (TensorFlow, JAX, PyTorch) against independent float64
NumPy references of the wrapped losses over the batch's anchors against (batch ∪ memory): direct
calls over several steps through a wrapping ring, the memory in `fit` steps (eagerly, and as each
backend compiles a model holding the memory: a graph on TensorFlow, a jitted train step on JAX),
`fit` under XLA against `fit` without it, gradients with the memory a constant, the ring's slots,
the XLA refusals (a loss without ``ref_mask``, a `jax.jit` outside a train step), the 2**40
label refusal on JAX without 64-bit types, and a `.keras` file read on another backend."""

import re

import keras
import numpy as np
import pytest

from tests import backends
from tests.backends import RTOL32, assert_close, to_numpy
from tests.reference_xbm import distances, random_batch, ref_batch_hard, ref_semihard
from tf_svmax import _backend, losses
from tf_svmax.losses import CrossBatchMemory

pytestmark = pytest.mark.all_backends


def ref_soft_hard(labels, x, b):
    d, n = distances(x), len(x)
    out = []
    for a in range(b):
        positives = [d[a, p] for p in range(n) if p != a and labels[p] == labels[a]]
        negatives = [d[a, k] for k in range(n) if labels[k] != labels[a]]
        out.append(np.log1p(np.exp((max(positives) if positives else 0.0) - min(negatives))))
    return float(np.mean(out))


CASES = {
    "semihard": (losses.TripletSemiHardLoss, ref_semihard),
    "batch_hard": (losses.BatchHardTripletLoss, ref_batch_hard),
}


class NumpyRing:
    """The reference memory: a ring of `size` slots written in order from slot 0 (float32 as
    stored), and the rows it holds, oldest first."""

    def __init__(self, size, dim):
        self.size, self.pointer, self.count = size, 0, 0
        self.x, self.y = np.zeros((size, dim), np.float32), np.zeros(size, np.int64)
        self.rows_x, self.rows_y = np.zeros((0, dim), np.float32), np.zeros(0, np.int64)

    def write(self, x, y):
        for row, label in zip(
            np.asarray(x, np.float32)[-self.size :], y[-self.size :], strict=True
        ):
            self.x[self.pointer], self.y[self.pointer] = row, label
            self.pointer = (self.pointer + 1) % self.size
        self.count = min(self.size, self.count + len(x))
        self.rows_x = np.concatenate([self.rows_x, np.asarray(x, np.float32)])[-self.size :]
        self.rows_y = np.concatenate([self.rows_y, y])[-self.size :]

    def reference(self, x, y):
        """``(labels, embeddings)`` of batch ∪ memory (the memory in slot order, as stored)."""
        return (
            np.concatenate([y, self.y[: self.count]]),
            np.concatenate([x, self.x[: self.count]]).astype(np.float64),
        )


def _state(memory):
    return {v.name: to_numpy(v) for v in memory.weights}


@pytest.mark.parametrize("case", sorted(CASES))
def test_direct_calls_match_the_reference_and_the_ring_wraps_at_the_right_slots(rng, case):
    make, reference = CASES[case]
    xbm = CrossBatchMemory(make(), memory_size=10, start_step=1)
    ring = NumpyRing(10, 4)
    for step in range(6):  # 1 warm-up step, then 5 x 6 rows through a 10-row ring (wraps)
        x, y = random_batch(rng)
        want = reference(*ring.reference(x, y), len(x))
        assert_close(to_numpy(xbm(y, x)), want, RTOL32)
        if step >= 1:
            ring.write(x, y)
        state = _state(xbm.memory)
        assert int(state["filled"]) == ring.count and int(state["step"]) == step + 1
        assert int(state["pointer"]) == ring.pointer
        # Slot by slot: a clamped slice write (JAX's slice_update) would shift the wrapped rows.
        np.testing.assert_array_equal(state["embeddings"], ring.x)
        np.testing.assert_array_equal(state["labels"], ring.y)


def test_gradient_is_the_reference_s_with_the_memory_a_constant(rng):
    xbm = CrossBatchMemory(losses.TripletHardLoss(soft=True), memory_size=6)
    first, first_y = random_batch(rng)
    xbm(first_y, first)  # fills the memory with `first`
    x, y = random_batch(rng)

    def value(rows):
        # A stateless scope: the backend's autodiff traces the call, whose memory write is
        # dropped (on JAX a write of traced rows outside a train step would leak the trace).
        with keras.StatelessScope():
            return xbm(y, rows)

    got, (grad,) = backends.value_and_grad(value, x)

    def reference(rows):
        return ref_soft_hard(np.concatenate([y, first_y]), np.concatenate([rows, first]), len(y))

    assert_close(got, reference(x), RTOL32)
    assert_close(grad, backends.numpy_gradient(reference, x), RTOL32)


def _model(xbm):
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(4), keras.layers.UnitNormalization(), xbm.memory]
    )


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_fit_steps_fill_the_memory_and_match_the_reference(rng, run_eagerly):
    # Learning rate 0: the embeddings of a batch are the model's prediction, so each step's
    # loss is the reference on (batch ∪ memory) and the memory holds the predicted rows.
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=10, start_step=1)
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.0), loss=xbm, run_eagerly=run_eagerly)
    # Keras' "auto": XLA on JAX (the memory compiles), none on PyTorch or a CPU-only TensorFlow.
    assert model.jit_compile == (backends.BACKEND == "jax" and not run_eagerly)
    x = rng.standard_normal((24, 5)).astype(np.float32)
    y = rng.integers(0, 3, 24).astype(np.int64)
    y[::8], y[1::8] = 0, 1
    ring = NumpyRing(10, 4)
    for step in range(3):
        xb, yb = x[8 * step : 8 * step + 8], y[8 * step : 8 * step + 8]
        embeddings = model.predict(xb, verbose=0)
        want = ref_semihard(*ring.reference(embeddings, yb), 8)
        got = model.train_on_batch(xb, yb)
        assert_close(got, want, RTOL32)
        if step >= 1:
            ring.write(embeddings, yb)
    state = _state(xbm.memory)
    assert int(state["step"]) == 3 and int(state["filled"]) == 10 and int(state["pointer"]) == 6
    np.testing.assert_allclose(state["embeddings"], ring.x, rtol=RTOL32, atol=1e-6)
    np.testing.assert_array_equal(state["labels"], ring.y)
    # Evaluation: the plain batch loss, the memory untouched.
    logged = model.evaluate(x[:8], y[:8], batch_size=8, verbose=0)
    assert_close(logged, ref_semihard(y[:8], model.predict(x[:8], verbose=0), 8), RTOL32)
    assert int(to_numpy(xbm.memory.step)) == 3


XLA_LOSSES = {
    "semihard": losses.TripletSemiHardLoss,
    "hard": losses.TripletHardLoss,
    "lifted": losses.LiftedStructLoss,
    "batch_hard": losses.BatchHardTripletLoss,
    "contrastive": losses.AllPairsContrastiveLoss,
}


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not compile PyTorch with XLA")
@pytest.mark.parametrize("name", sorted(XLA_LOSSES))
def test_fit_under_xla_matches_fit_without(rng, name):
    """TensorFlow's ``jit_compile=True`` and JAX's default (jitted) train step: the same loss at
    every step and the same memory as ``jit_compile=False``, training (SGD 0.1) through a ring
    that wraps: 7 steps of 8 rows, 6 of them written (start_step=1) into 14 slots, two writes
    split across the end."""
    x = rng.standard_normal((56, 5)).astype(np.float32)
    y = rng.integers(0, 3, 56).astype(np.int64)
    y[::8], y[1::8] = 0, 1
    runs = {}
    for xla in (False, True):
        xbm = CrossBatchMemory(XLA_LOSSES[name](), memory_size=14, start_step=1)
        model = _model(xbm)
        default = backends.BACKEND == "jax" and xla  # JAX compiles with XLA by default
        options = {} if default else {"jit_compile": xla}
        model.compile(keras.optimizers.SGD(0.1), loss=xbm, **options)
        assert model.jit_compile == xla
        steps = [
            float(to_numpy(model.train_on_batch(x[i : i + 8], y[i : i + 8])))
            for i in range(0, 56, 8)
        ]
        runs[xla] = np.array(steps), _state(xbm.memory), model.get_weights()
    (plain, plain_state, plain_weights), (xla, xla_state, xla_weights) = runs[False], runs[True]
    assert np.all(plain > 0.0)
    np.testing.assert_allclose(xla, plain, rtol=RTOL32)
    assert int(plain_state["filled"]) == 14 and int(plain_state["pointer"]) == 48 % 14
    assert int(plain_state["step"]) == 7
    for key in ("labels", "pointer", "filled", "step"):
        np.testing.assert_array_equal(xla_state[key], plain_state[key], err_msg=key)
    # Every slot holds a written (unit) row.
    np.testing.assert_allclose(np.linalg.norm(plain_state["embeddings"], axis=1), 1.0, rtol=1e-5)
    _assert_close_at_scale(xla_state["embeddings"], plain_state["embeddings"])
    for got, want in zip(xla_weights, plain_weights, strict=True):
        _assert_close_at_scale(got, want)


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not compile PyTorch with XLA")
def test_float_labels_under_xla(rng):
    """Under XLA (TensorFlow's ``jit_compile=True``, JAX's jitted step) float labels holding
    integers train as the integers (TensorFlow failed raw: `tf.strings.format` has no XLA
    kernel, issue 59 item 10), and a non-integral one, which nothing can refuse there, gives
    NaN."""
    x = rng.standard_normal((8, 5)).astype(np.float32)
    y = np.array([0, 1, 0, 1, 2, 2, 0, 1])
    values = {}
    for labels in (y, y.astype(np.float32), np.where(y == 2, 0.5, y).astype(np.float32)):
        xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=16)
        model = _model(xbm)
        model.compile(keras.optimizers.SGD(0.1), loss=xbm, jit_compile=True)
        values[str(labels.dtype) + str(labels[4])] = [
            float(to_numpy(model.train_on_batch(x, labels))) for _ in range(2)
        ]
    integers, floats, fractions = values.values()
    assert np.isfinite(integers).all()
    np.testing.assert_allclose(floats, integers, rtol=RTOL32)
    assert np.isnan(fractions).all()


def _assert_close_at_scale(got, want):
    """Within 1e-5 relative to the array's scale (its largest magnitude): after 7 SGD steps
    float32 rounding leaves ~1e-6 on every entry, also on the small ones (a 0.0757 entry of a
    unit row differed by 1.2e-6 on TensorFlow)."""
    want = np.asarray(want)
    scale = float(np.abs(want).max()) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=RTOL32, atol=RTOL32 * scale)


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not compile PyTorch with XLA")
def test_a_call_under_xla(rng):
    """TensorFlow: a ``tf.function(jit_compile=True)`` of a call is the eager call, and writes
    the memory. JAX: a `jax.jit` outside a train step is refused by name (the variables' writes
    would leak the trace; a Keras train step carries them out)."""
    x, y = random_batch(rng, b=8)
    make = losses.TripletSemiHardLoss
    eager, compiled = (CrossBatchMemory(make(), memory_size=10) for _ in range(2))
    compiled.memory.build(x.shape)  # (a traced call needs it built, as in a model)
    call = backends.compiled(lambda labels, rows: compiled(labels, rows))
    if backends.BACKEND == "jax":
        with pytest.raises(ValueError, match="CrossBatchMemory under jax.jit outside"):
            call(y, x)
        return
    for _ in range(3):  # the ring wraps at the third
        x, y = random_batch(rng, b=8)
        assert_close(to_numpy(call(y, x)), to_numpy(eager(y, x)), RTOL32)
    for variable, other in zip(compiled.memory.weights, eager.memory.weights, strict=True):
        np.testing.assert_array_equal(to_numpy(variable), to_numpy(other))
    assert int(to_numpy(compiled.memory.filled)) == 10


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not compile PyTorch with XLA")
def test_a_loss_without_ref_mask_declines_xla(rng):
    # A loss of one's own without ``accepts_ref_mask`` gets the filled rows sliced: the memory
    # layer's supports_jit=False makes Keras compile the model without XLA even when asked, so
    # fit keeps filling the memory; a call under the backend's XLA is refused by name.
    xbm = CrossBatchMemory(MeanPositiveDistance(), memory_size=10)
    assert not xbm.memory.supports_jit
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm, jit_compile=True)
    assert not model.jit_compile
    x, y = random_batch(rng, b=8, dim=5)
    model.train_on_batch(x, y)
    assert int(to_numpy(xbm.memory.filled)) == 8
    embeddings = model.predict(x, verbose=0)
    with pytest.raises(ValueError, match="cannot run under XLA.*MeanPositiveDistance.*ref_mask"):
        backends.compiled(lambda labels, rows: xbm(labels, rows))(y, embeddings)
    assert int(to_numpy(xbm.memory.filled)) == 8
    assert CrossBatchMemory(losses.TripletHardLoss(), memory_size=10).memory.supports_jit


@pytest.mark.skipif(not _backend.jax_without_x64(), reason="JAX without 64-bit types only")
def test_labels_outside_int32_are_refused_on_jax_without_x64(rng):
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=12)
    x, y = random_batch(rng)
    for labels in (y + 2**40, (y + 2**40).astype(np.float64)):
        with pytest.raises(ValueError, match="y_true"):
            xbm(labels, x)
    assert not xbm.memory.built  # refused before the memory was touched
    xbm(y, x)
    assert xbm.memory.labels.dtype == "int32"  # JAX has no int64 without x64
    # In an uncompiled fit too (its train step hands the loss the NumPy labels; a jitted one
    # gets them from Keras already converted to int32, wrapped: docs/guide/backends.md).
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm, jit_compile=False)
    inputs = rng.standard_normal((8, 5)).astype(np.float32)
    with pytest.raises(ValueError, match="y_true"):
        model.fit(inputs, np.arange(8) % 3 + 2**40, batch_size=8, verbose=0)
    # (Keras' JAX fit leaves the model's variables unsynced after an error in a step: the
    # memory is not read back here.)


def test_embeddings_of_another_width_than_the_memory_are_refused_by_name(rng):
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=12)
    x, y = random_batch(rng)
    xbm(y, x)
    wider = np.concatenate([x, x], axis=1)
    with pytest.raises(ValueError, match=rf"`y_pred`.*\[batch_size, {x.shape[1]}\] rows.*memory"):
        xbm(y, wider)


def test_embeddings_of_another_rank_are_refused_by_name(rng):
    """A rank-3 `y_pred` is refused naming it (it failed raw where it met the memory's rows,
    issue 59 item 10)."""
    x, labels = random_batch(rng, 8)
    with pytest.raises(ValueError, match=r"argument `y_pred`. Expected a rank-2 tensor"):
        CrossBatchMemory(losses.TripletSemiHardLoss(), 16)(labels, x[:, None, :])


def test_an_empty_batch_gives_the_wrapped_loss_value_and_leaves_the_memory(rng):
    """An empty batch gives the wrapped loss' empty-batch value, 0, with the memory empty (it
    was refused naming `ref_embeddings`, which the user never passed, issue 59 item 10) or
    not, and neither writes the memory nor counts a step."""
    x, labels = random_batch(rng, 8)
    inner = losses.TripletSemiHardLoss()
    xbm = CrossBatchMemory(inner, 16)
    assert float(to_numpy(inner(labels[:0], x[:0]))) == 0.0
    assert float(to_numpy(xbm(labels[:0], x[:0]))) == 0.0
    xbm(labels, x)
    assert float(to_numpy(xbm(labels[:0], x[:0]))) == 0.0
    assert int(to_numpy(xbm.memory.filled)) == 8 and int(to_numpy(xbm.memory.step)) == 1


def test_labels_above_2_to_the_31_stay_distinct_where_int64_exists(rng):
    if _backend.jax_without_x64():
        pytest.skip("JAX without 64-bit types refuses them (test above)")
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=12)
    ring = NumpyRing(12, 4)
    for _ in range(3):
        x, y = random_batch(rng)
        y = y + 2**40
        assert_close(to_numpy(xbm(y, x)), ref_semihard(*ring.reference(x, y), len(x)), RTOL32)
        ring.write(x, y)
    np.testing.assert_array_equal(to_numpy(xbm.memory.labels), ring.y)


LOAD = """
import json, sys
import keras, numpy as np
import tf_svmax
model = keras.models.load_model(sys.argv[1])
Bank = tf_svmax.losses.CrossBatchMemoryBank
bank = [layer for layer in model.layers if isinstance(layer, Bank)][0]
x = np.load(sys.argv[2])
print(json.dumps({
    "prediction": keras.ops.convert_to_numpy(model(x)).tolist(),
    "state": {v.name: keras.ops.convert_to_numpy(v).tolist() for v in bank.weights},
    "loss": type(model.loss).__name__,
}))
"""


def test_a_keras_file_with_the_memory_loads_on_another_backend(rng, tmp_path):
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=10)
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm)
    x = rng.standard_normal((12, 5)).astype(np.float32)
    model.fit(x, np.arange(12) % 3, batch_size=6, shuffle=False, verbose=0)
    model.save(tmp_path / "xbm.keras")
    np.save(tmp_path / "x.npy", x)
    other = backends.next_backend()
    got = backends.run_script(
        LOAD, tmp_path / "xbm.keras", tmp_path / "x.npy", backend=other, cwd=tmp_path
    )
    assert got["loss"] == "CrossBatchMemory"
    assert_close(got["prediction"], to_numpy(model(x)), RTOL32)
    for variable in xbm.memory.weights:
        np.testing.assert_array_equal(got["state"][variable.name], to_numpy(variable))


def _refusal(memory):
    # The refusal names the layer the model lacks and says how to add it.
    return rf"CrossBatchMemoryBank '{re.escape(memory.name)}', is not in the model.*xbm\.memory"


@pytest.mark.parametrize("jit_compile", ["auto", False])
def test_fit_without_the_memory_layer_in_the_model_is_refused_by_name(rng, jit_compile):
    """Every backend refuses it (before: JAX trained the plain loss, the memory never filling;
    PyTorch filled a memory that is never saved with the model)."""
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=10)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4)])
    model.compile(keras.optimizers.SGD(0.1), loss=xbm, jit_compile=jit_compile)
    x, y = random_batch(rng, b=8, dim=5)
    with pytest.raises(ValueError, match=_refusal(xbm.memory)):
        model.fit(x, y, batch_size=8, verbose=0)


def test_a_memory_built_by_a_direct_call_but_not_in_the_model(rng):
    """JAX refuses it in fit (its train step carries out only the model's variables: the
    memory would never fill); TensorFlow and PyTorch write it in place (not saved with the
    model, as `SpreadOutLoss`' draws there)."""
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=10)
    x, y = random_batch(rng, b=8, dim=4)
    xbm(y, x)  # builds and fills the memory
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    model.compile(keras.optimizers.SGD(0.1), loss=xbm)
    if backends.BACKEND == "jax":
        with pytest.raises(ValueError, match=_refusal(xbm.memory)):
            model.fit(x, y, batch_size=8, verbose=0)
        return
    model.fit(x, y, batch_size=8, verbose=0)
    assert int(to_numpy(xbm.memory.filled)) == 10 and int(to_numpy(xbm.memory.step)) == 2


@pytest.mark.parametrize("memory_name", [None, "renamed"])
def test_a_loaded_model_whose_loss_misses_its_memory_is_refused_by_name(rng, tmp_path, memory_name):
    """A loss config written before the memory's name was recorded (None), or naming a layer the
    loaded model lacks: the loss gets a new memory layer, outside the model (before: JAX and
    PyTorch trained on without the restored memory)."""
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=10)
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm)
    x, y = random_batch(rng, b=8, dim=5)
    model.fit(x, y, batch_size=8, verbose=0)
    model.save(tmp_path / "xbm.keras")
    loaded = keras.models.load_model(tmp_path / "xbm.keras")
    config = {k: v for k, v in xbm.get_config().items() if k != "memory_name"}
    if memory_name is not None:
        config["memory_name"] = memory_name
    again = CrossBatchMemory.from_config(config)
    loaded.compile(keras.optimizers.SGD(0.1), loss=again)
    with pytest.raises(ValueError, match=_refusal(again.memory)):
        loaded.fit(x, y, batch_size=8, verbose=0)


class MeanPositiveDistance(keras.losses.Loss):
    """A loss of one's own that accepts reference rows (the protocol `CrossBatchMemory` wraps):
    the squared distances of each anchor to its positives among the references, averaged over
    those pairs."""

    accepts_reference_rows = True

    def call(self, y_true, y_pred):
        parts = self.reference_parts(y_true, y_pred, ref_labels=y_true, ref_embeddings=y_pred)
        return parts[0].total / parts[0].count

    def reference_parts(self, y_true, y_pred, *, ref_labels, ref_embeddings, ref_offset=0):
        ops = keras.ops
        y_true, ref_labels = ops.reshape(y_true, [-1]), ops.reshape(ref_labels, [-1])
        d2 = ops.sum(ops.square(y_pred[:, None, :] - ref_embeddings[None, :, :]), axis=-1)
        # (No static reference count: a traced step slices the memory's filled rows.)
        columns = ops.arange(ops.shape(ref_labels)[0])
        itself = ops.equal((ops.arange(ops.shape(y_pred)[0]) + ref_offset)[:, None], columns)
        same = ops.cast(ops.equal(y_true[:, None], ref_labels[None, :]), d2.dtype)
        positives = same * (1.0 - ops.cast(itself, d2.dtype))
        return [losses.LossPart(ops.sum(d2 * positives), ops.sum(positives))]


def ref_mean_positive_distance(labels, x, b):
    d2 = distances(x) ** 2
    pairs = [d2[a, r] for a in range(b) for r in range(len(x)) if r != a and labels[r] == labels[a]]
    return float(np.mean(pairs))


def test_any_loss_that_accepts_reference_rows_is_wrapped(rng):
    """Not a list of classes: a loss of one's own with ``accepts_reference_rows`` and
    `reference_parts` gets the batch's anchors against batch ∪ memory, normalized over the
    batch's pairs, step after step through a wrapping ring."""
    xbm = CrossBatchMemory(MeanPositiveDistance(), memory_size=10)
    ring = NumpyRing(10, 4)
    for _ in range(4):
        x, y = random_batch(rng)
        want = ref_mean_positive_distance(*ring.reference(x, y), len(x))
        assert_close(to_numpy(xbm(y, x)), want, RTOL32)
        ring.write(x, y)
    assert ring.count == 10  # the memory was read full and wrapped


@pytest.mark.parametrize(
    "loss",
    [losses.SVMaxLoss(), losses.ProxyAnchorLoss(), losses.PKNpairLoss(), losses.ContrastiveLoss()],
    ids=lambda loss: type(loss).__name__,
)
def test_a_loss_without_reference_rows_is_refused_by_name(loss):
    # Proxy-Anchor and N-pair split over replicas by proxies and pairs (`reference_parts`),
    # which are not reference rows to mine.
    with pytest.raises(ValueError, match=r"argument `loss`.*accepts reference rows"):
        CrossBatchMemory(loss, memory_size=4)
