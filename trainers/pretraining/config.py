"""The pretraining run's configuration: its flags (`PretrainConfig`) and their checks and
defaults (`resolve`)."""

import dataclasses

from trainers.harness import parts
from trainers.harness.config import (
    ConfigError,
    check_fields,
    check_fits_in_memory,
    mark_resolved,
    resolve_cadence,
)
from trainers.harness.flags import option, positive_int
from trainers.harness.lazy import library_args  # the library's validators and tables, no Keras

DEFAULT_STEPS = 3000
# A lower bound of the pretraining source's classes for the memory check, known before the
# classes are chosen (tens of seconds): "over a thousand" (docs/glyphs_pretraining.md; 1311
# with the fonts the docs were measured with).
MIN_CLASSES = 1000
IMAGE_SIZE = 32  # the side `data.load_glyph_pretraining` renders at by default


@dataclasses.dataclass(frozen=True)
class PretrainConfig(
    parts.eval_batch_part(512, "Batch size for the held-out predictions."),
    parts.learning_rate_part(
        0.05, "SGD (momentum 0.9) rate: constant for half the steps, then linear to 1e-7."
    ),
    parts.batch_size_part(256, "Images per training batch."),
    parts.backbone_part(
        "small_cnn_bn",
        "Backbone to pretrain (its weights file loads into train_retrieval / train_two_head "
        "--backbone=<the same> --weights=<output_dir>/backbone.weights.h5).",
        library_args.SMALL_BACKBONES,
    ),
    parts.run_part(
        "runs/pretrain_glyphs", train_steps_help=f"Training steps (default {DEFAULT_STEPS})."
    ),
):
    """The pretraining run: backbone, data, optimisation (the run fields:
    `trainers.harness.parts.run_part`)."""

    images_per_class: int = option(
        40,
        "Images rendered per pretraining class (training + held out); refused when the "
        "rendered set cannot fit in this machine's memory.",
        check=positive_int,
    )
    held_out_per_class: int = option(
        4, "Of those, held out per class for the top-1 / top-5 evaluation.", check=positive_int
    )


def resolve(config):
    """The config with every default filled in, checked; raises ConfigError naming flags."""
    check_fields(config)
    if config.held_out_per_class >= config.images_per_class:
        raise ConfigError(
            f"--held_out_per_class ({config.held_out_per_class}) must be below "
            f"--images_per_class ({config.images_per_class}): a class needs training images."
        )
    # The rendered set is float32 images of 32 x 32 px (`data.load_glyph_pretraining`).
    check_fits_in_memory(
        MIN_CLASSES * config.images_per_class * IMAGE_SIZE**2 * 4,
        f"--images_per_class={config.images_per_class} (the rendered set: over {MIN_CLASSES:,} "
        f"classes x {config.images_per_class:,} images of {IMAGE_SIZE} x {IMAGE_SIZE} float32)",
    )
    return mark_resolved(dataclasses.replace(config, **resolve_cadence(config, DEFAULT_STEPS)))
