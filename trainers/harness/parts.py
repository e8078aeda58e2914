"""Shared config parts: each field several trainers' configs hold is declared once, here, and a
trainer's config inherits the parts it needs (a frozen dataclass subclassing them). A factory
makes a part with what differs per trainer (defaults, help texts, choices, the P check); the
option's kind, checks and identity are the part's.

    @dataclasses.dataclass(frozen=True)
    class Config(parts.learning_rate_part(0.1, "SGD rate."), parts.run_part("runs/x")):
        own_field: int = option(3, "Its own.")

Field order follows the inheritance: the last base's fields first (`dataclasses` walks the
bases in reverse method resolution order), the class's own fields last. `run_part` comes
last: its `output_dir` has no default (a library caller names the folder), and a field
without a default cannot follow one with a default.
"""

import dataclasses

from trainers.harness.config import output_dir_option, verbose_option
from trainers.harness.flags import (
    non_negative_number,
    number_at_least,
    option,
    positive_int,
    positive_number,
    random_seed,
)
from trainers.harness.lazy import library_args  # the library's validators and tables, no Keras

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


def _part(name, *fields, bases=()):
    """A frozen dataclass named `name` with `fields`, ``(field name, type, option)`` each."""
    return dataclasses.make_dataclass(name, list(fields), bases=bases, frozen=True)


def dataset_part(datasets, help):  # noqa: A002
    """`dataset`: one of `datasets` (the trainer's `trainers.harness.datasets.records`),
    glyphs by default."""
    return _part("DatasetPart", ("dataset", str, option("glyphs", help, choices=tuple(datasets))))


def backbone_part(default, help, choices):  # noqa: A002
    """`backbone`: the network a trainer trains, one of `choices`."""
    return _part("BackbonePart", ("backbone", str, option(default, help, choices=choices)))


def embedding_part(default, help):  # noqa: A002
    """`embedding_dim`: the size of the L2-normalised embedding (or projection)."""
    return _part("EmbeddingPart", ("embedding_dim", int, option(default, help, check=positive_int)))


def learning_rate_part(default, help):  # noqa: A002
    """`learning_rate`: the optimizer's (initial) rate."""
    return _part(
        "LearningRatePart",
        ("learning_rate", float, option(default, help, check=positive_number)),
    )


def batch_size_part(default, help):  # noqa: A002
    """`batch_size`: examples per training step."""
    return _part("BatchSizePart", ("batch_size", int, option(default, help, check=positive_int)))


def hidden_units_part(default, help):  # noqa: A002
    """`hidden_units`: the units of a trainer's hidden layers."""
    return _part(
        "HiddenUnitsPart", ("hidden_units", int, option(default, help, check=positive_int))
    )


def svmax_part(default, help):  # noqa: A002
    """`svmax_lambda`: the SVMax term's weight (``None``: the experiment's resolve fills it)."""
    return _part(
        "SvmaxPart",
        ("svmax_lambda", float | None, option(default, help, check=non_negative_number)),
    )


def margin_part(help):  # noqa: A002
    """`margin`: a ranking loss's margin (``None``: the experiment's resolve fills it)."""
    return _part(
        "MarginPart", ("margin", float | None, option(None, help, check=non_negative_number))
    )


def pk_batch_part(batch_p, batch_p_help, batch_k, batch_k_help, *, batch_p_check):
    """`batch_p` and `batch_k`: the P classes x K images of a P x K batch (``None``: the
    experiment's resolve fills them). `batch_p_check`: the validator of P (at least 2 classes
    where every loss needs negatives); K is at least 2 (positives per class)."""
    return _part(
        "PKBatchPart",
        ("batch_p", int | None, option(batch_p, batch_p_help, check=batch_p_check)),
        (
            "batch_k",
            int | None,
            option(batch_k, batch_k_help, check=number_at_least(2, integer=True)),
        ),
    )


def jit_compile_part(help):  # noqa: A002
    """`jit_compile`: whether the train step is XLA-compiled (`resolve_image_run` reads it)."""
    return _part("JitCompilePart", ("jit_compile", bool, option(False, help)))


def eval_batch_part(default, help):  # noqa: A002
    """`eval_batch_size`: how many examples an evaluation embeds (or predicts) at once; it
    does not change the results, so a changed value resumes the run."""
    return _part(
        "EvalBatchPart",
        ("eval_batch_size", int, option(default, help, identity=False, check=positive_int)),
    )


def retrieval_evaluation_part(
    *, recall_ks, recall_ks_help, kmeans_init_help, eval_batch_size, eval_batch_size_help
):
    """The retrieval evaluation's fields (`tf_svmax` Recall@K, NMI's k-means): `recall_ks`,
    `kmeans_init`, `kmeans_max_iter`, and `eval_batch_part`'s `eval_batch_size`."""
    return _part(
        "RetrievalEvaluationPart",
        ("recall_ks", tuple[int, ...], option(recall_ks, recall_ks_help, check=positive_int)),
        (
            "kmeans_init",
            str,
            option("k-means++", kmeans_init_help, choices=library_args.KMEANS_INITS),
        ),
        ("kmeans_max_iter", int, option(300, "NMI k-means iterations.", check=positive_int)),
        bases=(eval_batch_part(eval_batch_size, eval_batch_size_help),),
    )
