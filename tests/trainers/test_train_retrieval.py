"""The retrieval trainer: flag resolution, schedule, smoke runs, resume, divergence, results."""

import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import machine
from tests import reference_ranking as rr
from tests import reference_spectral as ref
from tests.data import fake_trees
from tests.reference_retrieval import brute_recall
from tf_svmax import data, losses, models
from tf_svmax.training import ConstantThenPolynomialDecay
from trainers import retrieval
from trainers.harness.loop import RunFailed
from trainers.harness.run_dir import RunRefused

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path, **kwargs):
    defaults = dict(
        output_dir=str(tmp_path / "run"), dataset="digits", train_steps=6, eval_every=3, verbose=0
    )
    return retrieval.RetrievalConfig(**{**defaults, **kwargs})


def test_paper_defaults_per_loss():
    base = retrieval.RetrievalConfig(output_dir="x", dataset="cub200", data_dir="d")
    expected = {
        "contrastive": (36, 4, 1.0, 1.0),
        "triplet_hard": (24, 6, 0.1, 0.2),
        "npair": (72, 2, 1.0, None),
        "angular": (72, 2, 2.0, None),
    }
    for loss, (p, k, lam, margin) in expected.items():
        c = retrieval.resolve(dataclasses.replace(base, loss=loss), num_train_classes=100)
        assert (c.batch_p, c.batch_k, c.svmax_lambda, c.margin) == (p, k, lam, margin)
        assert c.batch_p * c.batch_k == 144 and c.train_steps == 5000
    digits = retrieval.RetrievalConfig(output_dir="x", dataset="digits")
    digits = retrieval.resolve(digits, num_train_classes=5)
    assert (digits.batch_p, digits.batch_k) == (4, 4)  # P capped to an even 4 of 5 classes
    # The default run: the embedded glyphs in the paper's regime, b = 144 > d = 128.
    glyphs = retrieval.resolve(retrieval.RetrievalConfig(output_dir="x"), num_train_classes=142)
    assert (glyphs.dataset, glyphs.loss, glyphs.regularizer) == ("glyphs", "contrastive", "svmax")
    assert (glyphs.batch_p, glyphs.batch_k, glyphs.embedding_dim) == (36, 4, 128)
    assert glyphs.svmax_lambda == 1.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(loss="npair", batch_k=4), r"--loss=npair .*--batch_k=2; received --batch_k=4"),
        (dict(loss="contrastive", batch_k=2), r"--batch_k=4"),
        (dict(loss="contrastive", batch_p=3), r"even --batch_p; received --batch_p=3"),
        # Positivity first, in the shared format, whatever the loss asks of P and K.
        (
            dict(loss="contrastive", batch_p=-3),
            r"`--batch_p`. Expected an int >= 2. Received: --batch_p=-3",
        ),
        (
            dict(loss="triplet_hard", batch_p=-4),
            r"`--batch_p`. Expected an int >= 2. Received: --batch_p=-4",
        ),
        (
            dict(loss="triplet_hard", batch_p=1),
            r"`--batch_p`. Expected an int >= 2. Received: --batch_p=1",
        ),
        (
            dict(loss="npair", batch_k=-2),
            r"`--batch_k`. Expected an int >= 2. Received: --batch_k=-2",
        ),
        (dict(batch_p=8), r"--batch_p=8 exceeds the 5 training classes"),
        (dict(train_steps=10, eval_every=3), r"--train_steps \(10\).*--eval_every \(3\)"),
        (dict(backbone="resnet50"), r"--backbone=resnet50 needs RGB"),
        (dict(dataset="cub200"), r"--dataset=cub200 needs --data_dir"),
        (dict(learning_rate=0.0), r"`--learning_rate`. Expected a finite float > 0"),
        (dict(learning_rate=float("inf")), r"`--learning_rate`. Expected a finite float > 0"),
        (dict(margin=float("nan")), r"`--margin`. Expected a finite float >= 0"),
        (dict(svmax_lambda=-1.0), r"`--svmax_lambda`"),
        (dict(recall_ks=(1, 0)), r"`--recall_ks`. Expected an int >= 1. Received: --recall_ks=0"),
        (dict(recall_ks=()), r"`--recall_ks`. Expected at least one value"),
        (dict(kmeans_max_iter=0), r"`--kmeans_max_iter`. Expected an int >= 1"),
        (dict(eval_batch_size=0), r"`--eval_batch_size`"),
        (dict(embedding_dim=0), r"`--embedding_dim`"),
        (dict(trace_every=0), r"`--trace_every`"),
        (dict(seed=-1), r"`--seed`. Expected an int >= 0"),
        (dict(verbose=3), r"`--verbose`. Expected one of \[0, 1, 2\]"),
        (dict(loss="cosface"), r"`--loss`. Expected one of \['contrastive'"),
        (dict(decoded_cache=True), r"--decoded_cache .*--dataset=glyphs is already in memory"),
        (dict(momentum=1.0), r"`--momentum`. Expected a float in \[0, 1\). Received: --momentum=1"),
        (dict(momentum=-0.1), r"`--momentum`. Expected a finite float >= 0"),
        (dict(lr_schedule="cosine"), r"`--lr_schedule`. Expected one of \['paper', 'constant'\]"),
        (
            dict(backbone="mnist_toy", weights="imagenet"),
            r"--weights=imagenet: --backbone=mnist_toy starts from random weights",
        ),
    ],
)
def test_refused_combinations(kwargs, message):
    config = retrieval.RetrievalConfig(output_dir="x", **kwargs)
    with pytest.raises(retrieval.ConfigError, match=message):
        retrieval.resolve(config, num_train_classes=5)


@pytest.mark.parametrize(
    "kwargs, classes, message",
    [
        (dict(batch_p=8), 5, r"--batch_p=8 exceeds the 5 training classes of --dataset=digits"),
        # The paper's P = 24 passes XML's halves; capped at 5 classes it no longer does.
        (
            dict(loss="triplet_hard", xml_lambda=0.01),
            5,
            r"--batch_p must be a multiple of 2 and >= 4; received 5",
        ),
        (dict(), 1, r"Expected an int >= 2 \(negatives need 2 of the 1 training classes\)"),
    ],
)
def test_only_p_against_the_training_classes_waits_for_the_data(kwargs, classes, message):
    """What a run refuses after reading its split's labels: --batch_p against the training
    classes. Everything else is refused before any data (`resolve_before_data`, which leaves P
    as the flag gives it), and P is settled once the classes are known."""
    config = retrieval.RetrievalConfig(output_dir="x", dataset="digits", **kwargs)
    before_data = retrieval.resolve_before_data(config)
    assert before_data.batch_p == config.batch_p  # unset stays unset: the classes decide it
    assert (before_data.train_steps, before_data.eval_every) == (2000, 500)  # the rest is resolved
    with pytest.raises(retrieval.ConfigError, match=message):
        retrieval.with_training_classes(before_data, num_train_classes=classes)
    with pytest.raises(retrieval.ConfigError, match=message):
        retrieval.resolve(config, num_train_classes=classes)  # the same two steps in a row


def test_the_config_check_resolved_is_taken_as_it_is(monkeypatch):
    """The command line resolves a config once (`check`, before TensorFlow loads) and the run
    takes that config as it is: `setup` does not resolve (and check) it a second time. A config
    changed after its resolve (a new instance) is resolved again."""
    from trainers.retrieval import train  # noqa: PLC0415 (the module whose name is patched)

    resolved = []
    monkeypatch.setattr(
        train,
        "resolve_before_data",
        lambda c: resolved.append(c) or retrieval.resolve_before_data(c),
    )
    checked = retrieval.check(retrieval.RetrievalConfig(output_dir="x", dataset="digits"))
    config, *_ = retrieval.setup(checked)
    assert resolved == [] and config == retrieval.with_training_classes(checked, 5)
    changed = dataclasses.replace(checked, seed=1)
    retrieval.setup(changed)
    assert resolved == [changed]


def test_digits_smoke_results_schema_and_outputs(tmp_path):
    results = retrieval.train_retrieval(_config(tmp_path))
    run = tmp_path / "run"
    on_disk = json.loads((run / "results.json").read_text())
    assert on_disk["status"] == results["status"] == "completed"
    assert {"config", "versions", "device", "evaluations", "trace", "wall_seconds"} <= set(on_disk)
    assert on_disk["config"]["loss"] == "contrastive" and on_disk["config"]["batch_p"] == 4
    assert [e["step"] for e in on_disk["evaluations"]] == [0, 3, 6]  # 0: untrained
    assert [t["step"] for t in on_disk["trace"]] == [1, 2, 3, 4, 5, 6]  # trace_every = 1
    for key in ("recall_at_1", "recall_at_8", "nmi", "map_at_r", "s_mu", "s_mu_upper"):
        assert key in on_disk["evaluations"][-1]
    assert "mean_singular_value" in on_disk["trace"][-1]
    assert {"tensorflow", "keras", "tf_svmax"} <= set(on_disk["versions"])
    for name in ("training.png", "recall.png", "embedding_model.keras"):
        assert (run / name).stat().st_size > 0
    assert list((run / "tensorboard").rglob("events.out.tfevents.*"))
    # The saved model loads where the repository's programs are not importable (only the
    # installed package).
    blocked = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['trainers'] = None\n"
            "import keras, tf_svmax\n"
            f"model = keras.models.load_model({str(run / 'embedding_model.keras')!r})\n"
            "print(model.optimizer.get_config()['learning_rate']['class_name'])",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert blocked.returncode == 0, blocked.stderr[-2000:]
    assert blocked.stdout.split()[0] == "ConstantThenPolynomialDecay"
    # The logged Recall@K is the brute-force recall of the saved model's test embeddings.
    model = keras.models.load_model(run / "embedding_model.keras")
    x_test, y_test = data.load_digits_open_set()["test"]
    embeddings = model.predict(x_test, verbose=0)
    for k in (1, 8):
        assert on_disk["evaluations"][-1][f"recall_at_{k}"] == pytest.approx(
            brute_recall(embeddings, y_test, k), abs=1e-9
        )


def test_default_run_is_the_glyph_set_in_the_papers_batch_regime(tmp_path):
    config = retrieval.RetrievalConfig(
        output_dir=str(tmp_path / "run"), train_steps=2, eval_every=2, verbose=0
    )
    results = retrieval.train_retrieval(config)
    assert results["status"] == "completed"
    assert results["config"]["dataset"] == "glyphs"
    assert (results["config"]["batch_p"], results["config"]["batch_k"]) == (36, 4)
    bounds = results["train_batch_bounds"]
    lower, upper = ref.original_bounds(144, 128)  # b = 144 > d = 128
    assert bounds["batch_size"] == 144
    assert (bounds["lower"], bounds["upper"]) == (pytest.approx(lower), pytest.approx(upper))
    x_test, y_test = data.load_glyphs_open_set()["test"]
    assert results["evaluations"][-1]["num_embeddings"] == len(x_test) == len(y_test)
    assert len(np.unique(y_test)) >= 100


def _fake_cub_config(tmp_path, **kwargs):
    """A run on a fake CUB tree (training ids 1, 2, 100; test ids 101, 150, 200; 16 px)."""
    root = fake_trees.make_cub(str(tmp_path / "cub"))
    defaults = dict(dataset="cub200", data_dir=root, input_size=16, batch_k=2)
    return _config(tmp_path, **{**defaults, **kwargs})


def test_fake_cub_tree_smoke(tmp_path):
    config = _fake_cub_config(tmp_path, loss="triplet_hard", batch_p=3, train_steps=2, eval_every=2)
    results = retrieval.train_retrieval(config)
    assert results["status"] == "completed"
    assert results["evaluations"][-1]["num_embeddings"] == 9  # classes 101, 150, 200 x 3


def test_an_inception_v3_run_loads_trains_and_records_299(tmp_path):
    """The image side is resolved once, before the data: the images the run's setup loads (the
    same `setup` `train_retrieval` calls), the model it builds and results.json all say 299."""
    config = _fake_cub_config(
        tmp_path,
        backbone="inception_v3",
        input_size=None,
        embedding_dim=8,
        loss="triplet_hard",
        batch_p=2,
        train_steps=1,
        eval_every=1,
        evaluate_untrained=False,
        recall_ks=(1,),
    )
    resolved, (train, _, input_shape, loaders), model, _ = retrieval.setup(config)
    assert resolved.input_size == 299 and input_shape == (299, 299, 3)
    assert tuple(model.input_shape) == (None, 299, 299, 3)
    for loader in loaders:  # training (crop and flip) and evaluation
        assert tuple(loader(tf.constant(train[0][0])).shape) == (299, 299, 3)
    results = retrieval.train_retrieval(config)
    assert results["status"] == "completed" and len(results["trace"]) == 1
    on_disk = json.loads((tmp_path / "run" / "results.json").read_text())
    recorded = on_disk["config"]
    assert (recorded["input_size"], recorded["backbone"]) == (299, "inception_v3")


def test_a_corrupt_image_fails_the_run_naming_the_file(tmp_path):
    config = _fake_cub_config(tmp_path, loss="triplet_hard", batch_p=3, train_steps=2, eval_every=2)
    images = sorted((Path(config.data_dir) / "images").rglob("*.jpg"))
    corrupt = images[len(images) // 2]
    corrupt.write_bytes(corrupt.read_bytes()[:40] + b"not a jpeg any more" * 10)
    with pytest.raises(RunFailed, match=f"Unreadable image file\\(s\\): {re.escape(str(corrupt))}"):
        retrieval.train_retrieval(config)
    record = json.loads((Path(config.output_dir) / "results.json").read_text())
    assert record["status"] == "failed" and str(corrupt) in record["message"]


def test_decoded_cache_trains_on_the_fake_cub_tree(tmp_path):
    config = _fake_cub_config(
        tmp_path, loss="triplet_hard", batch_p=3, train_steps=2, eval_every=2, decoded_cache=True
    )
    results = retrieval.train_retrieval(config)
    assert results["status"] == "completed" and results["config"]["decoded_cache"] is True
    assert results["evaluations"][-1]["num_embeddings"] == 9


def test_decoded_cache_names_a_corrupt_training_image(tmp_path):
    config = _fake_cub_config(
        tmp_path, loss="triplet_hard", batch_p=3, train_steps=2, eval_every=2, decoded_cache=True
    )
    train_paths = data.read_cub200(config.data_dir)["train"][0]
    corrupt = Path(train_paths[1])
    corrupt.write_bytes(corrupt.read_bytes()[:40] + b"not a jpeg any more" * 10)
    with pytest.raises(RunFailed, match=f"{re.escape(str(corrupt))}.*--decoded_cache"):
        retrieval.train_retrieval(config)


class _KeepModel(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.trained = self.model


def test_proxy_anchor_trace_is_each_steps_loss_and_s_mu(tmp_path):
    """trace_every=1 gives every step's loss: with a learning rate too small to move the
    weights, step i's loss is the NumPy Proxy-Anchor + SVMax value of batch i."""
    config = _config(
        tmp_path,
        loss="proxy_anchor",
        learning_rate=1e-9,
        train_steps=4,
        eval_every=2,
        trace_every=1,
        evaluate_untrained=False,
    )
    keep = _KeepModel()
    results = retrieval.train_retrieval(config, callbacks=[keep])
    resolved = retrieval.resolve(config, num_train_classes=5)
    assert (resolved.batch_p, resolved.batch_k, resolved.svmax_lambda) == (5, 4, 1e-4)
    assert resolved.margin == 0.1
    assert [e["step"] for e in results["evaluations"]] == [2, 4]
    train = data.load_digits_open_set()["train"]
    batches = data.pk_batches(*train, batch_p=5, batch_k=4, seed=config.seed).take(4)
    bounds = ref.small_batch_bounds(20, 128)
    for step, (x, y) in enumerate(batches, start=1):
        outputs = keep.trained(x, training=True)
        embeddings, similarities = outputs["embedding"].numpy(), outputs["proxies"].numpy()
        expected = rr.proxy_anchor(y.numpy(), similarities, 32.0, 0.1)
        expected += 1e-4 * ref.svmax_reference(embeddings, bounds)[0]
        entry = results["trace"][step - 1]
        assert entry["step"] == step and entry["steps"] == 1
        assert entry["loss"] == pytest.approx(expected, rel=1e-4)
        assert entry["embedding_mean_singular_value"] == pytest.approx(
            ref.singular_values(embeddings).mean(), rel=1e-4
        )
        # The rate the step used: 1e-9 for K/2 = 2 steps, then linear to 1e-7 at K = 4.
        rate = 1e-9 + (1e-7 - 1e-9) * max(step - 1 - 2, 0) / 2
        assert entry["learning_rate"] == pytest.approx(rate, rel=1e-5)
    # The saved model is the embedding model alone; its recall is what was logged.
    model = keras.models.load_model(tmp_path / "run" / "embedding_model.keras")
    assert model.output_shape == (None, 128)
    x_test, y_test = data.load_digits_open_set()["test"]
    embeddings = model.predict(x_test, verbose=0)
    assert results["evaluations"][-1]["recall_at_1"] == pytest.approx(
        brute_recall(embeddings, y_test, 1), abs=1e-9
    )


def _interrupt_then_resume(config, at_step):
    """Runs `config`, interrupted after step `at_step`, then again; (results, trained model)."""
    with pytest.raises(KeyboardInterrupt):
        retrieval.train_retrieval(config, callbacks=[_Interrupt(at_step)])
    keras.backend.clear_session()
    keep = _KeepModel()
    return retrieval.train_retrieval(config, callbacks=[keep]), keep.trained


def test_a_deleted_latest_checkpoint_resumes_from_the_one_before(tmp_path, capfd):
    config = _config(tmp_path, train_steps=6, eval_every=2)
    with pytest.raises(KeyboardInterrupt):
        retrieval.train_retrieval(config, callbacks=[_Interrupt(5)])  # checkpoints 2 and 4
    checkpoints = tmp_path / "run" / "checkpoints"
    for path in checkpoints.glob("ckpt-4.weights.h5"):  # its step record still lists it
        path.unlink()
    keras.backend.clear_session()
    keep = _KeepModel()
    results = retrieval.train_retrieval(config, callbacks=[keep])
    assert "skipped unreadable" in capfd.readouterr().err
    assert results["status"] == "completed" and results["resumed_at_steps"] == [2]
    assert [e["step"] for e in results["evaluations"]] == [0, 2, 4, 6]
    # Resumed from step 2, the weights are those of an uninterrupted run.
    keras.backend.clear_session()
    reference = _KeepModel()
    retrieval.train_retrieval(
        dataclasses.replace(config, output_dir=str(tmp_path / "ref")),
        callbacks=[reference],
    )
    for a, b in zip(keep.trained.weights, reference.trained.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    # With every checkpoint unreadable the run is refused, not restarted from scratch.
    for path in checkpoints.glob("ckpt-*.weights.h5"):
        path.unlink()
    (tmp_path / "run" / "results.json").unlink()
    keras.backend.clear_session()
    with pytest.raises(RunRefused, match="No checkpoint in this run folder can be read"):
        retrieval.train_retrieval(config)


def test_proxy_anchor_resume_restores_the_proxies(tmp_path):
    config = _config(tmp_path, loss="proxy_anchor", train_steps=4, eval_every=2)
    results, resumed = _interrupt_then_resume(config, 3)
    assert results["resumed_at_steps"] == [2]
    keras.backend.clear_session()
    reference = _KeepModel()
    retrieval.train_retrieval(
        dataclasses.replace(config, output_dir=str(tmp_path / "ref")),
        callbacks=[reference],
    )
    for a, b in zip(resumed.weights, reference.trained.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    proxies = resumed.get_layer("proxies").proxies
    assert proxies.shape == (5, 128) and np.all(np.isfinite(proxies.numpy()))


def test_proxy_anchor_remaps_class_ids_and_resumes(tmp_path):
    # CUB's training ids here are 1, 2 and 100; the proxies are indexed 0, 1, 2.
    config = _fake_cub_config(tmp_path, loss="proxy_anchor", train_steps=4, eval_every=2)
    results, trained = _interrupt_then_resume(config, 3)
    assert results["status"] == "completed" and results["resumed_at_steps"] == [2]
    assert [e["step"] for e in results["evaluations"]] == [0, 2, 4]
    assert trained.get_layer("proxies").proxies.shape == (3, 128)


class _Interrupt(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) == self.step:
            raise KeyboardInterrupt


def _weights(run_dir):
    model = keras.models.load_model(Path(run_dir) / "embedding_model.keras")
    return [w.numpy() for w in model.weights]


def test_resume_continues_where_it_stopped(tmp_path):
    config = _config(tmp_path, train_steps=8, eval_every=4)
    with pytest.raises(KeyboardInterrupt):
        retrieval.train_retrieval(config, callbacks=[_Interrupt(6)])
    partial = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [e["step"] for e in partial["evaluations"]] == [0, 4]
    assert partial["status"] == "running"
    keras.backend.clear_session()
    results = retrieval.train_retrieval(config)
    assert [e["step"] for e in results["evaluations"]] == [0, 4, 8]
    assert [t["step"] for t in results["trace"]] == list(range(1, 9))
    assert results["resumed_at_steps"] == [4]
    # Same batches and state as an uninterrupted run.
    keras.backend.clear_session()
    reference = retrieval.train_retrieval(
        dataclasses.replace(config, output_dir=str(tmp_path / "ref"))
    )
    assert reference["evaluations"][-1]["recall_at_1"] == pytest.approx(
        results["evaluations"][-1]["recall_at_1"]
    )
    for a, b in zip(_weights(tmp_path / "run"), _weights(tmp_path / "ref"), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_finished_run_is_reported_unchanged_and_old_records_resume(tmp_path):
    config = _config(tmp_path, train_steps=3, eval_every=3)
    first = retrieval.train_retrieval(config)
    path = tmp_path / "run" / "results.json"
    # A record written before trace_every / evaluate_untrained existed still matches.
    record = json.loads(path.read_text())
    del record["config"]["trace_every"], record["config"]["evaluate_untrained"]
    path.write_text(json.dumps(record))
    keras.backend.clear_session()
    again = retrieval.train_retrieval(config)
    assert again["wall_seconds"] == first["wall_seconds"]
    assert again.get("resumed_at_steps") == first.get("resumed_at_steps") == []
    assert json.loads(path.read_text()) == record  # not re-recorded


def test_a_moved_run_resumes_with_other_verbosity_and_eval_batch_size(tmp_path):
    config = _config(tmp_path, train_steps=4, eval_every=2)
    with pytest.raises(KeyboardInterrupt):
        retrieval.train_retrieval(config, callbacks=[_Interrupt(3)])
    (tmp_path / "run").rename(tmp_path / "moved")
    keras.backend.clear_session()
    moved = dataclasses.replace(
        config, output_dir=str(tmp_path / "moved"), verbose=2, eval_batch_size=7
    )
    results = retrieval.train_retrieval(moved)
    assert results["status"] == "completed" and results["resumed_at_steps"] == [2]
    assert results["config"]["eval_batch_size"] == 7


def test_other_config_in_the_same_output_dir_is_refused(tmp_path):
    retrieval.train_retrieval(_config(tmp_path, train_steps=3, eval_every=3))
    with pytest.raises(RunRefused, match=r"different configuration.*learning_rate"):
        retrieval.train_retrieval(_config(tmp_path, train_steps=3, eval_every=3, learning_rate=0.1))


class _Poison(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) == 4:
            kernel = self.model.get_layer("embedding").kernel
            kernel.assign(kernel * np.nan)


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    config = _config(tmp_path, train_steps=9, eval_every=3)
    results = retrieval.train_retrieval(config, callbacks=[_Poison()])
    assert results["status"] == "diverged"
    assert "Non-finite loss at step 5" in results["message"]
    assert "checkpoint (step 3)" in results["message"]
    assert [e["step"] for e in results["evaluations"]] == [0, 3]
    assert [t["step"] for t in results["trace"]] == [1, 2, 3, 4]  # step 5's loss was NaN
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["status"] == "diverged"
    assert not (tmp_path / "run" / "embedding_model.keras").exists()


def _cli(*flags, wait=True):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "trainers.train_retrieval", *flags]
    if not wait:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            # A shell's background job (nohup ... &) ignores SIGINT and children inherit that;
            # restore the default so Python installs its Ctrl-C handler, as in a terminal.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_cli_refuses_bad_flags_and_documents_defaults():
    done = _cli("--loss=npair", "--batch_k=4", "--output_dir=/tmp/never")
    assert done.returncode == 2 and "--batch_k=2" in done.stderr
    for flag, message in (
        ("--recall_ks=1,a", "--recall_ks expects a comma-separated list of int"),
        ("--learning_rate=inf", "`--learning_rate`. Expected a finite float"),
        ("--kmeans_max_iter=0", "`--kmeans_max_iter`"),
        ("--no_such_flag", "no_such_flag"),
        ("--learning_rate=abc", "learning_rate"),
    ):
        done = _cli("--dataset=digits", flag, "--output_dir=/tmp/never")
        assert done.returncode == 2 and message in done.stderr, (flag, done.stderr[-500:])
    assert not os.path.exists("/tmp/never")  # refused before any work
    helpfull = _cli("--helpfull")
    assert helpfull.returncode == 0  # absl's own exit status for help is 1 ("diverged" here)
    help_text = " ".join(helpfull.stdout.split())  # absl wraps long help lines
    for text in ("0.1 triplet", "72 N-pair", "5000 CUB", "--flagfile", "1e-4 Proxy-Anchor"):
        assert text in help_text


def _weights_file(folder, backbone, corrupt=None):
    """A `backbone` weights file (`build_backbone`'s, one grey channel as digits have) in
    `folder`; `corrupt`: "truncated" keeps its first half, "empty" none of it."""
    path = folder / f"{backbone}-{corrupt or 'whole'}.weights.h5"
    models.build_backbone(backbone, input_shape=(32, 32, 1)).save_weights(str(path))
    if corrupt:
        content = path.read_bytes()
        path.write_bytes(content[: len(content) // 2] if corrupt == "truncated" else b"")
    return path


@pytest.mark.parametrize(
    "backbone, source, corrupt",
    [
        ("small_cnn", "small_cnn_bn", None),  # another backbone's file
        ("small_resnet", "small_cnn", None),
        ("small_cnn", "small_cnn", "truncated"),
        ("small_cnn_bn", "small_cnn_bn", "empty"),
    ],
)
def test_cli_refuses_a_weights_file_it_cannot_load_naming_it(tmp_path, backbone, source, corrupt):
    path = _weights_file(tmp_path, source, corrupt)
    done = _cli(
        "--dataset=digits",
        f"--backbone={backbone}",
        f"--weights={path}",
        "--train_steps=2",
        f"--output_dir={tmp_path / 'run'}",
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"refused: --weights={path}" in done.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_cli_documents_and_checks_decoded_cache():
    help_text = " ".join(_cli("--helpfull").stdout.split())
    assert "--[no]decoded_cache: Decode and resize the training images once" in help_text
    for flags, message in (
        (("--decoded_cache=maybe",), "decoded_cache"),
        (("--dataset=digits", "--decoded_cache"), "--decoded_cache caches decoded image files"),
    ):
        done = _cli(*flags, "--output_dir=/tmp/never_decoded_cache")
        assert done.returncode == 2 and message in done.stderr, (flags, done.stderr[-500:])
    assert not os.path.exists("/tmp/never_decoded_cache")


def test_cli_resumes_after_sigkill(tmp_path):
    out = tmp_path / "cli"
    flags = [
        f"--output_dir={out}",
        "--dataset=digits",
        "--train_steps=60",
        "--eval_every=10",
        "--verbose=0",
    ]
    process = _cli(*flags, wait=False)
    deadline = time.time() + 300
    while not list((out / "checkpoints").glob("ckpt-*.json")) and time.time() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = json.loads((out / "results.json").read_text())
    assert killed_at["status"] == "running" and killed_at["evaluations"]
    done = _cli(*flags)
    assert done.returncode == 0, done.stderr[-2000:]
    final = json.loads((out / "results.json").read_text())
    assert [e["step"] for e in final["evaluations"]] == [0, 10, 20, 30, 40, 50, 60]
    assert final["status"] == "completed" and final["resumed_at_steps"]


def test_cli_ctrl_c_exits_130_and_the_same_command_resumes(tmp_path):
    out = tmp_path / "cli"
    flags = [f"--output_dir={out}", "--dataset=digits", "--train_steps=2000", "--eval_every=10"]
    process = _cli(*flags, "--verbose=0", wait=False)
    deadline = time.time() + 300
    while not list((out / "checkpoints").glob("ckpt-*.json")) and time.time() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    assert "Run the same command to resume from it." in stderr and "Traceback" not in stderr
    step = int(stderr.split("the checkpoint of step ")[1].split()[0])
    assert (out / "checkpoints" / f"ckpt-{step}.json").exists()


def test_cli_refuses_a_second_run_in_a_folder_in_use(tmp_path):
    out = tmp_path / "shared"
    flags = [f"--output_dir={out}", "--dataset=digits", "--train_steps=4000", "--verbose=0"]
    first = _cli(*flags, wait=False)
    try:
        deadline = time.time() + 300
        while not (out / "config.json").exists() and time.time() < deadline:
            time.sleep(0.2)
        second = _cli(*flags[:-2], "--learning_rate=0.1", "--verbose=0")
        assert second.returncode == 2 and "in use by a run in progress" in second.stderr
        assert json.loads((out / "config.json").read_text())["learning_rate"] == 0.01
    finally:
        first.kill()
        first.wait()


class _StoppedBeforeTraining(Exception):
    pass


class _StopBeforeTraining(keras.callbacks.Callback):
    """Ends a run as fit begins: after its step-0 evaluation is recorded, before any step."""

    def on_train_begin(self, logs=None):
        raise _StoppedBeforeTraining


def test_reproduce_table1_writes_the_table(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    table = tmp_path / "t.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.reproduce_table1",
            "--dataset=digits",
            "--losses=npair",
            "--learning_rates=0.01",
            "--train_steps=2",
            "--seeds=0,1",
            f"--output_dir={tmp_path}",
            f"--table={table}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = table.read_text()
    for row in ("| **npair** |", "| Vanilla |", "| Spread-out |", "| SVMax |", "Wall time"):
        assert row in text
    assert "reproduce_table1 --dataset=digits --losses=npair --learning_rates=0.01" in text
    assert "npair 5 × 2, λ 1" in text and "seeds 0, 1" in text
    # The untrained row is the mean ± sample std of standalone runs' step 0 (same seeds): each
    # run is stopped once its record holds step 0, before fit traces a training step (what
    # follows does not change step 0).
    starts = []
    for seed in (0, 1):
        keras.backend.clear_session()
        config = _config(
            tmp_path / f"alone{seed}", loss="npair", train_steps=2, eval_every=2, seed=seed
        )
        with pytest.raises(_StoppedBeforeTraining):
            retrieval.train_retrieval(config, callbacks=[_StopBeforeTraining()])
        alone = json.loads((Path(config.output_dir) / "results.json").read_text())
        assert alone["evaluations"][0]["step"] == 0
        starts.append(alone["evaluations"][0])
    r1 = [100 * e["recall_at_1"] for e in starts]
    expected = f"| Untrained network (step 0) | {np.mean([e['nmi'] for e in starts]):.3f} ± "
    assert expected in text
    assert f"| {np.mean(r1):.2f} ± {np.std(r1, ddof=1):.2f} |" in text
    grid_run = json.loads((tmp_path / "npair_none_lr0.01_seed1" / "results.json").read_text())
    assert [e["step"] for e in grid_run["evaluations"]] == [2]  # one evaluation, no step 0
    assert grid_run["config"]["seed"] == 1
    runs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and "alone" not in p.name)
    assert runs == sorted(
        f"npair_{m}_lr0.01_seed{s}" for m in ("none", "spread_out", "svmax") for s in (0, 1)
    )
    assert (tmp_path / "t.png").stat().st_size > 0 and (tmp_path / "t_s_mu.png").stat().st_size
    final = [
        100
        * json.loads((tmp_path / f"npair_svmax_lr0.01_seed{s}" / "results.json").read_text())[
            "evaluations"
        ][-1]["recall_at_1"]
        for s in (0, 1)
    ]
    assert f"{np.mean(final):.2f} ± {np.std(final, ddof=1):.2f}" in text


def test_reproduce_table1_from_a_pretrained_backbone_records_its_weights_and_curves(tmp_path):
    """The fine-tuning regime: --weights=<a backbone file>; the header names the file by its
    SHA-256 and the pretraining record beside it, the JSON holds every run's evaluations."""
    keras.utils.set_random_seed(5)
    pretrained = tmp_path / "pre" / "backbone.weights.h5"
    pretrained.parent.mkdir()
    models.build_backbone("small_cnn_bn", input_shape=(8, 8, 1)).save_weights(pretrained)
    record = {
        "config": {"batch_size": 256, "learning_rate": 0.05, "seed": 0},
        "classes": 1234,
        "evaluations": [
            {"step": 0, "top1": 0.001, "top5": 0.004},
            {"step": 90, "top1": 0.5, "top5": 0.75},
        ],
    }
    (pretrained.parent / "results.json").write_text(json.dumps(record))
    table = tmp_path / "t.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.reproduce_table1",
            "--dataset=digits",
            "--backbone=small_cnn_bn",
            f"--weights={pretrained}",
            "--losses=npair",
            "--methods=vanilla,svmax",
            "--learning_rates=0.01",
            "--train_steps=2",
            "--eval_every=1",
            "--seeds=0",
            f"--output_dir={tmp_path / 'runs'}",
            f"--table={table}",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = table.read_text()
    digest = hashlib.sha256(pretrained.read_bytes()).hexdigest()[:16]
    assert f"Backbone weights: `backbone.weights.h5` (SHA-256 {digest}…)" in text
    assert "on 1234 pretraining classes for 90 steps (batch 256, lr 0.05, seed 0)" in text
    assert "held-out top-1 50.00 %, top-5 75.00 %" in text
    grid = json.loads((tmp_path / "t.json").read_text())
    assert [(r["method"], r["seed"]) for r in grid["runs"]] == [("Vanilla", 0), ("SVMax", 0)]
    for entry, name in zip(grid["runs"], ("npair_none", "npair_svmax"), strict=True):
        run = json.loads((tmp_path / "runs" / f"{name}_lr0.01_seed0" / "results.json").read_text())
        assert run["config"]["weights"] == str(pretrained)
        assert [e["step"] for e in entry["evaluations"]] == [1, 2]
        assert [e["recall_at_1"] for e in entry["evaluations"]] == [
            e["recall_at_1"] for e in run["evaluations"]
        ]
    assert set(grid["untrained"]) == {"0"}
    assert (tmp_path / "t_recall.png").stat().st_size > 10_000


def test_reproduce_table1_refuses_bad_flags_before_training(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for flag, message in (
        ("--methods=vanilla,dropout", "dropout"),
        ("--seeds=a", "--seeds"),
        ("--losses=proxy_anchor", "proxy_anchor"),
        ("--train_steps=10", "--eval_every"),
    ):
        extra = ["--eval_every=3"] if flag == "--train_steps=10" else []
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "trainers.reproduce_table1",
                "--dataset=digits",
                flag,
                *extra,
                f"--output_dir={tmp_path}",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and message in done.stderr, (flag, done.stderr[-500:])
        assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(xml_prototypes=32), "--xml_prototypes needs --xml_lambda"),
        (dict(xml_lambda=1.5), r"`--xml_lambda`. Expected a float in \[0, 1\]"),
        (dict(xml_lambda=0.01, loss="proxy_anchor"), "proxy_anchor"),
        (dict(xml_lambda=0.01, backbone="resnet50", dataset="folder", data_dir="/d"), "small"),
        (dict(xml_lambda=0.01, batch_p=6), "multiple of 4"),
    ],
)
def test_xml_refusals(kwargs, message):
    with pytest.raises(retrieval.ConfigError, match=message):
        retrieval.resolve(retrieval.RetrievalConfig(output_dir="x", **kwargs))


def test_xml_training_model_appends_histograms_of_the_pooled_map(tmp_path):
    """The "xml" output is [embedding, histograms]: the histograms are the prototype
    assignment (Eq. 2.4, a numpy transcription) of the map the embedding model pools."""
    config = retrieval.resolve(
        retrieval.RetrievalConfig(output_dir="x", xml_lambda=0.01, xml_prototypes=5)
    )
    assert config.xml_prototypes == 5
    embedding_model = models.build_embedding_model("small_cnn", input_shape=(8, 8, 1))
    model = retrieval.build_training_model(config, embedding_model, 4)
    x = np.random.default_rng(0).uniform(size=(3, 8, 8, 1)).astype(np.float32)
    out = model(x)
    np.testing.assert_allclose(out["embedding"].numpy(), embedding_model(x).numpy(), atol=1e-6)
    np.testing.assert_allclose(out["xml"].numpy()[:, :-5], out["embedding"].numpy(), atol=1e-6)
    feature_map = keras.Model(embedding_model.input, models.pooled_feature_map(embedding_model))
    f = feature_map(x).numpy().reshape(3, -1, 128).astype(np.float64)
    v = model.get_layer("xml_prototypes").prototypes.numpy().astype(np.float64)
    scores = 10.0 * np.einsum("bnd,md->bnm", f, v)
    soft = np.exp(scores - scores.max(-1, keepdims=True))
    expected = (soft / soft.sum(-1, keepdims=True)).mean(1)
    np.testing.assert_allclose(out["xml"].numpy()[:, -5:], expected, rtol=1e-4, atol=1e-6)


def test_xml_run_trains_and_records(tmp_path):
    config = retrieval.RetrievalConfig(
        output_dir=str(tmp_path / "run"),
        dataset="digits",
        xml_lambda=0.01,
        batch_p=4,
        train_steps=2,
        eval_every=2,
        verbose=0,
    )
    results = retrieval.train_retrieval(config)
    assert results["status"] == "completed"
    trace = results["trace"][-1]
    assert {"xml_loss", "embedding_loss", "embedding_mean_singular_value"} <= set(trace)
    assert results["config"]["xml_prototypes"] == 64
    assert (tmp_path / "run" / "embedding_model.keras").exists()


def test_every_library_kmeans_seeding_is_a_choice():
    from tf_svmax.metrics import kmeans

    for init in kmeans.INITS:  # k-means++-sklearn was missing from the flag's choices
        assert retrieval.resolve(retrieval.RetrievalConfig(output_dir="x", kmeans_init=init))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(xbm_size=16), r"--xbm_size needs a loss .*received --loss=contrastive"),
        (dict(xbm_size=16, loss="npair"), r"received --loss=npair"),
        (dict(xbm_start_step=5), r"--xbm_start_step needs --xbm_size > 0"),
        (dict(xbm_size=16, loss="lifted", xml_lambda=0.01), r"--xbm_size and --xml_lambda"),
        (dict(xbm_size=-1, loss="lifted"), r"`--xbm_size`. Expected an int >= 0"),
    ],
)
def test_xbm_refusals(kwargs, message):
    with pytest.raises(retrieval.ConfigError, match=message):
        retrieval.resolve(retrieval.RetrievalConfig(output_dir="x", **kwargs))


def test_an_xbm_size_whose_memory_cannot_fit_is_refused_saying_what_it_needs():
    """--xbm_size=1e9 rows of 128 float32 are at least 477 GiB: refused with the flags (exit 2
    before any data), not a ResourceExhaustedError once training began."""
    memory_gib = machine.memory_gib()
    bank_gib = 10**9 * 128 * 4 / 2**30  # the memory's embeddings alone
    if bank_gib < memory_gib:
        pytest.skip("this machine could hold the memory")
    config = retrieval.RetrievalConfig(output_dir="x", loss="triplet_hard", xbm_size=10**9)
    with pytest.raises(retrieval.ConfigError, match="--xbm_size=1000000000") as caught:
        retrieval.check(config)
    needed, available = [
        float(v.replace(",", "")) for v in re.findall(r"([\d,.]+) GiB", str(caught.value))
    ]
    assert needed >= bank_gib
    assert available == pytest.approx(memory_gib, rel=0.01)
    retrieval.check(dataclasses.replace(config, xbm_size=4096))  # what fits is not refused


def test_xbm_run_resumes_with_its_memory(tmp_path):
    """--xbm_size: the memory layer is in the trained model and its checkpoint, so a run
    interrupted after step 6 (checkpoint at 4) ends where an uninterrupted one does (an empty
    memory after the resume would change steps 5 to 8)."""
    config = _config(
        tmp_path,
        loss="triplet_semihard",
        xbm_size=40,
        xbm_start_step=2,
        train_steps=8,
        eval_every=4,
    )
    results, trained = _interrupt_then_resume(config, at_step=6)
    assert results["status"] == "completed" and results["resumed_at_steps"] == [4]
    memory = trained.get_layer("xbm_memory")
    assert int(memory.step.numpy()) == 8 and int(memory.filled.numpy()) == 40
    keras.backend.clear_session()
    reference = retrieval.train_retrieval(
        dataclasses.replace(config, output_dir=str(tmp_path / "ref"))
    )
    for a, b in zip(_weights(tmp_path / "run"), _weights(tmp_path / "ref"), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert [t["loss"] for t in results["trace"]] == pytest.approx(
        [t["loss"] for t in reference["trace"]], rel=1e-5
    )


def test_contrastive_pairs_is_the_xbm_papers_loss_inside_the_memory(tmp_path):
    """--loss=contrastive_pairs: the all-pairs contrastive loss with the XBM paper's cosine
    margins (positives 1 - s, negatives past 0.5), wrapped by --xbm_size, trains."""
    config = retrieval.resolve(
        retrieval.RetrievalConfig(output_dir="x", loss="contrastive_pairs", xbm_size=64)
    )
    assert (config.batch_p, config.batch_k, config.margin) == (24, 6, 0.5)
    memory = losses.CrossBatchMemoryBank(64)
    loss = retrieval.build_loss(config, memory)
    xbm = loss.loss  # RegularizedLoss(CrossBatchMemory(...), [SVMax])
    assert isinstance(xbm, losses.CrossBatchMemory) and xbm.memory is memory
    inner = xbm.loss
    assert isinstance(inner, losses.AllPairsContrastiveLoss)
    assert (inner.pos_margin, inner.neg_margin, inner.distance) == (1.0, 0.5, "cosine_similarity")
    keras.backend.clear_session()
    results = retrieval.train_retrieval(
        _config(tmp_path, loss="contrastive_pairs", xbm_size=40, train_steps=4, eval_every=4)
    )
    assert results["status"] == "completed"
    assert all(np.isfinite(t["loss"]) for t in results["trace"])


def test_cli_documents_and_refuses_xbm_flags():
    done = _cli("--dataset=digits", "--xbm_size=16", "--output_dir=/tmp/never")
    assert done.returncode == 2 and "--xbm_size needs a loss" in done.stderr, done.stderr[-500:]
    helpfull = _cli("--helpfull")
    help_text = " ".join(helpfull.stdout.split())
    assert "Cross-batch memory (XBM" in help_text and "--xbm_start_step" in help_text
    xbm_help = help_text.split("--xbm_size:")[1].split("(an integer)")[0]
    for loss in retrieval.XBM_LOSSES:  # the help names every loss the check accepts
        assert loss in xbm_help, (loss, xbm_help)


def test_optimizer_defaults_are_the_papers_and_constant_is_the_rate_throughout():
    config = retrieval.resolve(retrieval.RetrievalConfig(output_dir="x"), num_train_classes=142)
    assert (config.momentum, config.lr_schedule) == (0.9, "paper")
    optimizer, schedule = retrieval.build_optimizer(config)
    assert optimizer.momentum == 0.9
    assert isinstance(schedule, ConstantThenPolynomialDecay)
    assert float(schedule(0)) == pytest.approx(0.01)
    assert float(schedule(config.train_steps)) == pytest.approx(1e-7)
    constant = dataclasses.replace(config, lr_schedule="constant", momentum=0.0)
    optimizer, schedule = retrieval.build_optimizer(constant)
    assert optimizer.momentum == 0.0
    assert float(optimizer.learning_rate) == pytest.approx(0.01)
    for step in (0, config.train_steps // 2, config.train_steps):
        assert schedule(step) == 0.01


def _digits_closed_config(tmp_path, **kwargs):
    return _config(
        tmp_path,
        dataset="digits_closed",
        backbone="mnist_toy",
        embedding_dim=2,
        batch_p=8,
        batch_k=4,
        momentum=0.0,
        lr_schedule="constant",
        **kwargs,
    )


def test_plain_sgd_steps_are_w_minus_lr_times_the_gradient(tmp_path):
    # Three steps: the first step of SGD with momentum is also w - lr g (the velocity starts at
    # zero), so only later steps tell plain SGD apart.
    config = _digits_closed_config(tmp_path, train_steps=3, eval_every=3, learning_rate=0.05)
    # The initial weights and the batches, rebuilt as train_retrieval builds them.
    resolved, (train, _, _, _), model, _ = retrieval.setup(config)
    loss = retrieval.build_loss(resolved)
    weights = [w.numpy().astype(np.float64) for w in model.trainable_weights]
    batches = data.pk_batches(*train, batch_p=8, batch_k=4, seed=resolved.seed, start_batch=0)
    for x, y in batches.take(3):
        for variable, value in zip(model.trainable_weights, weights, strict=True):
            variable.assign(value.astype(np.float32))
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        gradients = tape.gradient(value, model.trainable_weights)
        weights = [w - 0.05 * g.numpy() for w, g in zip(weights, gradients, strict=True)]

    results = retrieval.train_retrieval(config)
    assert results["status"] == "completed"
    assert [t["learning_rate"] for t in results["trace"]] == [0.05] * 3
    trained = keras.models.load_model(tmp_path / "run" / "embedding_model.keras")
    for w, expected in zip(trained.trainable_weights, weights, strict=True):
        np.testing.assert_allclose(w.numpy(), expected, atol=1e-6, err_msg=w.path)


def test_digits_closed_mnist_toy_smoke(tmp_path):
    results = retrieval.train_retrieval(
        _digits_closed_config(tmp_path, train_steps=4, eval_every=2)
    )
    assert results["status"] == "completed"
    c = results["config"]
    assert (c["dataset"], c["backbone"], c["batch_p"], c["batch_k"]) == (
        "digits_closed",
        "mnist_toy",
        8,
        4,
    )
    assert (c["momentum"], c["lr_schedule"]) == (0.0, "constant")
    assert [e["step"] for e in results["evaluations"]] == [0, 2, 4]
    assert [t["learning_rate"] for t in results["trace"]] == [0.01] * 4
    test_labels = data.load_digits_closed_set()["test"][1]
    assert set(np.unique(test_labels)) == set(range(10))  # closed set: the training classes
    assert 0.0 <= results["evaluations"][-1]["recall_at_1"] <= 1.0


def test_cli_documents_and_refuses_the_optimizer_flags():
    help_text = " ".join(_cli("--helpfull").stdout.split())
    for text in (
        "--lr_schedule: <paper|constant>: paper: --learning_rate for train_steps/2",
        "--momentum: SGD momentum in [0, 1)",
        "digits_closed: the same digits at 28 x 28",
        "(default: '0.9')",
    ):
        assert text in help_text, text
    for flag, message in (
        ("--momentum=1", "`--momentum`. Expected a float in [0, 1)"),
        ("--lr_schedule=cosine", "lr_schedule"),
    ):
        done = _cli("--dataset=digits_closed", flag, "--output_dir=/tmp/never_optimizer_flags")
        assert done.returncode == 2 and message in done.stderr, (flag, done.stderr[-500:])
    assert not os.path.exists("/tmp/never_optimizer_flags")
