"""The Gaussian-ring GAN trainer: the train step against an independent Keras-Adam reference,
SVMax off = the plain step, unrolling, records, resume and the command line."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tf_svmax import data, metrics, training
from trainers import gan_mog

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path, **kwargs):
    base = dict(
        output_dir=str(tmp_path / "run"),
        batch_size=32,
        noise_dim=8,
        hidden_units=16,
        train_steps=4,
        eval_every=2,
        trace_every=1,
        num_samples=300,
        verbose=0,
    )
    return gan_mog.GanConfig(**{**base, **kwargs})


def test_paper_defaults():
    c = gan_mog.resolve(gan_mog.GanConfig(output_dir="x"))
    assert (c.batch_size, c.noise_dim, c.hidden_units, c.train_steps) == (512, 256, 128, 3000)
    assert (c.learning_rate, c.mixture_radius, c.mixture_std, c.num_modes) == (0.025, 2.0, 0.02, 8)
    assert c.svmax_lambda == 0.0 and c.generator_activation == "tanh" and c.unroll_steps is None
    assert c.mixture == "uniform" and c.unroll_real is None and c.unroll_adam_state is None
    u = gan_mog.resolve(gan_mog.GanConfig(output_dir="x", variant="unrolled"))
    # The paper's 5 steps; the rest as the PyTorch code the paper used runs its unroll.
    assert u.unroll_steps == 5 and u.unroll_gradient == "surrogate"
    assert u.unroll_real == "fresh" and u.unroll_adam_state == "advance"
    lower, upper = gan_mog.svmax_bounds(c)
    assert lower == pytest.approx(2 * np.sqrt(512) / 2) and upper == pytest.approx(2 * 16.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(unroll_steps=5), "apply to --variant=unrolled only"),
        (dict(unroll_gradient="surrogate"), "apply to --variant=unrolled only"),
        (dict(unroll_real="reused"), "received --variant=vanilla with --unroll_real=reused"),
        (dict(unroll_adam_state="copy"), "apply to --variant=unrolled only"),
        (dict(mixture_seed=3), "--mixture_seed applies to --mixture=random only"),
        (dict(mixture="skewed"), "`--mixture`"),
        (dict(train_steps=10, eval_every=3), "multiple of --eval_every"),
        (dict(learning_rate=0.0), "`--learning_rate`"),
        (dict(svmax_lambda=-1.0), "`--svmax_lambda`"),
    ],
)
def test_refused_configs(kwargs, message):
    with pytest.raises(gan_mog.ConfigError, match=message):
        gan_mog.resolve(gan_mog.GanConfig(output_dir="x", **kwargs))


def _reference_step(config, gan, batch, unrolled_params=None):
    """One D step then one G step, written with Keras' own Adam on copies of the weights."""
    real, noise_d, noise_g, _ = batch
    g = keras.models.clone_model(gan.generator)
    g.set_weights(gan.generator.get_weights())
    d = keras.models.clone_model(gan.discriminator)
    d.set_weights(gan.discriminator.get_weights())
    adam = lambda: keras.optimizers.Adam(  # noqa: E731
        config.learning_rate, beta_1=0.5, beta_2=0.999, epsilon=1e-8
    )
    d_opt, g_opt = adam(), adam()
    with tf.GradientTape() as tape:
        fake = g(noise_d)
        loss = tf.reduce_mean(tf.nn.softplus(-d(real))) + tf.reduce_mean(tf.nn.softplus(d(fake)))
    d_opt.apply(tape.gradient(loss, d.trainable_variables), d.trainable_variables)
    with tf.GradientTape() as tape:
        fake = g(noise_g)
        loss = tf.reduce_mean(tf.nn.softplus(-d(fake)))
        if config.svmax_lambda:
            s = tf.reduce_mean(tf.linalg.svd(fake, compute_uv=False))
            loss = loss - config.svmax_lambda * s
    g_opt.apply(tape.gradient(loss, g.trainable_variables), g.trainable_variables)
    return g.get_weights(), d.get_weights()


def _batch(config):
    return next(iter(gan_mog.batches(config, 0)))


@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_train_step_equals_the_reference(tmp_path, lam):
    config = gan_mog.resolve(_config(tmp_path, svmax_lambda=lam))
    gan = gan_mog.build_gan(config)
    batch = _batch(config)
    expected_g, expected_d = _reference_step(config, gan, batch)
    before = gan.generator.get_weights()
    gan.train_step(batch)
    for got, want in zip(
        gan.generator.get_weights() + gan.discriminator.get_weights(),
        expected_g + expected_d,
        strict=False,
    ):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    moved = max(
        np.abs(a - b).max() for a, b in zip(gan.generator.get_weights(), before, strict=False)
    )
    assert moved > 1e-3  # the comparison is not between two unchanged models


def test_svmax_changes_the_generator_step(tmp_path):
    weights = {}
    for lam in (0.0, 0.5):
        config = gan_mog.resolve(_config(tmp_path, svmax_lambda=lam))
        gan = gan_mog.build_gan(config)
        gan.train_step(_batch(config))
        weights[lam] = gan.generator.get_weights()
    assert max(np.abs(a - b).max() for a, b in zip(weights[0.0], weights[0.5], strict=False)) > 1e-4


def test_surrogate_unrolling_is_the_gradient_at_the_unrolled_discriminator(tmp_path):
    """surrogate: the generator's gradient equals the plain one taken at a discriminator moved
    k Adam steps (Keras' Adam, from the optimizer state after the D step) on a fixed fake."""
    config = gan_mog.resolve(
        _config(tmp_path, variant="unrolled", unroll_steps=3, unroll_gradient="surrogate")
    )
    gan = gan_mog.build_gan(config)
    real, noise_d, noise_g, reals = _batch(config)
    assert reals.shape == (3, config.batch_size, 2)
    # The train step's D update, then the reference unroll on a copy of D.
    with tf.GradientTape() as tape:
        fake = gan.generator(noise_d)
        loss = gan_mog.discriminator_loss(gan.discriminator(real), gan.discriminator(fake))
    dv = gan.discriminator.trainable_variables
    gan.d_optimizer.apply(tape.gradient(loss, dv), dv)
    d = keras.models.clone_model(gan.discriminator)
    d.set_weights(gan.discriminator.get_weights())
    fake = gan.generator(noise_g)
    m, v, t = gan.d_optimizer.state()
    params = [x.value for x in d.trainable_variables]
    for j in range(3):  # update j on the j-th fresh real batch, as the original draws them
        with tf.GradientTape() as tape:
            loss = gan_mog.discriminator_loss(d(reals[j]), d(fake))
        grads = tape.gradient(loss, d.trainable_variables)
        params, m, v, t = training.adam_update(
            params, grads, m, v, t, learning_rate=0.025, beta_1=0.5, beta_2=0.999, epsilon=1e-8
        )
        for var, value in zip(d.trainable_variables, params, strict=False):
            var.assign(value)
    with tf.GradientTape() as tape:
        want = tape.gradient(
            gan_mog.generator_loss(d(gan.generator(noise_g))), gan.generator.trainable_variables
        )
    with tf.GradientTape() as tape:
        got = tape.gradient(
            gan_mog.generator_loss(gan._unrolled_logits(reals, gan.generator(noise_g))[0]),
            gan.generator.trainable_variables,
        )
    for a, b in zip(got, want, strict=False):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # Through the updates the gradient differs (the unrolled weights depend on the fake batch).
    gan.unroll_gradient = "through"
    with tf.GradientTape() as tape:
        through = tape.gradient(
            gan_mog.generator_loss(gan._unrolled_logits(reals, gan.generator(noise_g))[0]),
            gan.generator.trainable_variables,
        )
    assert all(np.isfinite(x).all() for x in through)
    assert max(np.abs(a - b).max() for a, b in zip(through, want, strict=False)) > 1e-5


@pytest.mark.parametrize("adam_state", ["advance", "copy"])
def test_unrolled_adam_state_is_the_originals_or_a_copy(tmp_path, adam_state):
    """advance (the PyTorch original: `D.load(backup)` restores weights only): after one
    iteration D's Adam has taken 1 + K steps, its moments those of Keras' Adam applied to the D
    step's gradient and then to the K unrolled updates' (on the fresh real batches), while D's
    weights are those after the D step alone. copy: the state of the D step alone."""
    k = 2
    config = gan_mog.resolve(
        _config(tmp_path, variant="unrolled", unroll_steps=k, unroll_adam_state=adam_state)
    )
    gan = gan_mog.build_gan(config)
    real, noise_d, noise_g, reals = _batch(config)
    d = keras.models.clone_model(gan.discriminator)
    d.set_weights(gan.discriminator.get_weights())
    opt = keras.optimizers.Adam(config.learning_rate, beta_1=0.5, beta_2=0.999, epsilon=1e-8)
    fake_d, fake_g = gan.generator(noise_d), gan.generator(noise_g)  # G moves only after both
    pairs = [(real, fake_d)] + [(reals[j], fake_g) for j in range(k)]
    after_d_step = None
    want_m = [np.zeros(v.shape) for v in d.trainable_variables]  # Adam's moments in numpy
    want_v = [np.zeros(v.shape) for v in d.trainable_variables]
    for i, (r, f) in enumerate(pairs if adam_state == "advance" else pairs[:1]):
        with tf.GradientTape() as tape:
            loss = gan_mog.discriminator_loss(d(r), d(f))
        grads = tape.gradient(loss, d.trainable_variables)
        want_m = [0.5 * m + 0.5 * g.numpy() for m, g in zip(want_m, grads, strict=True)]
        want_v = [0.999 * v + 0.001 * g.numpy() ** 2 for v, g in zip(want_v, grads, strict=True)]
        opt.apply(grads, d.trainable_variables)  # the unrolled weights, for the next gradient
        if i == 0:
            after_d_step = d.get_weights()
    gan.train_step((real, noise_d, noise_g, reals))
    assert int(gan.d_optimizer.t.numpy()) == (1 + k if adam_state == "advance" else 1)
    for got, want in zip(gan.d_optimizer.m + gan.d_optimizer.v, want_m + want_v, strict=True):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-7)
    for got, want in zip(gan.discriminator.get_weights(), after_d_step, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert max(np.abs(m.numpy()).max() for m in gan.d_optimizer.m) > 1e-4


def test_unroll_batches_are_fresh_and_vanilla_batches_unchanged(tmp_path):
    fresh = gan_mog.resolve(_config(tmp_path, variant="unrolled", unroll_steps=3))
    reused = gan_mog.resolve(dataclasses.replace(fresh, unroll_real="reused"))
    vanilla = gan_mog.resolve(_config(tmp_path))
    a, b, c = (list(gan_mog.batches(x, 5).take(2)) for x in (fresh, reused, vanilla))
    for step in range(2):
        for i in range(3):  # real, noise_d, noise_g: one seed family whatever the unroll
            np.testing.assert_array_equal(a[step][i], c[step][i])
            np.testing.assert_array_equal(b[step][i], c[step][i])
        reals = a[step][3].numpy()
        assert reals.shape == (3, fresh.batch_size, 2) and b[step][3].shape[0] == 0
        every = [a[step][0].numpy(), *reals]
        assert all(not np.allclose(every[i], every[j]) for i in range(4) for j in range(i + 1, 4))
    assert not np.allclose(a[0][3], a[1][3])  # steps 5 and 6 differ
    # A resume at step 6 draws step 6's batches.
    np.testing.assert_array_equal(next(iter(gan_mog.batches(fresh, 6)))[3], a[1][3])


def test_random_mixture_weights_reach_batches_metrics_and_record(tmp_path):
    config = _config(tmp_path, mixture="random", mixture_seed=4, num_samples=400)
    weights = data.random_mode_weights(8, seed=4)
    real = np.concatenate(
        [b[0].numpy() for b in gan_mog.batches(gan_mog.resolve(config), 0).take(80)]
    )
    nearest = np.argmin(((real[:, None] - data.gaussian_ring()[None]) ** 2).sum(-1), axis=1)
    counts = np.bincount(nearest, minlength=8)
    assert stats.chisquare(counts, counts.sum() * weights).pvalue > 1e-3
    results = gan_mog.train_gan_mog(config)
    np.testing.assert_allclose(results["mixture"]["weights"], weights, rtol=1e-12)
    assert results["mixture"]["weights_std"] == pytest.approx(np.std(weights))
    final = results["evaluations"][-1]
    points = np.load(Path(config.output_dir) / "samples.npy")
    expected = metrics.mode_coverage(points, data.gaussian_ring(), 0.02, weights=weights)
    if final["mode_kl"] is not None:
        assert final["mode_kl"] == pytest.approx(expected["mode_kl"], rel=1e-9)
    assert final["mode_counts"] == expected["mode_counts"]


def test_run_records_samples_metrics_and_resumes(tmp_path):
    config = _config(tmp_path, svmax_lambda=0.01)
    results = gan_mog.train_gan_mog(config)
    run = Path(config.output_dir)
    assert results["status"] == "completed"
    assert [e["step"] for e in results["evaluations"]] == [0, 2, 4]
    final = results["evaluations"][-1]
    for key in ("modes_covered", "high_quality_fraction", "mode_kl"):
        assert results[key] == final[key]
    samples = np.load(run / "samples.npy")
    assert samples.shape == (300, 2) and samples.dtype == np.float32
    np.testing.assert_array_equal(samples, np.load(run / "samples" / "step_000004.npy"))
    record = json.loads((run / "results.json").read_text())
    assert record["modes_covered"] == final["modes_covered"]
    assert record["mixture"]["std"] == 0.02 and len(record["mixture"]["centres"]) == 8
    assert {"d_loss", "g_loss", "s_mu", "step_seconds"} <= set(record["trace"][-1])
    assert (run / "samples.png").exists() and (run / "training.png").exists()
    again = gan_mog.train_gan_mog(config)  # finished: reported, not retrained
    assert again["evaluations"] == results["evaluations"]


class _Interrupt(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == 3:
            raise KeyboardInterrupt


def test_resume_continues_on_the_same_batches(tmp_path):
    """Interrupted at step 3 (checkpoint 2), the resumed run ends where one without a stop does:
    the batches are seeded by step and the discriminator's Adam state is checkpointed."""
    whole = gan_mog.train_gan_mog(_config(tmp_path / "a", unroll_steps=2, variant="unrolled"))
    config = _config(tmp_path / "b", unroll_steps=2, variant="unrolled")
    with pytest.raises(KeyboardInterrupt):
        gan_mog.train_gan_mog(config, callbacks=[_Interrupt()])
    resumed = gan_mog.train_gan_mog(config)
    assert resumed["resumed_at_steps"] == [2]
    a = np.load(tmp_path / "a" / "run" / "samples.npy")
    b = np.load(tmp_path / "b" / "run" / "samples.npy")
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert whole["status"] == resumed["status"] == "completed"


def test_cli_refuses_before_work(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "trainers.train_gan_mog", f"--output_dir={out}", "--unroll_steps=5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--variant=unrolled only" in proc.stderr and not out.exists()


def test_unrolled_adam_has_a_finite_gradient_where_a_weight_never_had_one():
    """v = 0 (a dead unit's weight) must not make the through-gradient 0 * inf = NaN."""
    p = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        g = tf.constant([0.0, 0.5])
        tape.watch(g)
        zeros = [tf.zeros(2)]
        out, _, _, _ = training.adam_update(
            [p],
            [g],
            zeros,
            zeros,
            tf.constant(0.0),
            learning_rate=0.1,
            beta_1=0.5,
            beta_2=0.999,
            epsilon=1e-8,
        )
    grad = tape.gradient(out[0], g)
    assert np.isfinite(grad.numpy()).all()
    np.testing.assert_allclose(out[0].numpy(), [1.0, 2.0 - 0.1], rtol=1e-6)


def test_reproduce_smoke(tmp_path):
    table = tmp_path / "gan.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.reproduce_gan_mog",
            f"--output_dir={tmp_path / 'runs'}",
            "--seeds=0",
            "--sweep_seeds=0",
            "--sweep_learning_rates=0.025",
            "--sweep_lambdas=0,0.5",
            "--sweep_activations=relu",
            "--train_steps=2",
            "--eval_every=1",
            "--mixture=random",
            "--mixture_seed=3",
            "--unrolled_rows_steps=2",
            f"--table={table}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = table.read_text()
    assert "| vanilla + SVMax (λ 0.01) |" in text and "| 0.025 | 0.5 | relu |" in text
    record = json.loads(table.with_suffix(".json").read_text())
    assert len(record["fig3"]) == 4 and len(record["sweep"]) == 2
    assert table.with_suffix(".png").exists()
    weights = ", ".join(f"{w:.3f}" for w in data.random_mode_weights(8, seed=3))
    assert "random mode weights (the original notebook's" in text and weights in text
    assert "| unrolled (2 steps, surrogate, fresh real, Adam advance) |" in text
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert "unrolled_surrogate_u2_fresh_advance_tanh_lr0.025_lambda0.01_mix3_seed0" in folders
    assert "vanilla_tanh_lr0.025_lambda0_mix3_seed0" in folders


def test_reproduce_refuses_bad_lists(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.reproduce_gan_mog",
            f"--output_dir={tmp_path}",
            "--sweep_lambdas=0,x",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "--sweep_lambdas" in proc.stderr
    assert not any(tmp_path.iterdir())


# The PyTorch original's iterations (andrewliao11/unrolled-gans: d_loop, d_unrolled_loop,
# g_loop, PyTorch 0.4's Adam) from tests/trainers/make_unrolled_gan_golden.py, run by hand where
# torch is installed (CI has none); its inputs are in the file with its outputs.
GOLDEN = Path(__file__).resolve().parent / "golden" / "unrolled_gan.npz"


def _golden():
    with np.load(GOLDEN) as f:
        arrays = {key: f[key] for key in f.files}
    return arrays, json.loads(str(arrays.pop("__meta__")))


@pytest.mark.parametrize("setting", ["vanilla", "unrolled", "unrolled_svmax"])
def test_iterations_equal_the_pytorch_original(tmp_path, setting):
    golden, meta = _golden()
    spec, sizes = meta["settings"][setting], meta["sizes"]
    k = spec["unroll_steps"]

    def listed(key):
        count = len([n for n in golden if n.startswith(f"{setting}/{key}/")])
        return [golden[f"{setting}/{key}/{i}"] for i in range(count)]

    config = gan_mog.resolve(
        _config(
            tmp_path,
            batch_size=sizes["batch"],
            noise_dim=sizes["noise_dim"],
            hidden_units=sizes["hidden"],
            learning_rate=meta["learning_rate"],
            svmax_lambda=spec["svmax_lambda"],
            **(dict(variant="unrolled", unroll_steps=k) if k else {}),
        )
    )
    assert k == 0 or (config.unroll_gradient, config.unroll_real, config.unroll_adam_state) == (
        "surrogate",
        "fresh",
        "advance",
    )  # the defaults are the original's unroll
    gan = gan_mog.build_gan(config)
    gan.generator.set_weights(listed("g_init"))
    gan.discriminator.set_weights(listed("d_init"))
    before = gan.generator.get_weights()
    for t in range(sizes["iterations"]):
        unroll = golden[f"{setting}/unroll_real"][t] if k else np.zeros((0, sizes["batch"], 2))
        gan.train_step(
            tuple(
                tf.constant(x, tf.float32)
                for x in (
                    golden[f"{setting}/real"][t],
                    golden[f"{setting}/noise_d"][t],
                    golden[f"{setting}/noise_g"][t],
                    unroll,
                )
            )
        )
    # atol 1e-4: Adam divides by sqrt(v), so float32 rounding (softplus on logits here, BCE on
    # a sigmoid there) grows in weights whose gradient is near 0; measured 1.8e-5 at most.
    # Each departure from the original's unroll moves weights by 3e-2 or more here (Adam state
    # copied 5.4e-2, real batch reused 1.4e-1, gradient through the updates 1.4e-1).
    for got, want in zip(gan.generator.get_weights(), listed("g"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for got, want in zip(gan.discriminator.get_weights(), listed("d"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    moments = zip(gan.d_optimizer.m + gan.d_optimizer.v, listed("d_m") + listed("d_v"), strict=True)
    for got, want in moments:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-3, atol=1e-6)
    assert int(gan.d_optimizer.t.numpy()) == int(golden[f"{setting}/d_t"]) == 3 * (1 + k)
    moved = max(
        np.abs(a - b).max() for a, b in zip(gan.generator.get_weights(), before, strict=True)
    )
    assert moved > 1e-2  # lr 0.025 over 3 steps: the comparison is not of unmoved weights


# Runs trainers.train_gan_mog with argv[2:] as ``python -m`` does, its records' writer failing
# as on a full disk from its argv[1]-th write on (config.json is the first, then results.json
# at each evaluation: the 4th is step 4's, after step 2's checkpoint).
FULL_DISK = """
import errno, runpy, sys
from tf_svmax import records
write_json, calls, full_from = records.write_json, [], int(sys.argv[1])

def write_until_full(path, payload):
    calls.append(path)
    if len(calls) >= full_from:
        raise OSError(errno.ENOSPC, "No space left on device", path + ".tmp")
    write_json(path, payload)

records.write_json = write_until_full
sys.argv = ["train_gan_mog", *sys.argv[2:]]
runpy.run_module("trainers.train_gan_mog", run_name="__main__", alter_sys=True)
"""


def test_a_full_disk_fails_with_status_1_keeps_the_run_and_the_same_command_resumes(tmp_path):
    """Issue 59: a full disk during a commit gave a traceback (exit 1); now one line says what
    is kept, and the same command, with space again, resumes and completes."""
    out = tmp_path / "run"
    flags = [f"--output_dir={out}", "--train_steps=4", "--eval_every=2", "--batch_size=32"]
    flags += ["--noise_dim=8", "--hidden_units=16", "--num_samples=300", "--verbose=0"]

    def run(full_from):
        return subprocess.run(
            [sys.executable, "-c", FULL_DISK, str(full_from), *flags],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    full = run(full_from=4)
    assert full.returncode == 1, full.stderr[-3000:]
    assert "Traceback" not in full.stderr, full.stderr[-3000:]
    assert full.stderr.splitlines()[-1].startswith(
        f"train_gan_mog: failed: the disk is full (No space left on device writing "
        f"{out / 'results.json'}.tmp). Nothing written before is lost"
    )
    record = json.loads((out / "results.json").read_text())
    assert record["status"] == "running" and [e["step"] for e in record["evaluations"]] == [0, 2]
    resumed = run(full_from=10**6)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    record = json.loads((out / "results.json").read_text())
    assert record["status"] == "completed" and record["resumed_at_steps"] == [2]
