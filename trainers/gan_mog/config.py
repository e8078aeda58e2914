"""The GAN run's configuration: its flags (`GanConfig`), their checks and defaults (`resolve`),
the mixture's mode weights and the s_mu bounds its fake batches are compared with."""

import dataclasses

from trainers.harness import parts
from trainers.harness.config import (
    ConfigError,
    check_dense_fits,
    check_fields,
    mark_resolved,
    resolve_cadence,
)
from trainers.harness.flags import (
    non_negative_int,
    option,
    positive_int,
    positive_number,
)

VARIANTS = ("vanilla", "unrolled")
UNROLL_GRADIENTS = ("surrogate", "through")
UNROLL_REAL = ("fresh", "reused")
UNROLL_ADAM_STATE = ("advance", "copy")
MIXTURES = ("uniform", "random")
ACTIVATIONS = ("tanh", "relu")
PAPER_SVMAX_LAMBDA = 0.01
PAPER_UNROLL_STEPS = 5  # the paper's text; the notebook's `unrolled_steps` is 10
NOTEBOOK_UNROLL_STEPS = 10


@dataclasses.dataclass(frozen=True)
class GanConfig(
    parts.hidden_units_part(128, "Units of each hidden layer (paper: 128)."),
    parts.batch_size_part(512, "Real and fake points per batch (paper: 512)."),
    parts.learning_rate_part(
        0.025,
        "Adam learning rate of both networks (paper: 0.025, the change that induces collapse; "
        "the original code: 1e-4 discriminator, 1e-3 generator).",
    ),
    parts.svmax_part(
        0.0,
        "SVMax weight on the generator's fake batch, L_G - lambda * s_mu (paper: "
        f"{PAPER_SVMAX_LAMBDA}); 0: off (exactly the run without SVMax).",
    ),
    parts.run_part(
        "runs/gan_mog",
        train_steps=3000,
        train_steps_help="Training iterations (paper: 3000).",
        eval_every=300,
        eval_every_help="Steps between evaluations, sample snapshots and checkpoints (the "
        "original plots every 300).",
        trace_every_help="Steps per point of the loss trace (default: eval_every / 10).",
    ),
):
    """One GAN run; each field's help is its command-line flag's (`trainers/train_gan_mog.py`)."""

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
    generator_activation: str = option(
        "tanh", "Generator hidden activation (the original code: tanh).", choices=ACTIVATIONS
    )
    noise_dim: int = option(256, "Generator input size (paper: 256).", check=positive_int)
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
    num_samples: int = option(
        2500, "Generated points per evaluation (VEEGAN: 2,500).", check=positive_int
    )


def resolve(config):
    """The config with defaults filled in, checked; raises ConfigError naming the flags."""
    c = config
    check_fields(c)
    check_dense_fits("--hidden_units", c.hidden_units, c.hidden_units, "hidden units")
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
    cadence = resolve_cadence(c, c.train_steps)  # refuses steps not a multiple of eval_every
    if c.trace_every is None:  # ten trace points per evaluation interval (the harness: 20)
        cadence["trace_every"] = max(1, c.eval_every // 10)
    unrolled = c.variant == "unrolled"
    return mark_resolved(
        dataclasses.replace(
            c,
            unroll_steps=(c.unroll_steps or PAPER_UNROLL_STEPS) if unrolled else None,
            unroll_gradient=(c.unroll_gradient or "surrogate") if unrolled else None,
            unroll_real=(c.unroll_real or "fresh") if unrolled else None,
            unroll_adam_state=(c.unroll_adam_state or "advance") if unrolled else None,
            **cadence,
        )
    )


def mixture_weights(config):
    """The mode weights of a config's mixture (float64, sum 1), or None for equal weights."""
    if config.mixture == "uniform":
        return None
    from tf_svmax import data  # a run's: the flags' checks import no Keras

    return data.random_mode_weights(config.num_modes, seed=config.mixture_seed)


def svmax_bounds(config):
    """``(L, U)`` of s_mu for a `batch_size x 2` batch whose rows have the ring's radius."""
    from tf_svmax import ops

    lower, upper = ops.svmax_bounds(config.batch_size, 2)
    return config.mixture_radius * lower, config.mixture_radius * upper


def describe(config):
    """The variant and the SVMax weight in a few words, for titles and the run's description."""
    text = config.variant
    if config.variant == "unrolled":
        text += (
            f" ({config.unroll_steps} steps, gradient {config.unroll_gradient}, "
            f"{config.unroll_real} real batches, Adam state {config.unroll_adam_state})"
        )
    if config.svmax_lambda:
        text += f" + SVMax (λ {config.svmax_lambda:g})"
    return text
