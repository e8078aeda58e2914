"""CrossBatchMemory (XBM) against float64 NumPy references of the wrapped losses on the batch's
anchors against (batch ∪ memory), over several steps: ring-buffer wrap-around, warm-up, reset,
evaluation, checkpoint resume, `.keras` files, int64 labels, refusals, gradients (finite
differences with the memory a constant) and MirroredStrategy (a 2-device subprocess)."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import programs
from tests.reference_xbm import (
    distances,
    random_batch,
    ref_batch_hard,
    ref_contrastive,
    ref_hard,
    ref_lifted,
    ref_semihard,
)
from tf_svmax import losses
from tf_svmax.losses import CrossBatchMemory, CrossBatchMemoryBank

CASES = {
    "all_pairs_contrastive": (lambda: losses.AllPairsContrastiveLoss(), ref_contrastive),
    "semihard": (lambda: losses.TripletSemiHardLoss(), ref_semihard),
    "hard": (lambda: losses.TripletHardLoss(), ref_hard),
    "lifted": (lambda: losses.LiftedStructLoss(), ref_lifted),
    "batch_hard": (lambda: losses.BatchHardTripletLoss(), ref_batch_hard),
}


class NumpyMemory:
    """The reference memory: the last `size` rows written, float32 as stored."""

    def __init__(self, size):
        self.size, self.x, self.y = size, np.zeros((0, 0), np.float32), np.zeros(0, np.int64)

    def write(self, x, y):
        x = np.asarray(x, np.float32)
        self.x = x if not len(self.x) else np.concatenate([self.x, x])[-self.size :]
        self.y = np.concatenate([self.y, y])[-self.size :]

    def reference(self, x, y):
        """``(labels, embeddings)`` of batch ∪ memory, the batch first."""
        if not len(self.y):
            return np.asarray(y), np.asarray(x, np.float64)
        return np.concatenate([y, self.y]), np.concatenate([x, self.x]).astype(np.float64)


@pytest.mark.parametrize("case", sorted(CASES))
def test_steps_match_the_reference_on_batch_and_memory(rng, case):
    make, reference = CASES[case]
    xbm = CrossBatchMemory(make(), memory_size=10, start_step=2)
    memory = NumpyMemory(10)
    for step in range(7):  # 2 warm-up steps, then 5 x 6 rows through a 10-row ring (wraps)
        x, y = random_batch(rng)
        want = reference(*memory.reference(x, y), len(x))
        got = float(xbm(y, x))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=f"step {step}")
        if step >= 2:
            memory.write(x, y)
        filled = int(xbm.memory.filled.numpy())
        assert filled == len(memory.y) == (0 if step < 2 else min(10, 6 * (step - 1)))
        assert int(xbm.memory.step.numpy()) == step + 1
    # The memory holds the last 10 rows written (in ring order: compare as sets of rows).
    stored = sorted(map(tuple, np.c_[xbm.memory.embeddings.numpy(), xbm.memory.labels.numpy()]))
    assert stored == sorted(map(tuple, np.c_[memory.x, memory.y.astype(np.float32)]))


def test_an_empty_memory_gives_the_wrapped_loss(rng):
    x, y = random_batch(rng, b=8)
    for make, _ in CASES.values():
        plain = float(make()(y, x))
        assert float(CrossBatchMemory(make(), memory_size=4)(y, x)) == pytest.approx(plain, 1e-6)


def test_reset_empties_the_memory_and_restarts_the_warm_up(rng):
    xbm = CrossBatchMemory(losses.TripletHardLoss(), memory_size=8, start_step=1)
    for _ in range(3):
        xbm(*random_batch(rng)[::-1])
    assert int(xbm.memory.filled.numpy()) == 8
    xbm.reset()
    for variable in xbm.memory.weights:
        assert not np.any(variable.numpy())
    x, y = random_batch(rng)
    assert float(xbm(y, x)) == pytest.approx(ref_hard(y, x, len(x)), 1e-5)
    assert int(xbm.memory.filled.numpy()) == 0  # step 0 again: warm-up, nothing written
    xbm(y, x)
    assert int(xbm.memory.filled.numpy()) == 6


def test_batch_larger_than_the_memory_keeps_its_last_rows(rng):
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=4)
    x, y = random_batch(rng, b=10)
    xbm(y, x)
    stored = sorted(map(tuple, xbm.memory.embeddings.numpy()))
    assert stored == sorted(map(tuple, x[-4:]))
    assert int(xbm.memory.pointer.numpy()) == 0  # 4 rows written into 4 slots


def test_int64_labels_above_2_to_the_24_stay_distinct(rng):
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=12)
    memory = NumpyMemory(12)
    for _ in range(3):
        x, y = random_batch(rng)
        y = y + 2**40  # float32 would merge them all into one class
        want = ref_semihard(*memory.reference(x, y), len(x))
        assert float(xbm(tf.constant(y, tf.int64), x)) == pytest.approx(want, 1e-5)
        memory.write(x, y)
    assert sorted(xbm.memory.labels.numpy().tolist()) == sorted(memory.y.tolist())


def test_gradient_is_the_reference_s_with_the_memory_a_constant(rng):
    xbm = CrossBatchMemory(losses.TripletHardLoss(soft=True), memory_size=6)
    first, first_y = random_batch(rng)
    xbm(first_y, first)  # fills the memory with `first` (float32)
    x, y = random_batch(rng)
    x64 = tf.constant(x, tf.float64)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x64)
        tape.watch(xbm.memory.embeddings.value)
        value = xbm(y, x64)
    grad = tape.gradient(value, x64).numpy()
    assert tape.gradient(value, xbm.memory.embeddings.value) is None

    def soft_hard(x_batch):
        ref_x = np.concatenate([x_batch, first.astype(np.float64)])
        ref_y = np.concatenate([y, first_y])
        d, n = distances(ref_x), len(ref_x)
        out = []
        for a in range(len(x_batch)):
            pos = [d[a, p] for p in range(n) if p != a and ref_y[p] == ref_y[a]]
            neg = [d[a, k] for k in range(n) if ref_y[k] != ref_y[a]]
            out.append(math.log1p(math.exp((max(pos) if pos else 0.0) - min(neg))))
        return np.mean(out)

    # Central differences, step 1e-6 in float64: truncation and rounding both ~1e-9.
    numeric = np.zeros_like(grad)
    x_ref = x.astype(np.float64)
    for index in np.ndindex(*x.shape):
        up, down = x_ref.copy(), x_ref.copy()
        up[index] += 1e-6
        down[index] -= 1e-6
        numeric[index] = (soft_hard(up) - soft_hard(down)) / 2e-6
    np.testing.assert_allclose(grad, numeric, atol=1e-6)


def _model(xbm, seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((5,)),
            keras.layers.Dense(4),
            keras.layers.UnitNormalization(),
            xbm.memory,
        ]
    )


def _data(rng, n=24):
    return rng.standard_normal((n, 5)).astype(np.float32), rng.integers(0, 4, n)


def test_fit_writes_the_memory_and_evaluate_does_not(rng):
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=16, start_step=1)
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm)
    x, y = _data(rng)
    assert not model.jit_compile  # Keras' "auto": no XLA on a CPU-only TensorFlow
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)  # 3 steps: 1 warm-up, 2 written
    assert int(xbm.memory.step.numpy()) == 3
    assert int(xbm.memory.filled.numpy()) == 16
    stored = xbm.memory.embeddings.numpy().copy()
    np.testing.assert_allclose(stored[:8], model.predict(x[8:16], verbose=0), atol=1e-1)
    embeddings = model.predict(x[:8], verbose=0)
    logged = model.evaluate(x[:8], y[:8], batch_size=8, verbose=0)
    # Evaluation: the plain batch loss, the memory untouched.
    assert logged == pytest.approx(ref_semihard(y[:8], embeddings, 8), 1e-5)
    np.testing.assert_array_equal(xbm.memory.embeddings.numpy(), stored)
    assert int(xbm.memory.step.numpy()) == 3


def _one_step(model, x, y):
    """The logged loss of one training step on (x, y) (the memory's state after it is read
    by the caller)."""
    return model.fit(x, y, batch_size=len(x), shuffle=False, verbose=0).history["loss"][0]


def test_checkpoint_resume_restores_the_memory(rng, tmp_path):
    x, y = _data(rng)
    xbm = CrossBatchMemory(losses.LiftedStructLoss(), memory_size=12)
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    state = [v.numpy().copy() for v in xbm.memory.weights]
    assert state[3] == 12  # filled: the next step's loss reads the memory
    want = _one_step(model, x[:8], y[:8])  # the run continued

    resumed = CrossBatchMemory(losses.LiftedStructLoss(), memory_size=12)
    model2 = _model(resumed, seed=1)
    model2.compile(keras.optimizers.SGD(0.1), loss=resumed)
    tf.train.Checkpoint(model=model2).restore(path).expect_partial()
    for restored, saved in zip(resumed.memory.weights, state, strict=True):
        np.testing.assert_array_equal(restored.numpy(), saved)
    # The resumed run's next step equals the continued run's (loss and memory).
    assert _one_step(model2, x[:8], y[:8]) == pytest.approx(want, 1e-6)
    for restored, continued in zip(resumed.memory.weights, xbm.memory.weights, strict=True):
        np.testing.assert_allclose(restored.numpy(), continued.numpy(), atol=1e-6)


def test_keras_file_round_trip(rng, tmp_path):
    x, y = _data(rng)
    xbm = CrossBatchMemory(losses.BatchHardTripletLoss(), memory_size=10, start_step=1)
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    bank = loaded.get_layer(xbm.memory.name)
    assert isinstance(bank, CrossBatchMemoryBank)
    for restored, saved in zip(bank.weights, xbm.memory.weights, strict=True):
        np.testing.assert_array_equal(restored.numpy(), saved.numpy())
    assert loaded.loss.get_config() == xbm.get_config()
    want = _one_step(model, x[:8], y[:8])
    # The documented wiring: recompile the loaded model with its restored memory layer.
    again = CrossBatchMemory(loaded.loss.loss, 10, start_step=1, memory=bank)
    loaded.compile(keras.optimizers.SGD(0.1), loss=again)
    assert _one_step(loaded, x[:8], y[:8]) == pytest.approx(want, 1e-6)
    for restored, continued in zip(bank.weights, xbm.memory.weights, strict=True):
        np.testing.assert_allclose(restored.numpy(), continued.numpy(), atol=1e-6)


def test_a_loaded_model_trains_on_with_its_restored_memory(rng, tmp_path):
    # Build, fit, save, load, fit again: no recompile, the memory continues.
    x, y = _data(rng)
    xbm = CrossBatchMemory(losses.AllPairsContrastiveLoss(), memory_size=12, start_step=1)
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm)
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)  # 1 warm-up step, 2 written
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    bank = loaded.get_layer(xbm.memory.name)
    assert loaded.loss.memory is bank
    filled = int(bank.filled.numpy())
    assert filled == 12 and int(bank.step.numpy()) == 3
    # The restored rows, oldest first (the ring's next slot holds the oldest row).
    oldest_first = np.roll(np.arange(12), -int(bank.pointer.numpy()))
    memory = NumpyMemory(12)
    memory.write(bank.embeddings.numpy()[oldest_first], bank.labels.numpy()[oldest_first])
    batch, labels = x[:8], y[:8]
    embeddings = loaded.predict(batch, verbose=0)  # the step's embeddings (weights before it)

    logged = _one_step(loaded, batch, labels)

    # The float64 reference of the batch against the restored memory, then the write.
    assert logged == pytest.approx(ref_contrastive(*memory.reference(embeddings, labels), 8), 1e-5)
    memory.write(embeddings, labels)
    assert int(bank.step.numpy()) == 4 and int(bank.filled.numpy()) == 12
    stored = np.c_[bank.embeddings.numpy(), bank.labels.numpy()]
    want = np.c_[memory.x, memory.y]
    np.testing.assert_allclose(
        stored[np.lexsort(stored.T[::-1])], want[np.lexsort(want.T[::-1])], atol=1e-5
    )
    # And it is the step of the model that was saved, continued in memory.
    assert _one_step(model, batch, labels) == pytest.approx(logged, 1e-6)


def test_a_loss_config_without_its_memory_name_says_how_to_recompile(rng, tmp_path):
    # A file written before the loss recorded its memory's name: the loss gets a new layer.
    x, y = _data(rng)
    xbm = CrossBatchMemory(losses.TripletHardLoss(), memory_size=8, start_step=2)
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm)
    model.fit(x, y, batch_size=8, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    config = {k: v for k, v in xbm.get_config().items() if k != "memory_name"}
    loaded.compile(keras.optimizers.SGD(0.1), loss=CrossBatchMemory.from_config(config))
    hint = r"CrossBatchMemory\(model\.loss\.loss, 8, start_step=2, memory=model\.get_layer"
    with pytest.raises(ValueError, match=hint):
        _one_step(loaded, x[:8], y[:8])


def test_get_config_round_trips():
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(margin=0.3), 32, start_step=5, name="x")
    config = xbm.get_config()
    again = CrossBatchMemory.from_config(config)
    assert again.get_config() == config
    assert again.loss.margin == 0.3 and again.start_step == 5 and again.memory_size == 32
    serialized = keras.saving.serialize_keras_object(xbm)
    assert keras.saving.deserialize_keras_object(serialized).get_config() == config


@pytest.mark.parametrize(
    "loss",
    [losses.ContrastiveLoss(), losses.PKNpairLoss(), losses.SVMaxLoss(), losses.NpairsLoss()],
)
def test_unsupported_losses_are_refused_by_name(loss):
    with pytest.raises(
        ValueError, match=rf"argument `loss`.*TripletSemiHardLoss.*{type(loss).__name__}"
    ):
        CrossBatchMemory(loss, 8)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="memory_size"):
        CrossBatchMemory(losses.TripletHardLoss(), 0)
    with pytest.raises(ValueError, match="start_step"):
        CrossBatchMemory(losses.TripletHardLoss(), 4, start_step=-1)
    with pytest.raises(ValueError, match="global_batch"):
        CrossBatchMemory(losses.TripletHardLoss(global_batch=False), 4)
    with pytest.raises(ValueError, match="memory"):
        CrossBatchMemory(losses.TripletHardLoss(), 4, memory=CrossBatchMemoryBank(5))
    xbm = CrossBatchMemory(losses.TripletHardLoss(), 4)
    with pytest.raises(TypeError, match="y_true"):
        xbm(np.array([True, False]), np.eye(2, dtype=np.float32))
    with pytest.raises(ValueError, match="sample_weight"):
        xbm([0, 1], np.eye(2, dtype=np.float32), sample_weight=[1.0, 1.0])
    xbm([0, 1], np.eye(2, dtype=np.float32))
    with pytest.raises(ValueError, match="y_pred"):
        xbm([0, 1], np.eye(3, dtype=np.float32)[:2])


def test_float_labels_that_are_not_integers_are_refused_eagerly_and_traced():
    # 16 classes 0.0, 0.1, ..., 1.5: cast to int64 they were stored as the classes {0, 1}.
    y = np.arange(16, dtype=np.float32) / 10
    x = np.eye(16, dtype=np.float32)
    xbm = CrossBatchMemory(losses.TripletHardLoss(), 32)
    pattern = (
        r"argument `y_true`.*floats holding integers.*y_true=<float32 tensor with 0\.1 at index 1>"
    )
    with pytest.raises(ValueError, match=pattern):
        xbm(y, x)
    assert not xbm.memory.built  # refused before the memory was touched
    xbm.memory.build((None, 16))  # (a traced step needs a built memory)
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
        tf.function(lambda labels, rows: xbm(labels, rows))(tf.constant(y), tf.constant(x))
    assert int(xbm.memory.filled.numpy()) == 0
    for value in (np.nan, np.inf):
        with pytest.raises(ValueError, match="y_true"):
            xbm(np.array([0.0, value], np.float32), x[:2])
    # Floats holding integers are class ids (Keras' float64 copies under MirroredStrategy).
    want = float(CrossBatchMemory(losses.TripletHardLoss(), 32)(np.arange(16) % 3, x))
    assert float(xbm(np.arange(16.0) % 3, x)) == pytest.approx(want, 1e-6)


def test_float_labels_that_are_not_integers_are_refused_by_fit():
    xbm = CrossBatchMemory(losses.TripletHardLoss(), 32)
    model = _model(xbm)
    model.compile(keras.optimizers.SGD(0.1), loss=xbm)
    y = np.arange(16, dtype=np.float32) / 10
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`y_true`.*0\.1 at index 1"):
        model.fit(np.ones((16, 5), np.float32), y, batch_size=16, shuffle=False, verbose=0)
    assert int(xbm.memory.filled.numpy()) == 0


def test_the_memory_must_be_in_the_model_of_a_traced_step():
    xbm = CrossBatchMemory(losses.TripletHardLoss(), 4)

    @tf.function
    def step(y, x):
        return xbm(y, x)

    with pytest.raises(ValueError, match=r"xbm\.memory"):
        step(tf.constant([0, 1]), tf.eye(2))


def test_docstring_example_runs():
    xbm = CrossBatchMemory(losses.TripletSemiHardLoss(), memory_size=64)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), xbm.memory])
    model.compile(optimizer="sgd", loss=xbm)
    model.fit(np.ones((8, 3)), np.arange(8) % 2, batch_size=4, verbose=0)
    assert int(xbm.memory.filled.numpy()) == 8


def test_two_replicas_equal_one_device():
    """Global batch of 8 over 2 logical CPUs: weights, memory rows (global batch, replica
    order) and both replicas' copies equal the one-device run (`tests/losses/xbm_probe.py`)."""
    out = programs.run_json_module("tests.losses.xbm_probe", timeout=300)
    for case, row in out.items():
        assert row["step"] > 1e-3, (case, row)  # the weights moved: equality means something
        assert row["weight_error"] < 1e-5, (case, row)
        assert row["memory_error"] < 1e-5, (case, row)
        assert row["labels_equal"] and row["replicas_identical"], (case, row)
        assert row["filled"] == row["expected_filled"], (case, row)
