"""`RetrievalEvaluation` on every Keras backend (marked all_backends: tests/conftest.py):
array, PyDataset, generator and (TensorFlow installed) tf.data input, its JSON-lines scalars,
and TensorBoard events on the TensorFlow backend."""

import glob
import json

import keras
import numpy as np
import pytest

from tests.backends import BACKEND, ArrayBatches
from tests.reference_retrieval import brute_recall
from tf_svmax.metrics import RetrievalEvaluation

pytestmark = pytest.mark.all_backends

tensorflow_backend_only = pytest.mark.skipif(
    BACKEND != "tensorflow", reason="TensorBoard events and tf.data: the TensorFlow backend"
)


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5,))
    outputs = keras.layers.UnitNormalization()(keras.layers.Dense(4)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def _data(rng):
    x_test = rng.standard_normal((40, 5)).astype(np.float32)
    y_test = np.repeat(np.arange(8), 5)
    x_train = rng.standard_normal((32, 5)).astype(np.float32)
    y_train = rng.standard_normal((32, 4)).astype(np.float32)
    return x_train, y_train, x_test, y_test


def _json_lines(log_dir):
    with open(f"{log_dir}/scalars.jsonl", encoding="utf-8") as file:
        return [json.loads(line) for line in file]


def _scalars(log_dir):
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    out = {}
    for path in glob.glob(f"{log_dir}/**/events.out.tfevents.*", recursive=True):
        for record in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                out.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor)))
                )
    return out


def test_every_epoch_logs_history_and_json_lines(rng, tmp_path):
    x_train, y_train, x_test, y_test = _data(rng)
    model = _model()
    callback = RetrievalEvaluation(
        x_test, y_test, log_dir=str(tmp_path), ks=(1, 2), compute_nmi=False
    )
    history = model.fit(x_train, y_train, batch_size=8, epochs=2, verbose=0, callbacks=[callback])
    recalls = history.history["test_recall_at_1"]
    assert len(recalls) == 2
    final = model.predict(x_test, verbose=0)
    assert recalls[-1] == pytest.approx(brute_recall(final, y_test, 1))
    assert [r["step"] for r in callback.history] == [4, 8]
    assert [r["epoch"] for r in callback.history] == [1, 2]
    lines = _json_lines(tmp_path)
    assert [(line["step"], line["epoch"]) for line in lines] == [(4, 1), (8, 2)]
    assert [line["test_recall_at_1"] for line in lines] == pytest.approx(recalls)
    assert "test_s_mu" in lines[-1] and "test_num_queries" not in lines[-1]


@tensorflow_backend_only
def test_tensorboard_events_on_the_tensorflow_backend(rng, tmp_path):
    x_train, y_train, x_test, y_test = _data(rng)
    callback = RetrievalEvaluation(
        x_test, y_test, log_dir=str(tmp_path), ks=(1, 2), compute_nmi=False
    )
    history = _model().fit(
        x_train, y_train, batch_size=8, epochs=2, verbose=0, callbacks=[callback]
    )
    scalars = _scalars(tmp_path)
    assert [s for s, _ in scalars["test_recall_at_1"]] == [4, 8]
    assert scalars["test_recall_at_2"][-1][1] == pytest.approx(
        history.history["test_recall_at_2"][-1]
    )
    assert "test_s_mu" in scalars and "test_num_queries" not in scalars


def _tf_dataset(x_test, y_test):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(16)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda x, y: ArrayBatches(x, y, 16), id="PyDataset"),
        pytest.param(
            lambda x, y: lambda: ((x[i : i + 16], y[i : i + 16]) for i in range(0, len(x), 16)),
            id="generator_function",
        ),
        pytest.param(_tf_dataset, id="tf.data", marks=tensorflow_backend_only),
    ],
)
def test_every_n_steps_and_batches_input(rng, make):
    x_train, y_train, x_test, y_test = _data(rng)
    model = _model()
    callback = RetrievalEvaluation(make(x_test, y_test), every_n_steps=3, compute_nmi=False)
    model.fit(x_train, y_train, batch_size=8, epochs=2, verbose=0, callbacks=[callback])
    assert [r["step"] for r in callback.history] == [3, 6]
    embeddings, labels = callback.embed()
    np.testing.assert_array_equal(labels, y_test)
    np.testing.assert_allclose(embeddings, model.predict(x_test, verbose=0), atol=1e-6)
    assert callback.history[-1]["recall_at_1"] == pytest.approx(brute_recall(embeddings, y_test, 1))


def test_a_spent_generator_names_the_function_to_pass(rng):
    _, _, x_test, y_test = _data(rng)
    callback = RetrievalEvaluation(iter([(x_test, y_test)]), compute_nmi=False)
    callback.set_model(_model())
    assert callback.evaluate(step=0)["num_embeddings"] == 40
    with pytest.raises(ValueError, match=r"`data`.*no batches.*generator is spent"):
        callback.evaluate(step=1)


@pytest.mark.skipif(BACKEND == "torch", reason="Keras on PyTorch runs one step per execution")
def test_every_n_steps_with_several_steps_per_execution(rng):
    # 16 steps in executions of 3: callbacks see steps 3, 6, 9, 12, 15, 16 and evaluate once
    # at each that passed a multiple of 2 (a modulo test would only fire at 6, 12 and 16).
    x_train, y_train, x_test, y_test = _data(rng)
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", steps_per_execution=3)
    callback = RetrievalEvaluation(x_test, y_test, every_n_steps=2, compute_nmi=False)
    model.fit(x_train, y_train, batch_size=2, epochs=1, verbose=0, callbacks=[callback])
    assert [r["step"] for r in callback.history] == [3, 6, 9, 12, 15, 16]


def test_dataset_with_sample_weights_and_without_labels(rng):
    _, _, x_test, y_test = _data(rng)
    model = _model()
    weighted = [(x_test[:16], y_test[:16], np.ones(16)), (x_test[16:], y_test[16:], np.ones(24))]
    callback = RetrievalEvaluation(weighted, compute_nmi=False)
    callback.set_model(model)
    embeddings, labels = callback.embed()
    np.testing.assert_array_equal(labels, y_test)
    assert embeddings.shape == (40, 4)
    unlabeled = RetrievalEvaluation([x_test[:16], x_test[16:]])
    unlabeled.set_model(model)
    with pytest.raises(ValueError, match=r"`data`.*\(inputs, labels\).*Received a batch of type"):
        unlabeled.embed()


def test_bad_arguments(rng):
    _, _, x_test, y_test = _data(rng)
    with pytest.raises(ValueError, match=r"`every_n_epochs` or `every_n_steps`"):
        RetrievalEvaluation(x_test, y_test, every_n_epochs=1, every_n_steps=2)
    with pytest.raises(ValueError, match=r"argument `labels`"):
        RetrievalEvaluation(x_test)
    with pytest.raises(ValueError, match=r"argument `labels`. Expected None"):
        RetrievalEvaluation(ArrayBatches(x_test, y_test, 16), y_test)
    with pytest.raises(ValueError, match=r"argument `every_n_steps`"):
        RetrievalEvaluation(x_test, y_test, every_n_steps=0)
