"""The pretraining trainer (`trainers/pretraining/`): batches, top-k accuracy, the run and
its weights file loaded by train_retrieval, refusals, the command line."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from tests import machine
from tf_svmax import data, models
from trainers import pretraining, retrieval
from trainers.harness.run_dir import RunRefused

ROOT = Path(__file__).resolve().parents[2]
CLASSES, IMAGES, HELD = 12, 6, 2


def _fake_source(*, seed, images_per_class, held_out_per_class):
    """A small stand-in for `data.load_glyph_pretraining` (rendering over a thousand classes
    takes tens of seconds): each class a bright square at its own place, plus noise."""
    assert (images_per_class, held_out_per_class) == (IMAGES, HELD)
    rng = np.random.default_rng(seed)
    images = rng.uniform(0, 0.2, size=(CLASSES, IMAGES, 32, 32, 1)).astype("float32")
    for c in range(CLASSES):
        row, col = divmod(c, 4)
        images[c, :, 8 * row : 8 * row + 8, 8 * col : 8 * col + 8] += 0.8
    labels = np.repeat(np.arange(CLASSES), IMAGES).reshape(CLASSES, IMAGES)
    train, held = slice(0, IMAGES - HELD), slice(IMAGES - HELD, None)
    return {
        "train": (images[:, train].reshape(-1, 32, 32, 1), labels[:, train].reshape(-1)),
        "held_out": (images[:, held].reshape(-1, 32, 32, 1), labels[:, held].reshape(-1)),
        "characters": [chr(0x2200 + c) for c in range(CLASSES)],
    }


def _config(tmp_path, **kwargs):
    base = dict(
        output_dir=str(tmp_path / "pretrain"),
        images_per_class=IMAGES,
        held_out_per_class=HELD,
        batch_size=8,
        train_steps=8,
        eval_every=4,
        trace_every=2,
        verbose=0,
    )
    return pretraining.PretrainConfig(**{**base, **kwargs})


def test_batch_indices_are_seeded_permutations_per_epoch():
    indices = pretraining.batch_indices(10, 4, 7, seed=3)
    assert indices.shape == (7, 4)
    # Two full batches per epoch (the last 2 images of each permutation dropped).
    for epoch in range(4):
        expected = np.random.default_rng([3, epoch]).permutation(10)[:8].reshape(2, 4)
        np.testing.assert_array_equal(indices[2 * epoch : 2 * epoch + 2], expected[: 7 - 2 * epoch])
    for epoch_rows in (indices[0:2], indices[2:4]):
        assert len(np.unique(epoch_rows)) == 8  # no image twice within an epoch
    with pytest.raises(pretraining.ConfigError, match="--batch_size \\(11\\) exceeds the 10"):
        pretraining.batch_indices(10, 11, 3, seed=0)


def test_top_k_accuracies_against_a_sorting_reference():
    rng = np.random.default_rng(0)
    logits = rng.integers(0, 4, size=(200, 7)).astype("float32")  # many ties
    labels = rng.integers(0, 7, size=200)
    for k in (1, 3, 5):
        hits = 0
        for row, label in zip(logits, labels, strict=True):
            # Pessimistic rank: sort descending with the label placed after its equals.
            order = sorted(range(7), key=lambda j, r=row, y=label: (-r[j], j == y))
            hits += order.index(label) < k
        assert pretraining.top_k_accuracies(logits, labels, ks=(k,))[f"top{k}"] == hits / 200
    constant = np.zeros((5, 4))
    assert pretraining.top_k_accuracies(constant, np.arange(5) % 4) == {"top1": 0.0, "top5": 1.0}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(held_out_per_class=6, images_per_class=6), "must be below --images_per_class"),
        (dict(backbone="resnet50"), "`--backbone`"),
        (dict(train_steps=10, eval_every=4), "multiple of --eval_every"),
        (dict(learning_rate=0.0), "`--learning_rate`"),
    ],
)
def test_refused_configs(kwargs, message):
    with pytest.raises(pretraining.ConfigError, match=message):
        pretraining.resolve(pretraining.PretrainConfig(output_dir="x", **kwargs))


def test_pretraining_learns_and_its_weights_load_into_train_retrieval(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "load_glyph_pretraining", _fake_source, raising=False)
    config = _config(tmp_path, learning_rate=0.1, batch_size=48, train_steps=40, eval_every=20)
    results = pretraining.pretrain(config)
    assert results["status"] == "completed", results["message"]
    tops = [e["top1"] for e in results["evaluations"]]
    assert [e["step"] for e in results["evaluations"]] == [0, 20, 40]
    # The network fits the 12 classes (cross-entropy from ln 12 = 2.48 to near 0). The held-out
    # top-1 is not asserted here: its batch normalization evaluates with moving statistics that
    # 40 steps leave mostly at their initial values (momentum 0.99).
    trace = results["trace"]
    assert trace[0]["loss"] > 1.5 and trace[-1]["loss"] < 0.1, trace
    assert trace[-1]["batch_accuracy"] == 1.0
    assert results["classes"] == CLASSES and results["train_images"] == CLASSES * (IMAGES - HELD)
    assert results["plateau"] == pytest.approx(tops[-1] - tops[-2])
    folder = Path(config.output_dir)
    assert (folder / "pretraining.png").stat().st_size > 10_000
    on_disk = json.loads((folder / "results.json").read_text())
    assert on_disk["evaluations"] == results["evaluations"]

    # The file holds the classifier's backbone: its held-out logits come back from it.
    classifier = keras.saving.load_model(folder / "classifier.keras")
    weights_file = folder / pretraining.BACKBONE_FILE
    backbone = models.build_backbone("small_cnn_bn", input_shape=(32, 32, 1))
    backbone.load_weights(weights_file)
    held = _fake_source(seed=0, images_per_class=IMAGES, held_out_per_class=HELD)["held_out"][0]
    features = backbone.predict(held, verbose=0)
    dense = classifier.get_layer("logits")
    np.testing.assert_allclose(
        dense(features), classifier.predict(held, verbose=0), rtol=1e-4, atol=1e-4
    )

    # train_retrieval --weights=<file> (which hands the path to build_embedding_model)
    # starts from those backbone weights.
    retrieval_config = retrieval.RetrievalConfig(
        output_dir=str(tmp_path / "retrieval"),
        dataset="digits",
        backbone="small_cnn_bn",
        weights=str(weights_file),
        verbose=0,
    )
    resolved = retrieval.resolve(retrieval_config)  # accepted: a file for a small backbone
    embedding_model = models.build_embedding_model(
        resolved.backbone, input_shape=(8, 8, 1), weights=resolved.weights
    )
    start = [w for w in embedding_model.weights if not w.path.startswith("embedding")]
    for loaded, pretrained in zip(start, backbone.weights, strict=True):
        np.testing.assert_array_equal(loaded.numpy(), pretrained.numpy())


def test_a_finished_run_is_reported_unchanged_and_a_changed_config_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "load_glyph_pretraining", _fake_source, raising=False)
    first = pretraining.pretrain(_config(tmp_path))
    again = pretraining.pretrain(_config(tmp_path))
    assert again["wall_seconds"] == first["wall_seconds"]
    with pytest.raises(RunRefused, match="learning_rate"):
        pretraining.pretrain(_config(tmp_path, learning_rate=0.2))


def _cli(*flags):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "trainers.pretrain_glyphs", *flags]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_cli_refuses_bad_flags_before_any_work(tmp_path):
    never = tmp_path / "never"
    done = _cli("--held_out_per_class=40", f"--output_dir={never}")
    assert done.returncode == 2 and "must be below --images_per_class" in done.stderr
    assert not never.exists()
    done = _cli("--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for phrase in ("backbone.weights.h5", "--images_per_class", "small_resnet"):
        assert phrase in text, phrase


def test_cli_refuses_an_images_per_class_whose_images_cannot_fit_in_memory(tmp_path):
    """100,000 images per class of the over 1,000 pretraining classes, 32 x 32 float32, are at
    least 381 GiB: refused before rendering (exit 2, not numpy's "Unable to allocate" after
    it), saying what it needs and what the machine has."""
    images = 1000 * 100_000 * 32 * 32 * 4 / 2**30  # GiB, a lower bound of the rendered set
    if images < machine.memory_gib():
        pytest.skip("this machine could hold the set")
    with pytest.raises(pretraining.ConfigError, match="--images_per_class=100000") as caught:
        pretraining.resolve(pretraining.PretrainConfig(output_dir="x", images_per_class=100_000))
    needed, available = [
        float(v.replace(",", "")) for v in re.findall(r"([\d,.]+) GiB", str(caught.value))
    ]
    assert needed >= images - 0.1
    assert available == pytest.approx(machine.memory_gib(), rel=0.01)
    never = tmp_path / "never"
    done = _cli("--images_per_class=100000", f"--output_dir={never}")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--images_per_class=100000" in done.stderr and "GiB" in done.stderr
    assert "Traceback" not in done.stderr and not never.exists()
    # What fits is not refused.
    pretraining.resolve(pretraining.PretrainConfig(output_dir="x", images_per_class=40))
