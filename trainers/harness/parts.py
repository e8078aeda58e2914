"""Shared config parts: each field several trainers' configs hold is declared once, here, and a
trainer's config inherits the parts it needs (a frozen dataclass subclassing them). A factory
makes a part with what differs per trainer (a default, a help text, the choices); the
option's kind, checks and identity are the part's.

    @dataclasses.dataclass(frozen=True)
    class Config(parts.run_part("runs/x"), parts.learning_rate_part(0.1, "SGD rate.")):
        own_field: int = option(3, "Its own.")

Field order follows the inheritance: the last base's fields first (`dataclasses` walks the
bases in reverse method resolution order), the class's own fields last.
"""

import dataclasses

from trainers.harness.config import output_dir_option, verbose_option
from trainers.harness.flags import option, positive_int, random_seed

TRAIN_STEPS_HELP = "Training steps (default: the experiment's, see its docs)."
EVAL_EVERY_HELP = "Steps between evaluations and checkpoints (default: train_steps / 4)."
TRACE_EVERY_HELP = "Steps per point of the loss trace (default: eval_every / 20)."


def run_part(
    output_dir,
    *,
    train_steps=None,
    train_steps_help=TRAIN_STEPS_HELP,
    eval_every=None,
    eval_every_help=EVAL_EVERY_HELP,
    trace_every_help=TRACE_EVERY_HELP,
):
    """The fields of every run the harness trains (`trainers.harness.loop.run_job` reads
    them): `output_dir` (its command-line default), the cadence (``None``: filled by the
    experiment's ``resolve``, `trainers.harness.config.resolve_cadence`), the seed and the
    verbosity."""

    # Made before the class: a class body that assigns a name does not see the function's.
    folder = output_dir_option(output_dir)
    steps = option(train_steps, train_steps_help, check=positive_int)
    interval = option(eval_every, eval_every_help, check=positive_int)

    @dataclasses.dataclass(frozen=True)
    class RunPart:
        output_dir: str = folder
        train_steps: int | None = steps
        eval_every: int | None = interval
        trace_every: int | None = option(None, trace_every_help, check=positive_int)
        evaluate_untrained: bool = option(True, "Also evaluate before the first step (step 0).")
        seed: int = option(
            0,
            "Seed of the run: the initial weights, the batches and every other random draw.",
            check=random_seed,
        )
        verbose: int = verbose_option()

    return RunPart
