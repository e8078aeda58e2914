"""The two-head experiment's configuration: its flags (`TwoHeadConfig`; the papers' settings
per mode are its mode records', `trainers.two_head.modes`), and `resolve`, which checks a
config and fills in every default.

Dissertation `001` Sec. 5.3-5.4: a backbone whose pooled last map feeds the softmax head and
whose unpooled map feeds an L2-normalised embedding head trained with a ranking loss (λ = 1;
center loss λ = 0.003, α = 0.5; semi-hard margin 0.2; batch-hard with the softplus margin;
squared Euclidean distance), P x K batches with K = 4 (b = 32), SGD momentum 0.9 and a
polynomially decaying learning rate from 0.01. Also softmax + OLÉ on the pooled features (OLÉ
paper `002`, Eq. 11, λ = 0.25, Δ = 1) and SVMax on the embedding head as an extra term.
"""

import dataclasses

import numpy as np

from trainers.harness import parts
from trainers.harness.config import (
    MIN_BACKBONE_FEATURES,
    ConfigError,
    ImageDataConfig,
    check_dense_fits,
    mark_resolved,
    resolve_image_run,
)
from trainers.harness.datasets import Dataset, embedded_names, file_names, records
from trainers.harness.flags import (
    non_negative_number,
    number_at_least,
    open_fraction,
    option,
    positive_int,
    rate,
)
from trainers.harness.lazy import library_args  # the library's validators and tables, no Keras
from trainers.two_head.modes import RECORDS

MODES = tuple(RECORDS)  # the --mode choices: `trainers.two_head.modes`' records
# The modes whose term acts on the embedding head (the others train the single-head network).
TWO_HEAD_MODES = tuple(name for name, mode in RECORDS.items() if mode.embedding_head)


def _glyph_classes():
    """The glyph set's 142 training classes with 64 renderings each (generated once, then
    cached): the open-set test half stays unseen, for novel-class experiments."""
    from tf_svmax import data  # when the data is read: the flags' checks import no Keras

    split = data.load_glyphs_open_set(images_per_class=64)
    return split["train"][0], split["train"][1], split["characters"]


def _digit_classes():
    from tf_svmax import data

    split = data.load_digits_open_set()
    images = np.concatenate([split["train"][0], split["test"][0]])
    return images, np.concatenate([split["train"][1], split["test"][1]]), None


# Embedded sets load as classification sets, ``(images, labels, class names or None)``, each
# class's images split into train and test (`trainers.two_head.inputs`); fgvr and folder are
# read from --data_dir.
DATASETS = records(
    Dataset(
        "glyphs",
        3000,
        "glyphs: embedded rendered characters, the open-set training half (142 classes, 64 "
        "images each; no download)",
        _glyph_classes,
    ),
    Dataset(
        "digits",
        1000,
        "digits: scikit-learn's 8 x 8 digits, 10 classes (tiny, fast)",
        _digit_classes,
    ),
    Dataset(
        "fgvr",
        40000,
        "fgvr: the FGVR list files (lists/train_all_sub_list.csv, lists/test_all_sub_list.csv) "
        "under --data_dir",
    ),
    Dataset(
        "folder",
        40000,
        "folder: --data_dir/train/<class>/<image> and --data_dir/test/<class>/<image>",
    ),
)
# Images of each class held out for testing in the embedded sets (a fixed split: data seed 0).
DATA_SEED = 0


@dataclasses.dataclass(frozen=True)
class TwoHeadConfig(
    parts.retrieval_evaluation_part(
        recall_ks=(1, 4, 8, 16),
        recall_ks_help="K of Recall@K (paper: 1, 4, 8, 16).",
        kmeans_init_help="NMI k-means seeding.",
        eval_batch_size=256,
        eval_batch_size_help="Batch size for evaluation.",
    ),
    parts.jit_compile_part(
        "XLA-compile the train step (slow with SVD on CPU). On JAX the step is compiled either "
        "way; on PyTorch this is torch.compile."
    ),
    parts.pk_batch_part(
        8,
        "Classes per batch P (paper: b = 32 = 8 x 4).",
        4,
        "Images per class K (paper: 4).",
        batch_p_check=positive_int,
    ),
    parts.margin_part(
        "Semi-hard triplet margin (--mode=semi_hard only; default: the paper's 0.2)."
    ),
    parts.svmax_part(
        0.0,
        "Weight of SVMax (bounded, on the embedding head) added to any mode; 0: none. With "
        "softmax or ole it adds the embedding head.",
    ),
    parts.learning_rate_part(
        0.01,
        "SGD (momentum 0.9) learning rate, decayed linearly to 1e-4 over --train_steps "
        "(paper: 0.01, polynomial decay; TensorFlow's polynomial_decay defaults).",
    ),
    parts.embedding_part(256, "Embedding head size, L2-normalised (paper: 256)."),
    parts.backbone_part(
        "small_cnn_bn",
        "Backbone; the dissertation uses ResNet-50, Inception-V4 and DenseNet-161 (ImageNet "
        "weights). small_cnn_bn: three convolutions with batch normalization (the embedded "
        "sets' default; without it a softmax head barely moves at lr 0.01).",
        library_args.BACKBONES,
    ),
    parts.dataset_part(
        DATASETS,
        "; ".join(DATASETS[name].help for name in embedded_names(DATASETS))
        + "; both split each class's images into train and test (--test_fraction). "
        + "; ".join(DATASETS[name].help for name in file_names(DATASETS))
        + ".",
    ),
    ImageDataConfig,
    parts.run_part(
        "runs/two_head",
        train_steps_help="Training steps (paper: 40000 ResNet-50/DenseNet-161, 80000 "
        "Inception-V4; default glyphs 3000, digits 1000, fgvr and folder 40000).",
    ),
):
    """One two-head run. `None` fields take the paper's (or the dataset's) default. Each field's
    help is its command-line flag's (`trainers/train_two_head.py`)."""

    image_dir: str = option(
        "",
        "fgvr: the images' folder relative to --data_dir (Flowers-102: jpg; Aircraft: "
        "fgvc-aircraft-2013b/data/images; Stanford Cars: empty).",
    )
    mode: str = option(
        "hard",
        "softmax: single-head baseline; center, semi_hard, hard: two-head with that term on the "
        "embedding head (center loss; semi-hard triplet, margin --margin; batch-hard triplet "
        "with the softplus margin); ole: single head, softmax + OLÉ on the pooled features.",
        choices=MODES,
    )
    regularizer_lambda: float | None = option(
        None,
        "Weight of the mode's term (paper: 1 semi_hard and hard, 0.003 center, 0.25 ole).",
        check=non_negative_number,
    )
    center_alpha: float | None = option(
        None,
        "Center-loss center update rate in (0, 1] (--mode=center only; default: the paper's 0.5).",
        check=rate,
    )
    test_fraction: float = option(
        0.25,
        "Embedded sets: share of each class's images held out for testing.",
        check=open_fraction,
    )
    train_images_per_class: int | None = option(
        None,
        "At most this many training images per class (scarce-data protocol); unset: all.",
        check=positive_int,
    )
    imbalance_ratio: float = option(
        1.0,
        "Long-tailed data: the class at rank r (seeded order) of C keeps a share "
        "ratio^(-r/(C-1)) of its train and test images (head 1, tail 1/ratio; at least 2 train "
        "and 1 test image); 1: balanced.",
        check=number_at_least(1.0),
    )


def resolve(config):
    """The config with every default filled in, checked; raises ConfigError naming flags.
    Reads no data: a run resolves its config once, first, and checks P against the classes
    of its split when it reads it (`trainers.two_head.inputs.check_classes`)."""
    c = config
    shared = resolve_image_run(c, DATASETS)  # the harness' checks
    check_dense_fits("--embedding_dim", c.embedding_dim, MIN_BACKBONE_FEATURES, "features")
    mode = RECORDS[c.mode]
    if mode.paper_lambda is None and c.regularizer_lambda not in (None, 0.0):
        raise ConfigError(
            f"--mode={c.mode} has no regularizer term; --regularizer_lambda="
            f"{c.regularizer_lambda} would be ignored. Leave it unset (or use --svmax_lambda)."
        )
    for owner in RECORDS.values():  # a mode's own flags (margin, center_alpha)
        for name, _ in owner.flags:
            if getattr(c, name) is not None and c.mode != owner.name:
                raise ConfigError(
                    f"--{name} applies to --mode={owner.name} only; with --mode={c.mode} it "
                    "would be ignored. Leave it unset."
                )
    if c.jit_compile and mode.not_compiled:
        raise ConfigError(
            f"--mode={c.mode} cannot be XLA-compiled ({mode.not_compiled}); leave --jit_compile "
            "unset."
        )
    if c.batch_p < 2 and mode.needs_negatives:
        raise ConfigError(
            library_args.invalid(
                "--batch_p", f"an int >= 2 with --mode={c.mode} (negatives)", c.batch_p
            )
        )
    return mark_resolved(
        dataclasses.replace(
            c,
            **shared,
            regularizer_lambda=(
                (mode.paper_lambda or 0.0) if c.regularizer_lambda is None else c.regularizer_lambda
            ),
            **{name: paper for name, paper in mode.flags if getattr(c, name) is None},
            recall_ks=tuple(int(k) for k in c.recall_ks),
        )
    )


def has_embedding_head(config):
    return RECORDS[config.mode].embedding_head or config.svmax_lambda > 0
