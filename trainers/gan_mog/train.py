"""The GAN on the ring, top to bottom: the resolved config, the batches per step, the
`RingGAN`, the evaluation and the harness's run."""

import os
import time

import numpy as np
import tensorflow as tf

from tf_svmax import data
from trainers.gan_mog.config import describe, mixture_weights, resolve, svmax_bounds
from trainers.gan_mog.evaluate import evaluate, evaluation_noise, final_numbers, sample_path
from trainers.gan_mog.model import build_gan
from trainers.gan_mog.plots import plot_run
from trainers.harness import runtime
from trainers.harness.config import resolved
from trainers.harness.loop import Job, run_job

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
    config = resolved(config, resolve)
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
        distribution=runtime.default_distribution(gan),
        global_batch=config.batch_size,
        evaluate=lambda step, epoch: evaluate(config, gan, noise, centres, step),
        plot=lambda results, folder: plot_run(results, folder, title),
        save_models=save,
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
    return run_job(job, started)
