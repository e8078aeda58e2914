"""The retrieval experiment's configuration: its flags (`RetrievalConfig`) and `resolve`, which
checks a config and fills in every default (per loss from its record in
`trainers.retrieval.ranking`): a run takes it in two steps, `resolve_before_data` (every field
but --batch_p, every refusal that needs no data) and, once its split is read,
`with_training_classes` (P against the training classes).

SVMax paper Sec. 4.1 (dissertation Sec. 3.4.1): an embedding network trained on P x K batches
with a ranking loss and optionally a regularizer, SGD with momentum 0.9, the learning rate fixed
for K/2 steps then decayed polynomially to 1e-7 at step K (--momentum and --lr_schedule=constant
give the plain constant-rate SGD of the paper's MNIST circle figure), evaluated on the test
classes with Recall@K, NMI and MAP@R, plus the test embedding's s_mu with its bounds.
"""

import dataclasses

from trainers.harness import parts
from trainers.harness.config import (
    MIN_BACKBONE_FEATURES,
    ConfigError,
    ImageDataConfig,
    check_dense_fits,
    check_fits_in_memory,
    mark_resolved,
    resolve_image_run,
)
from trainers.harness.datasets import Dataset, embedded_names, file_names, records
from trainers.harness.flags import (
    fraction,
    non_negative_int,
    non_negative_number,
    number_at_least,
    option,
    positive_int,
)
from trainers.harness.lazy import library_args  # the library's validators and tables, no Keras
from trainers.retrieval.options import LR_SCHEDULES, REGULARIZERS, choice_option
from trainers.retrieval.ranking import RANKING, RANKING_LOSSES, number, per_loss

LOSSES = tuple(RANKING)
# The --loss values whose mining takes a separate reference set (`losses.CrossBatchMemory`).
XBM_LOSSES = tuple(loss.name for loss in RANKING_LOSSES if loss.cross_batch_memory)


def _digits_closed():
    """All 10 digits in both splits (1,437 train / 360 test), resized to MNIST's 28 x 28: the
    stand-in for MNIST in the SVMax paper's circle figure (a closed-set protocol)."""
    from tf_svmax import data  # when the data is read: the flags' checks import no Keras

    return data.load_digits_closed_set(image_size=28)


def _glyphs():
    """`tf_svmax.data.load_glyphs_open_set()`."""
    from tf_svmax import data

    return data.load_glyphs_open_set()


def _digits():
    """`tf_svmax.data.load_digits_open_set()`."""
    from tf_svmax import data

    return data.load_digits_open_set()


# The embedded sets load as ``{"train": (images, labels), "test": (images, labels)}``; the
# others are read from --data_dir in their official layout (`tf_svmax.data.read_dataset`).
# K = 5,000 steps for CUB-200 and CARS196, 20,000 for SOP; the embedded sets' defaults take
# minutes.
DATASETS = records(
    Dataset(
        "glyphs",
        3000,
        "glyphs: embedded rendered characters, 285 classes (first half train, second half "
        "test; no download).",
        _glyphs,
    ),
    Dataset(
        "digits",
        2000,
        "digits: scikit-learn's 8 x 8 digits, train 0-4 / test 5-9 (tiny, fast).",
        _digits,
    ),
    Dataset(
        "digits_closed",
        2000,
        "digits_closed: the same digits at 28 x 28, all 10 classes in both splits (1,437 "
        "train / 360 test; the MNIST stand-in of the circle figure).",
        _digits_closed,
    ),
    Dataset("cub200", 5000),
    Dataset("cars196", 5000),
    Dataset("sop", 20000),
    Dataset("folder", 5000),
)


def _momentum(value, name):
    """A momentum in [0, 1): at 1 or above the velocity never decays (the steps grow without
    bound)."""
    if not library_args.check_non_negative_number(value, name) < 1:
        raise ValueError(library_args.invalid(name, "a float in [0, 1)", value))
    return float(value)


@dataclasses.dataclass(frozen=True)
class RetrievalConfig(
    parts.retrieval_evaluation_part(
        recall_ks=(1, 2, 4, 8),
        recall_ks_help="K of Recall@K (SOP papers: 1,10,100,1000).",
        kmeans_init_help="NMI k-means seeding: greedy k-means++ (an SOP-sized evaluation takes "
        "~35 s on 2 idle cores), k-means++-sklearn (the same algorithm on scikit-learn's random "
        "stream, ~8x the seeding time) or random (faster, lower NMI: 0.88 vs 0.92 on an "
        "SOP-shaped set).",
        eval_batch_size=128,
        eval_batch_size_help="Batch size for embedding the test split.",
    ),
    parts.jit_compile_part(
        "XLA-compile the train step (SVMax then uses its Newton-Schulz path, ~1.8x its non-XLA "
        "cost on CPU). On JAX the step is compiled either way; on PyTorch this is torch.compile."
    ),
    parts.pk_batch_part(
        None,
        f"Classes per batch P (default per --loss: {per_loss('batch_p')}; capped at the "
        "training classes when unset).",
        None,
        f"Images per class K (default per --loss: {per_loss('batch_k')}).",
        batch_p_check=number_at_least(2, integer=True),
    ),
    parts.margin_part(
        f"Margin (default per --loss: {per_loss('margin', number)}; none for "
        f"{', '.join(x.label for x in RANKING_LOSSES if x.margin is None)}; "
        + "; ".join(f"{x.label}: {x.margin_help}" for x in RANKING_LOSSES if x.margin_help)
        + ")."
    ),
    parts.svmax_part(
        None, f"SVMax weight (default per --loss: {per_loss('svmax_lambda', number)})."
    ),
    parts.learning_rate_part(
        0.01,
        "SGD learning rate; with --lr_schedule=paper fixed for train_steps/2 then decayed "
        "polynomially to 1e-7 (paper: 0.01, 0.001, 0.0001).",
    ),
    parts.embedding_part(128, "Embedding size, L2-normalised (paper: 128)."),
    parts.backbone_part(
        "small_cnn",
        "Embedding network; the papers use GoogLeNet and ResNet50 (ImageNet weights); mnist_toy "
        "is the SVMax circle figure's MNIST network (random weights only).",
        library_args.BACKBONES,
    ),
    parts.dataset_part(
        DATASETS,
        " ".join(DATASETS[name].help for name in embedded_names(DATASETS))
        + f" {', '.join(file_names(DATASETS))} read --data_dir in the official layout.",
    ),
    ImageDataConfig,
    parts.run_part(
        "runs/retrieval",
        train_steps_help="Training steps K (paper: 5000 CUB/CARS, 20000 SOP; default glyphs: "
        "3000, digits and digits_closed: 2000).",
        trace_every_help="Steps per point of the loss / s_mu / learning-rate trace in "
        "results.json and training.png (default: eval_every / 20).",
    ),
):
    """One retrieval run. `None` fields take the paper's (or the dataset's) default. Each
    field's help is its command-line flag's (`trainers/train_retrieval.py`)."""

    decoded_cache: bool = option(
        False,
        "Decode and resize the training images once into memory (uint8, resize^2 x 3 bytes "
        "each: 1.15 GB for CUB-200's 5,864 at 256; twice that while building), then only crop "
        "and flip per batch. Pixels are the rounded resized ones (within 0.5 of the uncached "
        "pipeline's); decoding is most of the input pipeline's cost "
        "(benchmarks/input_pipeline.py). File datasets only.",
    )
    loss: str = option(
        "contrastive",
        " ".join(["Ranking loss."] + [loss.help for loss in RANKING_LOSSES if loss.help]),
        choices=LOSSES,
    )
    regularizer: str = choice_option(REGULARIZERS, "svmax")
    spread_out_alpha: float = option(
        1.0, "Spread-out weight (paper: 1).", check=non_negative_number
    )
    xml_lambda: float = option(
        0.0,
        "Weight lambda of XML's cross-batch term (seed 004, Eq. 2.11; paper: 0.01): "
        "(1 - lambda) loss(Y) + lambda sum_k loss(Y_hat_k), where prototypes fitted in closed "
        "form to one half of the batch (disjoint classes) predict the other half's embeddings "
        "from its prototype histograms of the last convolutional map. 0: off. Small backbones.",
        check=fraction,
    )
    xml_prototypes: int | None = option(
        None,
        "XML's prototypes m (paper: 64 CUB/CARS, 128 SOP/InShop; default 64). Needs "
        "--xml_lambda > 0.",
        check=positive_int,
    )
    xbm_size: int = option(
        0,
        "Cross-batch memory (XBM, Wang et al. CVPR 2020) rows M: the ranking loss mines the "
        "batch's anchors against the batch plus the last M training embeddings (global batch, "
        "no gradient into them), normalized over the batch's anchors. 0: off. Losses "
        f"{', '.join(XBM_LOSSES)}. A size whose memory cannot fit in this machine's memory is "
        "refused.",
        check=non_negative_int,
    )
    xbm_start_step: int = option(
        0,
        "Training steps before the cross-batch memory is used (XBM's warm-up; paper: 1000 on "
        "SOP). Needs --xbm_size > 0.",
        check=non_negative_int,
    )
    lr_schedule: str = choice_option(LR_SCHEDULES, "paper")
    momentum: float = option(
        0.9,
        "SGD momentum in [0, 1) (paper: 0.9; the MNIST circle figure's original: 0, plain SGD).",
        check=_momentum,
    )


def check(config):
    """`resolve_before_data(config)`: raises ConfigError (naming the flags) for whatever a run
    refuses before reading any data (every flag and combination but --batch_p against the
    training classes), else returns the config a run takes as it is (`train_retrieval` does
    not resolve it again)."""
    return resolve_before_data(config)


def resolve(config, num_train_classes=None):
    """The config with every default filled in, checked; raises ConfigError naming flags.

    With `num_train_classes` (the training split's), an unset --batch_p is the paper's P capped
    at it (even for the contrastive loss) and a larger --batch_p is refused; without it, the
    paper's P is kept (a grid checked before any data is read). A run takes the same two steps
    apart, with its split read between them (`trainers.retrieval.train.setup`).
    """
    return with_training_classes(resolve_before_data(config), num_train_classes)


def resolve_before_data(config):
    """The config with every field resolved but --batch_p, after every check that needs no
    data; raises ConfigError naming flags. --batch_p stays as given (None: unset), the one field
    the training classes decide: `with_training_classes` settles it. P-dependent checks (the
    loss's pairs, XML's halves, the memory's size) take the flag's P, else the paper's. The
    config returned is marked resolved (`trainers.harness.config.mark_resolved`): a run given
    it does not resolve it again."""
    c = config
    shared = resolve_image_run(c, DATASETS)  # the harness' checks
    check_dense_fits("--embedding_dim", c.embedding_dim, MIN_BACKBONE_FEATURES, "features")
    if c.decoded_cache and DATASETS[c.dataset].embedded:
        raise ConfigError(
            f"--decoded_cache caches decoded image files; --dataset={c.dataset} is already in "
            f"memory."
        )
    batch_p, batch_k = _batch_shape(c)
    _check_xml(c, batch_p)
    _check_xbm(c, batch_p * batch_k)
    resolved = dataclasses.replace(
        c,
        xml_prototypes=(64 if c.xml_prototypes is None else c.xml_prototypes)
        if c.xml_lambda
        else None,
        batch_k=batch_k,
        **shared,
        svmax_lambda=RANKING[c.loss].svmax_lambda if c.svmax_lambda is None else c.svmax_lambda,
        margin=RANKING[c.loss].margin if c.margin is None else c.margin,
        recall_ks=tuple(int(k) for k in c.recall_ks),
    )
    return mark_resolved(resolved)


def with_training_classes(config, num_train_classes):
    """A `resolve_before_data` config with --batch_p settled: the flag's, refused above
    `num_train_classes` (the training split's); unset, the paper's P capped at them (even for
    a loss that pairs classes) and checked again where the cap changed it (at least 2 classes,
    XML's halves). `num_train_classes` None (no data read: a grid's plan) keeps the paper's P."""
    c = config
    loss = RANKING[c.loss]
    batch_p = loss.batch_p if c.batch_p is None else c.batch_p
    if num_train_classes is None or batch_p <= num_train_classes:
        return dataclasses.replace(c, batch_p=batch_p)
    if c.batch_p is not None:
        raise ConfigError(
            f"--batch_p={batch_p} exceeds the {num_train_classes} training classes of "
            f"--dataset={c.dataset}."
        )
    batch_p = num_train_classes  # e.g. digits: 5 training classes
    if loss.pairs_classes:
        batch_p -= batch_p % 2
    if batch_p < 2:  # P capped at too few training classes (the flag itself is checked)
        raise ConfigError(
            library_args.invalid(
                "--batch_p",
                f"an int >= 2 (negatives need 2 of the {num_train_classes} training classes)",
                batch_p,
            )
        )
    _check_xml(c, batch_p)
    return dataclasses.replace(c, batch_p=batch_p)


def _batch_shape(c):
    """``(P, K)``: the flags', else the paper's for the loss, checked against the loss (the
    training classes are `with_training_classes`')."""
    loss = RANKING[c.loss]
    batch_k = loss.batch_k if c.batch_k is None else c.batch_k
    batch_p = loss.batch_p if c.batch_p is None else c.batch_p
    if loss.required_k is not None and batch_k != loss.required_k:
        raise ConfigError(
            f"--loss={c.loss} pairs the rows of each class as the original does and needs "
            f"--batch_k={loss.required_k}; received --batch_k={batch_k}."
        )
    if loss.pairs_classes and batch_p % 2:
        raise ConfigError(
            f"--loss={c.loss} pairs the classes two by two as the original does and needs "
            f"an even --batch_p; received --batch_p={batch_p}."
        )
    return batch_p, batch_k


def _check_xbm(c, batch):
    if not c.xbm_size:
        if c.xbm_start_step:
            raise ConfigError("--xbm_start_step needs --xbm_size > 0 (the memory is off).")
        return
    if not RANKING[c.loss].cross_batch_memory:
        raise ConfigError(
            f"--xbm_size needs a loss that mines anchors against a reference set "
            f"({', '.join(XBM_LOSSES)}); received --loss={c.loss}."
        )
    if c.xml_lambda:
        raise ConfigError(
            "--xbm_size and --xml_lambda cannot be combined (XML evaluates the ranking loss on "
            "halves of the batch)."
        )
    # The memory's float32 embeddings and int64 labels, and the loss's float32 distances of
    # the batch to the batch and the memory (one [b, b + M] matrix; the mining holds more).
    bank = c.xbm_size * (4 * c.embedding_dim + 8)
    distances = 4 * batch * (batch + c.xbm_size)
    check_fits_in_memory(
        bank + distances,
        f"--xbm_size={c.xbm_size} (the memory, {c.xbm_size:,} rows x (--embedding_dim="
        f"{c.embedding_dim} float32 + an int64 label), and the batch's {batch} x "
        f"{batch + c.xbm_size:,} float32 distances)",
    )


def _check_xml(c, batch_p):
    if not c.xml_lambda:
        if c.xml_prototypes is not None:
            raise ConfigError("--xml_prototypes needs --xml_lambda > 0 (XML is off).")
        return
    if RANKING[c.loss].on_proxies:
        raise ConfigError(
            f"--xml_lambda needs a loss on the embeddings alone; --loss={c.loss} scores them "
            f"against its class proxies."
        )
    if c.backbone not in library_args.SMALL_BACKBONES:
        raise ConfigError(
            f"--xml_lambda takes its histograms from the convolutional map of the small "
            f"backbones {list(library_args.SMALL_BACKBONES)}; received --backbone={c.backbone}."
        )
    # Each half of the batch (disjoint classes) is a batch of the loss on its own: at least 2
    # classes (negatives), and the contrastive loss pairs the classes two by two.
    step = 4 if RANKING[c.loss].pairs_classes else 2
    if batch_p % step or batch_p < 4:
        raise ConfigError(
            f"--xml_lambda splits the batch's classes into two halves, each a --loss={c.loss} "
            f"batch: --batch_p must be a multiple of {step} and >= 4; received {batch_p}."
        )
