"""The contrastive pre-training run's configuration: its flags (`ContrastiveConfig`), their
checks and defaults (`resolve`) and the step the prior starts at."""

import dataclasses
import math

from trainers.harness import parts
from trainers.harness.config import (
    MIN_BACKBONE_FEATURES,
    ConfigError,
    check_dense_fits,
    check_fields,
    mark_resolved,
    resolve_cadence,
)
from trainers.harness.datasets import Dataset, records
from trainers.harness.flags import (
    fraction,
    non_negative_number,
    number_at_least,
    option,
    positive_int,
    positive_number,
)
from trainers.harness.lazy import library_args  # the library's validators and tables, no Keras

METHODS = ("lorac", "moco_m", "moco")


def _glyphs():
    """`tf_svmax.data.load_glyphs_open_set` with 32 images per class."""
    from tf_svmax import data  # when the data is read: the flags' checks import no Keras

    return data.load_glyphs_open_set(images_per_class=32)


def _digits():
    """`tf_svmax.data.load_digits_open_set()`."""
    from tf_svmax import data

    return data.load_digits_open_set()


# Embedded open-set splits, ``{"train": (images, labels), "test": (images, labels)}``: the
# training classes pre-train (`trainers.contrastive.train.load_split`), the others test.
DATASETS = records(
    Dataset(
        "glyphs",
        1000,
        "glyphs: the embedded rendered characters' open-set training half (142 classes x 32 "
        "images; 3/4 of each class pre-train and train the probe, 1/4 test it; the 143 other "
        "classes test open-set retrieval).",
        _glyphs,
    ),
    Dataset(
        "digits",
        400,
        "digits: scikit-learn's 8 x 8 digits 0-4 (5-9 for retrieval; tiny, fast).",
        _digits,
    ),
)


@dataclasses.dataclass(frozen=True)
class ContrastiveConfig(
    parts.eval_batch_part(512, "Batch size for evaluation."),
    parts.learning_rate_part(
        0.03, "SGD (momentum 0.9) learning rate, cosine decay to 0 (MoCo: 0.03)."
    ),
    parts.batch_size_part(64, "N: images per step (paper: 256)."),
    parts.hidden_units_part(256, "Projection head's hidden layer (MoCo v2: an MLP)."),
    parts.embedding_part(128, "C: the L2-normalised projection (paper: 128)."),
    parts.backbone_part(
        "small_cnn_bn",
        "Encoder backbone (before the projection head).",
        library_args.SMALL_BACKBONES,
    ),
    parts.dataset_part(
        DATASETS,
        " ".join(dataset.help for dataset in DATASETS.values())
        + " Labels are used by the evaluation only.",
    ),
    parts.run_part(
        "runs/contrastive", train_steps_help="Training steps (default: glyphs 1000, digits 400)."
    ),
):
    """One pre-training run. `None` fields take the method's default. Each field's help is its
    command-line flag's (`trainers/train_contrastive.py`)."""

    method: str = option(
        "lorac",
        "lorac: multi-query contrastive loss with the low-rank prior h(Q) (Eq. 12); moco_m: the "
        "same without the prior (beta = inf); moco: one query and one key (M = 2, beta = inf).",
        choices=METHODS,
    )
    views: int | None = option(
        None,
        "M: views per image, M - 1 queries and one key (default 4 for lorac and moco_m; moco "
        "is M = 2). The paper's Fig. 4b: accuracy rises with M up to about 6.",
        check=number_at_least(2, integer=True),  # at least one query and the key
    )
    prior: str = option(
        "laplace",
        "lorac's prior: laplace (Eq. 11, exp(-||Q||_* / (M beta tau))), gaussian "
        "(exp(-(||Q||_* - sqrt(5))^2 / (beta M tau))) or margin (||Q||_* replaced by 3).",
        choices=library_args.LORAC_PRIORS,
    )
    beta: float | None = option(
        None,
        "lorac's prior scale beta (paper: best 2; Gaussian sigma^2 = 2).",
        check=positive_number,
    )
    prior_start: float = option(
        0.5,
        "lorac: share of the steps trained with beta = inf before the prior is switched on "
        "(paper: the first half).",
        check=fraction,
    )
    temperature: float = option(0.2, "tau (paper: 0.2).", check=positive_number)
    queue_size: int = option(
        2048,
        "K negatives in the queue (paper: 65,536 for ImageNet-100's 126,689 images; here "
        "below the 3,408 pre-training images, so that the queue holds no stale copy of an "
        "image).",
        check=positive_int,
    )
    key_momentum: float = option(
        0.99,
        "Momentum m of the key encoder's EMA (paper: 0.999 over ~50,000 ImageNet-100 steps; "
        "here 0.99, the small-data MoCo setting: an EMA time constant of 1/(1 - m) = 1000 steps "
        "would span this run).",
        check=fraction,
    )
    weight_decay: float = option(1e-4, "SGD weight decay (paper: 1e-4).", check=non_negative_number)
    knn_k: int = option(10, "k of the k-NN accuracy (cosine, majority vote).", check=positive_int)
    test_views: int = option(
        32,
        "Augmented views per held-out image for the test nuclear norm (paper: 32).",
        check=positive_int,
    )


def resolve(config):
    """The config with every default filled in, checked; raises ConfigError naming flags."""
    c = config
    check_fields(c)
    check_dense_fits("--hidden_units", c.hidden_units, MIN_BACKBONE_FEATURES, "features")
    check_dense_fits("--embedding_dim", c.embedding_dim, c.hidden_units, "hidden units")
    if c.method != "lorac":
        set_flags = [
            flag
            for flag, is_set in (("--beta", c.beta is not None), ("--prior", c.prior != "laplace"))
            if is_set
        ]
        if set_flags:
            raise ConfigError(
                f"{', '.join(set_flags)} set the prior of --method=lorac; --method={c.method} "
                "has none (beta = inf). Leave them unset."
            )
    if c.method == "moco" and c.views not in (None, 2):
        raise ConfigError(
            f"--method=moco has M = 2 views (one query, one key); got --views={c.views}."
        )
    views = (2 if c.method == "moco" else 4) if c.views is None else c.views
    if c.queue_size < c.batch_size:
        raise ConfigError(
            f"--queue_size ({c.queue_size}) must hold at least one batch (--batch_size "
            f"{c.batch_size}): each step enqueues its keys."
        )
    return mark_resolved(
        dataclasses.replace(
            c,
            views=views,
            beta=(2.0 if c.beta is None else c.beta) if c.method == "lorac" else math.inf,
            **resolve_cadence(c, DATASETS[c.dataset].default_steps),
        )
    )


def prior_start_step(config):
    """The first step trained with the prior (never, for moco_m and moco)."""
    if config.method != "lorac":
        return config.train_steps
    return int(round(config.prior_start * config.train_steps))


def describe(config):
    """The method in a few words, for titles and the run's description."""
    if config.method == "lorac":
        return (
            f"LORAC ({config.prior} prior, β {config.beta:g} from step "
            f"{prior_start_step(config)}, M {config.views})"
        )
    return f"MoCo-M (M {config.views})" if config.method == "moco_m" else "MoCo (M 2)"
