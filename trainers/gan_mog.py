"""The GAN on the 2-D ring of 8 Gaussians behind `trainers/train_gan_mog.py`, callable without
flags (SVMax paper, seed `000`, Sec. 4.2, Fig. 3; dissertation `001`, Sec. 3.5).

The setup is the public PyTorch unrolled-GAN code the paper modified (andrewliao11/unrolled-gans):
noise 256-d N(0, 1); generator and discriminator MLPs with two hidden layers of 128 (generator
tanh, discriminator ReLU and a sigmoid output), PyTorch's default `nn.Linear` initialisation,
batch 512, Adam with betas (0.5, 0.999) for both, binary cross-entropy with the non-saturating
generator loss, 3,000 iterations, mixture radius 2 and std 0.02, one discriminator step per
generator step. The paper's single change: learning rate 0.025 for both networks. SVMax acts on
the generator's `b x 2` fake batch in its unbounded form, ``L_G - lambda * s_mu`` (paper:
lambda = 0.01); the fake points are not normalised, so the bounds recorded are those of rows
of norm = the ring's radius (``L = r sqrt(b) / d``, ``U = r sqrt(b / d)``).

`variant="unrolled"` (Metz et al. 2017): the generator's loss is taken at the discriminator
after `unroll_steps` Adam updates. The defaults are what the PyTorch code does:
``unroll_gradient="surrogate"`` treats those updates as constants (its Adam step is not
differentiable), so the gradient only sees the unrolled weights; ``"through"`` (Metz)
differentiates through them. ``unroll_real="fresh"`` draws a new real batch for every unrolled
update (``"reused"``: the discriminator step's batch each time). ``unroll_adam_state="advance"``
keeps the unrolled updates' Adam moments and step count, restoring only the weights (the
original's ``D.load(backup)`` copies weights, not the optimizer), so the discriminator's Adam
advances 1 + K steps per iteration; ``"copy"`` starts each unroll from a copy of the state and
discards it (Metz et al.'s unroll).

The mixture's modes are equally weighted (`mixture="uniform"`, the paper's figure) or weighted
as the notebook's active default draws them (`"random"`: `data.random_mode_weights`, seeded by
`mixture_seed`; the notebook never seeds it).

Evaluation: `num_samples` points from fixed noise, VEEGAN's mode coverage
(`tf_svmax.metrics.mode_coverage`), the points' s_mu; every evaluation's points are kept in
``samples/step_<N>.npy`` and the final ones as ``samples.npy``.

    config = GanConfig(output_dir="/tmp/gan", svmax_lambda=0.01)
    results = train_gan_mog(config)                # also in results.json
"""

import dataclasses
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from tf_svmax import data, metrics, ops
from tf_svmax.training import FunctionalAdam
from trainers.harness.config import (
    ConfigError,
    RunConfig,
    check_fields,
    output_dir_option,
)
from trainers.harness.flags import (
    non_negative_int,
    non_negative_number,
    option,
    positive_int,
    positive_number,
)
from trainers.harness.loop import Job, run_job
from trainers.harness.plots import pyplot, save_figure

VARIANTS = ("vanilla", "unrolled")
UNROLL_GRADIENTS = ("surrogate", "through")
UNROLL_REAL = ("fresh", "reused")
UNROLL_ADAM_STATE = ("advance", "copy")
MIXTURES = ("uniform", "random")
ACTIVATIONS = ("tanh", "relu")
ADAM_BETAS = (0.5, 0.999)  # the unrolled-GAN code's optim_betas
ADAM_EPSILON = 1e-8  # PyTorch's Adam default, which the original ran with
PAPER_SVMAX_LAMBDA = 0.01
PAPER_UNROLL_STEPS = 5  # the paper's text; the notebook's `unrolled_steps` is 10
NOTEBOOK_UNROLL_STEPS = 10
# Square the heat maps cover (the ring has radius 2; the original plots [-5, 5]).
PLOT_EXTENT = 3.0


@dataclasses.dataclass(frozen=True)
class GanConfig(RunConfig):
    """One GAN run; each field's help is its command-line flag's (`trainers/train_gan_mog.py`)."""

    output_dir: str = output_dir_option("runs/gan_mog")
    variant: str = option(
        "vanilla",
        "vanilla: one discriminator and one generator Adam step per iteration; unrolled: the "
        "generator's loss is taken at the discriminator after --unroll_steps updates (Metz et "
        "al. 2017).",
        choices=VARIANTS,
    )
    unroll_steps: int | None = option(
        None,
        f"Discriminator updates unrolled (unrolled only; default the paper's "
        f"{PAPER_UNROLL_STEPS}; the original notebook: {NOTEBOOK_UNROLL_STEPS}).",
        check=positive_int,
    )
    unroll_gradient: str | None = option(
        None,
        "unrolled only. surrogate (default, the PyTorch code the paper used): the unrolled "
        "updates are constants, the gradient is taken at the unrolled discriminator; through "
        "(Metz et al.): the gradient is taken through the updates.",
        choices=UNROLL_GRADIENTS,
    )
    unroll_real: str | None = option(
        None,
        "unrolled only. fresh (default, the original): a new real batch for every unrolled "
        "update; reused: the discriminator step's real batch for all of them.",
        choices=UNROLL_REAL,
    )
    unroll_adam_state: str | None = option(
        None,
        "unrolled only. advance (default, the original): the unrolled updates' Adam moments "
        "and step count are kept, only the weights are restored, so the discriminator's Adam "
        "advances 1 + unroll_steps steps per iteration; copy (Metz et al.): each unroll starts "
        "from a copy of the state and discards it.",
        choices=UNROLL_ADAM_STATE,
    )
    svmax_lambda: float = option(
        0.0,
        "SVMax weight on the generator's fake batch, L_G - lambda * s_mu (paper: "
        f"{PAPER_SVMAX_LAMBDA}); 0: off (exactly the run without SVMax).",
        check=non_negative_number,
    )
    generator_activation: str = option(
        "tanh", "Generator hidden activation (the original code: tanh).", choices=ACTIVATIONS
    )
    learning_rate: float = option(
        0.025,
        "Adam learning rate of both networks (paper: 0.025, the change that induces collapse; "
        "the original code: 1e-4 discriminator, 1e-3 generator).",
        check=positive_number,
    )
    batch_size: int = option(
        512, "Real and fake points per batch (paper: 512).", check=positive_int
    )
    noise_dim: int = option(256, "Generator input size (paper: 256).", check=positive_int)
    hidden_units: int = option(128, "Units of each hidden layer (paper: 128).", check=positive_int)
    num_modes: int = option(8, "Gaussians on the ring (paper: 8).", check=positive_int)
    mixture_radius: float = option(2.0, "Ring radius (paper: 2).", check=positive_number)
    mixture_std: float = option(0.02, "Std of each Gaussian (paper: 0.02).", check=positive_number)
    mixture: str = option(
        "uniform",
        "Mode weights: uniform (the paper's figure), or random: one U(0, 1) weight per mode, "
        "normalised (the original notebook's active `dset.random_distribution()`), drawn from "
        "--mixture_seed.",
        choices=MIXTURES,
    )
    mixture_seed: int = option(
        0,
        "Seed of the random mode weights (--mixture=random only; one seed for all runs, as the "
        "paper fixed one).",
        check=non_negative_int,
    )
    train_steps: int = option(3000, "Training iterations (paper: 3000).", check=positive_int)
    eval_every: int = option(
        300,
        "Steps between evaluations, sample snapshots and checkpoints (the original plots every "
        "300).",
        check=positive_int,
    )
    trace_every: int | None = option(
        None, "Steps per point of the loss trace (default: eval_every / 10).", check=positive_int
    )
    num_samples: int = option(
        2500, "Generated points per evaluation (VEEGAN: 2,500).", check=positive_int
    )


def resolve(config):
    """The config with defaults filled in, checked; raises ConfigError naming the flags."""
    c = config
    check_fields(c)
    unroll_fields = ("unroll_steps", "unroll_gradient", "unroll_real", "unroll_adam_state")
    given = [
        f"--{name}={getattr(c, name)}" for name in unroll_fields if getattr(c, name) is not None
    ]
    if c.variant == "vanilla" and given:
        raise ConfigError(
            "--unroll_steps, --unroll_gradient, --unroll_real and --unroll_adam_state apply to "
            f"--variant=unrolled only; received --variant=vanilla with {', '.join(given)}."
        )
    if c.mixture == "uniform" and c.mixture_seed:
        raise ConfigError(
            f"--mixture_seed applies to --mixture=random only; received --mixture=uniform with "
            f"--mixture_seed={c.mixture_seed}."
        )
    if c.train_steps % c.eval_every:
        raise ConfigError(
            f"--train_steps ({c.train_steps}) must be a multiple of --eval_every ({c.eval_every})."
        )
    unrolled = c.variant == "unrolled"
    return dataclasses.replace(
        c,
        unroll_steps=(c.unroll_steps or PAPER_UNROLL_STEPS) if unrolled else None,
        unroll_gradient=(c.unroll_gradient or "surrogate") if unrolled else None,
        unroll_real=(c.unroll_real or "fresh") if unrolled else None,
        unroll_adam_state=(c.unroll_adam_state or "advance") if unrolled else None,
        trace_every=c.trace_every or max(1, c.eval_every // 10),
    )


def mixture_weights(config):
    """The mode weights of a config's mixture (float64, sum 1), or None for equal weights."""
    if config.mixture == "uniform":
        return None
    return data.random_mode_weights(config.num_modes, seed=config.mixture_seed)


def svmax_bounds(config):
    """``(L, U)`` of s_mu for a `batch_size x 2` batch whose rows have the ring's radius."""
    lower, upper = ops.svmax_bounds(config.batch_size, 2)
    return config.mixture_radius * lower, config.mixture_radius * upper


# Model.


def _torch_linear(units, fan_in, activation, seed, name):
    """A Dense layer initialised as PyTorch's `nn.Linear`: weights and bias U(-1/sqrt(fan_in),
    1/sqrt(fan_in)) (the original code keeps that default)."""
    limit = 1.0 / math.sqrt(fan_in)
    return keras.layers.Dense(
        units,
        activation=activation,
        kernel_initializer=keras.initializers.RandomUniform(-limit, limit, seed=seed),
        bias_initializer=keras.initializers.RandomUniform(-limit, limit, seed=seed + 1),
        name=name,
    )


def mlp(input_dim, hidden_units, output_dim, activation, seed, name):
    """Two hidden layers of `hidden_units` with `activation`, then a linear output."""
    inputs = keras.Input((input_dim,))
    x = _torch_linear(hidden_units, input_dim, activation, seed, "hidden_1")(inputs)
    x = _torch_linear(hidden_units, hidden_units, activation, seed + 2, "hidden_2")(x)
    outputs = _torch_linear(output_dim, hidden_units, None, seed + 4, "output")(x)
    return keras.Model(inputs, outputs, name=name)


def discriminator_loss(real_logits, fake_logits):
    """BCE(D(real), 1) + BCE(D(fake), 0), each a batch mean (`nn.BCELoss` on the sigmoid)."""
    return tf.reduce_mean(tf.nn.softplus(-real_logits)) + tf.reduce_mean(
        tf.nn.softplus(fake_logits)
    )


def generator_loss(fake_logits):
    """The non-saturating loss BCE(D(G(z)), 1)."""
    return tf.reduce_mean(tf.nn.softplus(-fake_logits))


class RingGAN(keras.Model):
    """Generator and discriminator with the alternating train step; the Keras optimizer given to
    `compile` trains the generator, `d_optimizer` the discriminator.

    A batch is ``(real, discriminator noise, generator noise, unroll reals)``: the last is
    `[unroll_steps, b, 2]` (a real batch per unrolled update) or `[0, b, 2]` (every unrolled
    update reuses `real`)."""

    def __init__(
        self,
        generator,
        discriminator,
        d_optimizer,
        *,
        svmax_lambda,
        unroll_steps,
        unroll_gradient,
        unroll_adam_state="advance",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.generator, self.discriminator, self.d_optimizer = generator, discriminator, d_optimizer
        self.svmax_lambda, self.unroll_steps = svmax_lambda, unroll_steps or 0
        self.unroll_gradient, self.unroll_adam_state = unroll_gradient, unroll_adam_state
        self.trackers = [
            keras.metrics.Mean(name=name) for name in ("loss", "d_loss", "g_loss", "s_mu")
        ]

    @property
    def metrics(self):
        return self.trackers

    def call(self, noise, training=False):
        return self.generator(noise, training=training)

    def _unrolled_logits(self, reals, fake):
        """``(logits, adam_state)``: the discriminator's logits of `fake` after `unroll_steps`
        Adam updates from its current weights and optimizer state, update j on real batch
        ``reals[j]`` and on `fake` (held fixed for ``surrogate``), and the Adam ``(m, v, t)``
        those updates end with. The discriminator's variables are left untouched."""
        d = self.discriminator
        unroll_fake = tf.stop_gradient(fake) if self.unroll_gradient == "surrogate" else fake
        params = [x.value for x in d.trainable_variables]
        m, v, t = self.d_optimizer.state()
        for j in range(self.unroll_steps):
            with tf.GradientTape() as inner:
                inner.watch(params)
                loss = discriminator_loss(
                    d.stateless_call(params, [], reals[j])[0],
                    d.stateless_call(params, [], unroll_fake)[0],
                )
            grads = inner.gradient(loss, params)
            params, m, v, t = self.d_optimizer.update(params, grads, m, v, t)
        return d.stateless_call(params, [], fake)[0], (m, v, t)

    def train_step(self, batch):
        real, noise_d, noise_g, unroll_reals = batch
        d, g = self.discriminator, self.generator
        with tf.GradientTape() as tape:
            fake = tf.stop_gradient(g(noise_d, training=True))
            d_loss = discriminator_loss(d(real, training=True), d(fake, training=True))
        self.d_optimizer.apply(tape.gradient(d_loss, d.trainable_variables), d.trainable_variables)
        with tf.GradientTape() as tape:
            fake = g(noise_g, training=True)
            if self.unroll_steps:
                # A static shape: fresh batches, or the D step's batch for every update.
                reals = unroll_reals if unroll_reals.shape[0] else [real] * self.unroll_steps
                logits, unrolled_adam = self._unrolled_logits(reals, fake)
            else:
                logits = d(fake, training=True)
            g_loss = generator_loss(logits)
            s_mu = ops.mean_singular_value(fake)
            # A Python branch: lambda = 0 leaves the loss (and its gradient) untouched.
            total = g_loss - self.svmax_lambda * s_mu if self.svmax_lambda else g_loss
        grads = tape.gradient(total, g.trainable_variables)
        self.optimizer.apply(grads, g.trainable_variables)
        if self.unroll_steps and self.unroll_adam_state == "advance":
            self.d_optimizer.assign_state(*unrolled_adam)
        # The harness stops on a non-finite loss; a non-finite gradient (which would leave
        # non-finite weights behind a finite loss) is reported as one.
        loss = tf.where(
            tf.math.is_finite(tf.linalg.global_norm(grads)), d_loss + total, float("nan")
        )
        for tracker, value in zip(self.trackers, (loss, d_loss, g_loss, s_mu), strict=False):
            tracker.update_state(value)
        return {t.name: t.result() for t in self.trackers}


def build_gan(config):
    """The compiled `RingGAN` of a resolved config (weights seeded by ``config.seed``)."""
    keras.utils.set_random_seed(config.seed)
    seed = config.seed * 16
    generator = mlp(
        config.noise_dim, config.hidden_units, 2, config.generator_activation, seed, "generator"
    )
    discriminator = mlp(2, config.hidden_units, 1, "relu", seed + 8, "discriminator")
    # Adam for the discriminator with a functional update, so that unrolled updates start from
    # its true state (and, with unroll_adam_state="advance", are adopted).
    d_optimizer = FunctionalAdam(
        discriminator.trainable_variables,
        config.learning_rate,
        beta_1=ADAM_BETAS[0],
        beta_2=ADAM_BETAS[1],
        epsilon=ADAM_EPSILON,
        name="discriminator_adam",
    )
    gan = RingGAN(
        generator,
        discriminator,
        d_optimizer,
        svmax_lambda=config.svmax_lambda,
        unroll_steps=config.unroll_steps,
        unroll_gradient=config.unroll_gradient,
        unroll_adam_state=config.unroll_adam_state,
    )
    gan.compile(
        optimizer=keras.optimizers.Adam(
            config.learning_rate,
            beta_1=ADAM_BETAS[0],
            beta_2=ADAM_BETAS[1],
            epsilon=ADAM_EPSILON,
        ),
        jit_compile=False,  # nested tapes; and XLA gains nothing for these small products
    )
    return gan


# First seed component of the unrolled updates' real batches: a family of its own, so the three
# per-step draws (seeded (seed, 3 step + i)) are the same with and without fresh unroll batches.
UNROLL_SEED_OFFSET = 2**40


def batches(config, start_step):
    """``(real, discriminator noise, generator noise, unroll reals)`` per step, each drawn from
    a stateless seed (config.seed, step): a resumed run continues on the batches it would have
    seen. The unroll reals are `[unroll_steps, b, 2]` for ``unroll_real="fresh"``, else
    `[0, b, 2]`."""
    fresh = config.unroll_steps if config.unroll_real == "fresh" else 0
    weights = mixture_weights(config)

    def real_batch(seed):
        return data.gaussian_ring_batch(
            config.batch_size,
            seed,
            num_modes=config.num_modes,
            radius=config.mixture_radius,
            std=config.mixture_std,
            weights=weights,
        )

    def draw(step):
        seeds = [tf.stack([tf.constant(config.seed, tf.int64), 3 * step + i]) for i in range(3)]
        first = tf.constant(config.seed + UNROLL_SEED_OFFSET, tf.int64)
        unroll = [real_batch(tf.stack([first, fresh * step + j])) for j in range(fresh)]
        shape = [config.batch_size, config.noise_dim]
        return (
            real_batch(seeds[0]),
            tf.random.stateless_normal(shape, seeds[1]),
            tf.random.stateless_normal(shape, seeds[2]),
            tf.stack(unroll) if unroll else tf.zeros([0, config.batch_size, 2]),
        )

    return tf.data.Dataset.range(start_step, 2**62).map(draw).prefetch(2)


def evaluation_noise(config):
    """The fixed noise every evaluation feeds the generator (one seed per run)."""
    rng = np.random.default_rng([config.seed, 2**31])
    return rng.standard_normal((config.num_samples, config.noise_dim)).astype(np.float32)


def sample_path(output_dir, step):
    return os.path.join(output_dir, "samples", f"step_{step:06d}.npy")


def evaluate(config, gan, noise, centres, step):
    """Mode coverage and s_mu of the generator's points from `noise` (``{"metrics": modes
    covered, high-quality fraction, mode KL, s_mu, "info": finite, the mode count and the
    per-mode counts}``; only ``finite`` when a point is not); keeps the points."""
    points = gan.generator.predict(noise, batch_size=2048, verbose=0)
    path = sample_path(config.output_dir, step)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, points)
    finite = bool(np.isfinite(points).all())
    if not finite:
        return {"metrics": {}, "info": {"finite": finite}}
    coverage = metrics.mode_coverage(
        points, centres, config.mixture_std, weights=mixture_weights(config)
    )
    if not math.isfinite(coverage["mode_kl"]):
        # NaN: no high-quality point (the histogram is undefined); inf (points on a mode of
        # weight 0) cannot occur with the drawn weights, which are positive. JSON has neither.
        coverage["mode_kl"] = None
    # On the first batch_size points, so that it compares with the training batches' s_mu and
    # the recorded bounds (s_mu grows with sqrt(rows)).
    batch = points[: config.batch_size].astype(np.float64)
    return {
        "metrics": {
            "modes_covered": coverage["modes_covered"],
            "high_quality_fraction": coverage["high_quality_fraction"],
            "mode_kl": coverage["mode_kl"],
            "s_mu": float(np.linalg.svd(batch, compute_uv=False).mean()),
        },
        "info": {
            "finite": finite,
            "num_modes": coverage["num_modes"],
            "mode_counts": coverage["mode_counts"],
        },
    }


def describe(config):
    text = config.variant
    if config.variant == "unrolled":
        text += (
            f" ({config.unroll_steps} steps, gradient {config.unroll_gradient}, "
            f"{config.unroll_real} real batches, Adam state {config.unroll_adam_state})"
        )
    if config.svmax_lambda:
        text += f" + SVMax (λ {config.svmax_lambda:g})"
    return text


def draw_density(ax, points, bins=120):
    """A log-scaled 2-D histogram of `points` on the square of side 2 * PLOT_EXTENT (non-finite
    points left out), without ticks."""
    points = points[np.isfinite(points).all(axis=1)]
    edges = np.linspace(-PLOT_EXTENT, PLOT_EXTENT, bins + 1)
    hist, _, _ = np.histogram2d(points[:, 0], points[:, 1], bins=[edges, edges])
    extent = [-PLOT_EXTENT, PLOT_EXTENT, -PLOT_EXTENT, PLOT_EXTENT]
    ax.imshow(np.log1p(hist.T), origin="lower", cmap="Greens", extent=extent)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_run(results, directory, title):
    """``samples.png``: a 2-D histogram of the generated points at every evaluation (the last
    panel the target mixture); ``training.png``: losses and modes covered over steps."""
    plt = pyplot()
    config = results["config"]
    centres = np.asarray(results["mixture"]["centres"])
    steps = [e["step"] for e in results["evaluations"]]
    panels = [
        (f"step {s}", sample_path(config["output_dir"], s), e)
        for s, e in zip(steps, results["evaluations"], strict=False)
    ]
    panels = [p for p in panels if os.path.exists(p[1])]
    if panels:
        fig, axes = plt.subplots(1, len(panels) + 1, figsize=(2.0 * (len(panels) + 1), 2.4))
        for ax, (label, path, record) in zip(axes, panels, strict=False):
            draw_density(ax, np.load(path))
            covered = record.get("modes_covered")
            label += "" if covered is None else f"\n{covered}/{len(centres)} modes"
            ax.set_title(label, fontsize=8)
        truth, _ = data.sample_gaussian_ring(
            len(np.load(panels[-1][1])),
            seed=1,
            weights=results["mixture"].get("weights"),
            num_modes=len(centres),
            radius=config["mixture_radius"],
            std=config["mixture_std"],
        )
        draw_density(axes[-1], truth)
        axes[-1].set_title("target mixture", fontsize=8)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        save_figure(fig, os.path.join(directory, "samples.png"))
        plt.close(fig)
    trace = results["trace"]
    if not trace:
        return
    fig, (ax_loss, ax_modes) = plt.subplots(1, 2, figsize=(10, 3.6))
    for key in ("d_loss", "g_loss"):
        ax_loss.plot([t["step"] for t in trace], [t[key] for t in trace], label=key)
    ax_loss.set(xlabel="step", ylabel="loss (window mean)", title="Discriminator and generator")
    ax_loss.legend(fontsize=8)
    ax_modes.plot(
        steps, [e.get("modes_covered", np.nan) for e in results["evaluations"]], marker="o"
    )
    ax_modes.set(
        xlabel="step",
        ylabel=f"modes covered (of {len(centres)})",
        title="Mode coverage (VEEGAN: 3σ, ≥ 1 %)",
        ylim=(-0.3, len(centres) + 0.3),
    )
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, os.path.join(directory, "training.png"))
    plt.close(fig)


def train_gan_mog(config, *, callbacks=()):
    """Trains, evaluates every `eval_every` steps, resumes from `output_dir` if interrupted.

    Returns the results dict (also in ``output_dir/results.json``): ``status`` ``"completed"``
    or ``"diverged"``, the evaluations (``modes_covered``, ``high_quality_fraction``,
    ``mode_kl``, ``s_mu`` per step) and, at the top level, the final evaluation's metrics.

    Raises:
      ConfigError: a flag combination the experiment cannot run.
      RunRefused: `output_dir` in use, holding another configuration, or damaged.
    """
    started = time.perf_counter()
    config = resolve(config)
    gan = build_gan(config)
    centres = data.gaussian_ring(config.num_modes, config.mixture_radius)
    noise = evaluation_noise(config)
    lower, upper = svmax_bounds(config)
    weights = mixture_weights(config)
    title = (
        f"GAN on the ring of {config.num_modes} Gaussians: {describe(config)}, "
        f"{config.generator_activation} generator, lr {config.learning_rate:g}, seed {config.seed}"
        + ("" if weights is None else f", random mode weights (seed {config.mixture_seed})")
    )

    def save(folder):
        final = np.load(sample_path(config.output_dir, config.train_steps))
        np.save(os.path.join(folder, "samples.npy"), final)
        gan.generator.save(os.path.join(folder, "generator.keras"))

    job = Job(
        name="train_gan_mog",
        config=config,
        model=gan,
        schedule=lambda step: config.learning_rate,
        batches=lambda start_step: batches(config, start_step),
        global_batch=config.batch_size,
        evaluate=lambda step, epoch: evaluate(config, gan, noise, centres, step),
        plot=lambda results, folder: plot_run(results, folder, title),
        save=save,
        header={
            "mixture": {
                "centres": centres.tolist(),
                "std": config.mixture_std,
                "radius": config.mixture_radius,
                "num_modes": config.num_modes,
                # None: equal weights. Their std is the notebook's file-name `prior_std`.
                "weights": None if weights is None else weights.tolist(),
                "weights_std": 0.0 if weights is None else float(np.std(weights)),
            },
            "svmax_bounds": {
                "lower": lower,
                "upper": upper,
                "assumes": "rows of norm = mixture radius (the fake batch is not normalised)",
            },
        },
        description=(
            f"{describe(config)}, {config.generator_activation} generator, lr "
            f"{config.learning_rate:g}, batch {config.batch_size}, {config.train_steps} steps"
        ),
        state={"d_optimizer": gan.d_optimizer},
        callbacks=callbacks,
        summarize=final_numbers,
    )
    return run_job(job, GanConfig, started)


def final_numbers(results):
    """The last evaluation's mode counts, at the top of the record."""
    final = results["evaluations"][-1] if results["evaluations"] else {}
    return {key: final.get(key) for key in ("modes_covered", "high_quality_fraction", "mode_kl")}
