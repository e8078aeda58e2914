"""The contrastive pre-training trainer: the train step against a numpy transcription of Eq. 12
with MoCo's bookkeeping (EMA key encoder, FIFO queue), the prior's schedule, the evaluation's
pieces against independent references, records, exact resume and the command line."""

import json
import math
import subprocess
import sys
from pathlib import Path

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers import contrastive

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path, **kwargs):
    base = dict(
        output_dir=str(tmp_path / "run"),
        dataset="digits",
        batch_size=8,
        queue_size=16,
        embedding_dim=8,
        hidden_units=16,
        train_steps=4,
        eval_every=2,
        trace_every=1,
        test_views=4,
        verbose=0,
    )
    return contrastive.ContrastiveConfig(**{**base, **kwargs})


def test_paper_defaults():
    c = contrastive.resolve(contrastive.ContrastiveConfig(output_dir="x"))
    assert (c.method, c.prior, c.beta, c.temperature, c.key_momentum) == (
        "lorac",
        "laplace",
        2.0,
        0.2,
        0.99,
    )
    assert (c.views, c.embedding_dim, c.weight_decay, c.test_views) == (4, 128, 1e-4, 32)
    assert contrastive.prior_start_step(c) == c.train_steps // 2
    m = contrastive.resolve(contrastive.ContrastiveConfig(output_dir="x", method="moco_m"))
    assert math.isinf(m.beta) and m.views == 4
    assert contrastive.prior_start_step(m) == m.train_steps  # never
    moco = contrastive.resolve(contrastive.ContrastiveConfig(output_dir="x", method="moco"))
    assert moco.views == 2 and math.isinf(moco.beta)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(method="moco_m", beta=2.0), "--beta set the prior of --method=lorac"),
        (dict(method="moco", prior="gaussian"), "--prior set the prior"),
        (dict(method="moco", views=3), "M = 2 views"),
        (dict(views=1), r"`--views`. Expected an int >= 2. Received: --views=1"),
        (dict(queue_size=8, batch_size=16), "--queue_size"),
        (dict(prior_start=1.5), "--prior_start"),
        (dict(key_momentum=1.5), "--key_momentum"),
        (dict(train_steps=10, eval_every=3), "multiple of --eval_every"),
        (dict(temperature=0.0), "`--temperature`"),
        (dict(dataset="cifar"), "`--dataset`"),
    ],
)
def test_refused_configs(kwargs, message):
    with pytest.raises(contrastive.ConfigError, match=message):
        contrastive.resolve(contrastive.ContrastiveConfig(output_dir="x", **kwargs))


def _log_softmax_loss(q, k, negatives, log_prior, tau):
    """Eq. 12 in float64 numpy: q [N, V, C], k [N, C], negatives [K, C], log_prior [N]."""
    pos = np.einsum("nvc,nc->nv", q, k) / tau + log_prior[:, None]
    neg = np.einsum("nvc,kc->nvk", q, negatives) / tau
    logits = np.concatenate([pos[..., None], neg], axis=-1)
    top = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
    return float((lse - pos).mean())


@pytest.mark.parametrize("method, prior_start", [("lorac", 0.0), ("lorac", 1.0), ("moco_m", 0.0)])
def test_train_step_is_eq12_with_moco_bookkeeping(tmp_path, method, prior_start):
    config = contrastive.resolve(_config(tmp_path, method=method, prior_start=prior_start))
    model, _ = contrastive.build_model(config, (8, 8, 1))
    rng = np.random.default_rng(0)
    views = rng.uniform(size=(config.batch_size, config.views, 8, 8, 1)).astype(np.float32)
    # The inputs of the reference, before the step changes them.
    key_weights = [w.numpy() for w in model.key_encoder.key_encoder.weights]
    q = model.encoder(views[:, :-1].reshape(-1, 8, 8, 1), training=True).numpy()
    q = q.reshape(config.batch_size, config.views - 1, -1).astype(np.float64)
    # Keys with the key batch's own BN statistics, as MoCo's key encoder in training mode.
    k = model.key_encoder(views[:, -1], training=True).numpy().astype(np.float64)
    negatives = model.queue.keys.numpy().astype(np.float64)
    stacked = np.concatenate([q, k[:, None]], axis=1)
    norms = np.linalg.svd(stacked, compute_uv=False).sum(axis=1)
    with_prior = method == "lorac" and prior_start == 0.0
    log_prior = -norms / (config.views * 2.0 * 0.2) if with_prior else np.zeros(len(k))
    expected = _log_softmax_loss(q, k, negatives, log_prior, 0.2)

    logs = model.train_step(tf.constant(views))
    np.testing.assert_allclose(float(logs["loss"]), expected, rtol=1e-5)
    assert float(logs["prior_active"]) == float(with_prior)
    np.testing.assert_allclose(float(logs["nuclear_norm"]), norms.mean(), rtol=1e-5)
    # Key encoder: one EMA step towards the updated query encoder (the parameters; the BN
    # running statistics also move with the key batches themselves).
    m = config.key_momentum
    for old, key, query in zip(
        key_weights, model.key_encoder.key_encoder.weights, model.encoder.weights, strict=True
    ):
        if query.trainable:
            np.testing.assert_allclose(key.numpy(), m * old + (1 - m) * query.numpy(), atol=1e-6)
    # Queue: this batch's keys in the first N slots, the rest untouched.
    after = model.queue.keys.numpy()
    np.testing.assert_allclose(after[: config.batch_size], k, atol=1e-6)
    np.testing.assert_array_equal(after[config.batch_size :], negatives[config.batch_size :])
    assert int(model.queue.pointer.numpy()) == config.batch_size


def test_view_batches_are_seeded_by_step():
    images = np.random.default_rng(0).uniform(size=(20, 8, 8, 1)).astype(np.float32)
    a = list(contrastive.view_batches(images, batch_size=5, views=3, seed=1, start_step=0).take(3))
    b = list(contrastive.view_batches(images, batch_size=5, views=3, seed=1, start_step=2).take(1))
    assert a[0].shape == (5, 3, 8, 8, 1)
    np.testing.assert_array_equal(a[2].numpy(), b[0].numpy())
    assert not np.array_equal(a[0].numpy(), a[1].numpy())


def test_augmented_nuclear_norm_is_sqrt_views_for_a_constant_encoder():
    """All views mapped to one unit vector: rank 1, ||Q_hat||_* = ||1_v||_2 = sqrt(views)."""
    encoder = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(3, kernel_initializer="zeros", bias_initializer="ones"),
            keras.layers.UnitNormalization(),
        ]
    )
    images = np.random.default_rng(3).uniform(size=(6, 8, 8, 1)).astype(np.float32)
    norms = contrastive.augmented_nuclear_norms(encoder, images, views=5, batch_size=4)
    np.testing.assert_allclose(norms, np.sqrt(5.0), rtol=1e-6)


def test_run_records_and_reports_a_finished_run(tmp_path):
    config = _config(tmp_path)
    results = contrastive.train_contrastive(config)
    run = Path(config.output_dir)
    assert results["status"] == "completed"
    assert [e["step"] for e in results["evaluations"]] == [0, 2, 4]
    final = results["evaluations"][-1]
    low, high = final["test_nuclear_norm_bounds"]
    assert low - 1e-6 <= final["test_nuclear_norm"] <= high + 1e-6
    for key in ("linear_probe_accuracy", "knn_accuracy", "open_set_recall_at_1"):
        assert 0.0 <= final[key] <= 1.0
    record = json.loads((run / "results.json").read_text())
    assert record["prior_start_step"] == 2 and record["data"]["classes"] == 5
    assert [t["prior_active"] for t in record["trace"]] == [0.0, 0.0, 1.0, 1.0]
    assert (run / "encoder.keras").exists() and (run / "training.png").exists()
    encoder = keras.saving.load_model(run / "encoder.keras")
    assert encoder.output.shape[-1] == 8
    again = contrastive.train_contrastive(config)  # finished: reported, not retrained
    assert again["evaluations"] == results["evaluations"]


class _Interrupt(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == 3:
            raise KeyboardInterrupt


def test_resume_restores_key_encoder_and_queue(tmp_path):
    """Interrupted at step 3 (checkpoint 2), the resumed run ends where one without a stop does:
    batches are seeded by step; encoder, key encoder, queue and optimizer are checkpointed."""
    contrastive.train_contrastive(_config(tmp_path / "a", evaluate_untrained=False))
    config = _config(tmp_path / "b", evaluate_untrained=False)
    with pytest.raises(KeyboardInterrupt):
        contrastive.train_contrastive(config, callbacks=[_Interrupt()])
    resumed = contrastive.train_contrastive(config)
    assert resumed["resumed_at_steps"] == [2]
    a = json.loads((tmp_path / "a" / "run" / "results.json").read_text())["evaluations"][-1]
    b = resumed["evaluations"][-1]
    for key in ("test_nuclear_norm", "open_set_map_at_r"):
        assert b[key] == pytest.approx(a[key], rel=1e-5)
    ckpt_a = _weights_file(tmp_path / "a" / "run" / "checkpoints" / "ckpt-4.weights.h5")
    ckpt_b = _weights_file(tmp_path / "b" / "run" / "checkpoints" / "ckpt-4.weights.h5")
    assert ckpt_a.keys() == ckpt_b.keys()
    queue_names = [n for n in ckpt_a if "queue" in n]
    assert queue_names and any("key_encoder" in n for n in ckpt_a)
    for name in queue_names:
        np.testing.assert_allclose(ckpt_a[name], ckpt_b[name], atol=1e-5)


def _weights_file(path):
    """Every array of a Keras weights file, by its path in the file."""
    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, item: (
                arrays.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None
            )
        )
    return arrays


def test_cli_refuses_before_work(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.train_contrastive",
            f"--output_dir={out}",
            "--method=moco",
            "--views=4",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "M = 2 views" in proc.stderr and not out.exists()


def test_a_knn_k_as_large_as_the_training_set_is_refused_before_training(tmp_path):
    # k >= n made every k-NN vote the whole training set's (0.204 instead of 0.99 at k = 10).
    with pytest.raises(contrastive.ConfigError, match=r"--knn_k \(100000\) must be below the"):
        contrastive.train_contrastive(_config(tmp_path, knn_k=100000))
    assert not (tmp_path / "run").exists()
