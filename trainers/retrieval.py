"""The retrieval experiment behind `trainers/train_retrieval.py`, callable without flags.

SVMax paper Sec. 4.1 (dissertation Sec. 3.4.1): an embedding network trained on P x K batches
with a ranking loss and optionally a regularizer, SGD with momentum 0.9, the learning rate fixed
for K/2 steps then decayed polynomially to 1e-7 at step K (--momentum and --lr_schedule=constant
give the plain constant-rate SGD of the paper's MNIST circle figure), evaluated on the test
classes with Recall@K, NMI and MAP@R, plus the test embedding's s_mu with its bounds.

    config = RetrievalConfig(output_dir="/tmp/run")      # glyphs, contrastive + SVMax
    results = train_retrieval(config)                     # also written to results.json
"""

import dataclasses
import os
import time

import keras
import numpy as np
import tensorflow as tf

from tf_svmax import data, losses, metrics, models, ops
from tf_svmax.metrics.kmeans import INITS as KMEANS_INITS
from tf_svmax.ops import _checks
from tf_svmax.training import ConstantThenPolynomialDecay
from trainers.harness.config import (
    ConfigError,
    ImageDataConfig,
    check_fields_and_data,
    dataset_refusals,
    image_input_size,
    output_dir_option,
    resolve_cadence,
)
from trainers.harness.distribute import (
    check_even_split,
    check_strategy_combinations,
    cluster_timeout_option,
    cpu_devices_option,
    local_copy,
    make_strategy,
    strategy_option,
)
from trainers.harness.flags import (
    non_negative_int,
    non_negative_number,
    option,
    positive_int,
    positive_number,
)
from trainers.harness.loop import Job, RunFailed, image_file_diagnosis, run_job
from trainers.harness.loop import summary as loop_summary
from trainers.harness.plots import pyplot, save_figure
from trainers.harness.run_dir import layout

LOSSES = (
    "contrastive",
    "triplet_hard",
    "triplet_semihard",
    "npair",
    "angular",
    "lifted",
    "contrastive_pairs",
    "proxy_anchor",
)
REGULARIZERS = ("none", "svmax", "svmax_unbounded", "spread_out")
DATASETS = ("glyphs", "digits", "digits_closed", "cub200", "cars196", "sop", "folder")


def _digits_closed():
    """All 10 digits in both splits (1,437 train / 360 test), resized to MNIST's 28 x 28: the
    stand-in for MNIST in the SVMax paper's circle figure (a closed-set protocol)."""
    return data.load_digits_closed_set(image_size=28)


# Data sets that come with the package (in memory, no --data_dir): name -> loader.
EMBEDDED = {
    "glyphs": data.load_glyphs_open_set,
    "digits": data.load_digits_open_set,
    "digits_closed": _digits_closed,
}
LR_SCHEDULES = ("paper", "constant")


def _momentum(value, name):
    """A momentum in [0, 1): at 1 or above the velocity never decays (the steps grow without
    bound)."""
    if not _checks.check_non_negative_number(value, name) < 1:
        raise ValueError(_checks.invalid(name, "a float in [0, 1)", value))
    return float(value)


# The paper's P x K per loss (b = 144) and SVMax lambda (Sec. 4.1).
PAPER_BATCH = {
    "contrastive": (36, 4),
    "triplet_hard": (24, 6),
    "triplet_semihard": (24, 6),
    "lifted": (24, 6),
    # Not in the SVMax paper: the all-pairs contrastive loss of the XBM paper (cosine,
    # positives 1 - s, negatives past 0.5), which pairs with --xbm_size; b = 144 as above.
    "contrastive_pairs": (24, 6),
    "npair": (72, 2),
    "angular": (72, 2),
    # Dissertation Table 3.3 (ResNet50): b = 256. The Proxy-Anchor original samples batches at
    # random; any P x K batch serves the same loss.
    "proxy_anchor": (64, 4),
}
PAPER_LAMBDA = {
    "contrastive": 1.0,
    "npair": 1.0,
    "angular": 2.0,
    "triplet_hard": 0.1,
    "triplet_semihard": 0.1,
    "lifted": 1.0,
    "contrastive_pairs": 1.0,  # not in the paper: the contrastive loss's
    "proxy_anchor": 1e-4,  # dissertation Sec. 3.4.1: "a single lambda = 1e-4" for Proxy-Anchor
}
# Proxy-Anchor's margin is its delta (0.1; its scale alpha stays at the original's 32).
PAPER_MARGIN = {
    "contrastive": 1.0,
    "triplet_hard": 0.2,
    "triplet_semihard": 0.2,
    "lifted": 1.0,
    "contrastive_pairs": 0.5,  # the XBM paper's negative margin on cosine similarity
    "proxy_anchor": 0.1,
}
PROXY_ANCHOR_ALPHA = 32.0
# K = 5,000 for CUB-200 and CARS196, 20,000 for SOP; the embedded sets' defaults take minutes.
DEFAULT_STEPS = {
    "glyphs": 3000,
    "digits": 2000,
    "digits_closed": 2000,
    "cub200": 5000,
    "cars196": 5000,
    "sop": 20000,
    "folder": 5000,
}


@dataclasses.dataclass(frozen=True)
class RetrievalConfig(ImageDataConfig):
    """One retrieval run. `None` fields take the paper's (or the dataset's) default. Each
    field's help is its command-line flag's (`trainers/train_retrieval.py`)."""

    output_dir: str = output_dir_option("runs/retrieval")
    dataset: str = option(
        "glyphs",
        "glyphs: embedded rendered characters, 285 classes (first half train, second half "
        "test; no download). digits: scikit-learn's 8 x 8 digits, train 0-4 / test 5-9 (tiny, "
        "fast). digits_closed: the same digits at 28 x 28, all 10 classes in both splits (1,437 "
        "train / 360 test; the MNIST stand-in of the circle figure). cub200, cars196, sop, "
        "folder read --data_dir in the official layout.",
        choices=DATASETS,
    )
    backbone: str = option(
        "small_cnn",
        "Embedding network; the papers use GoogLeNet and ResNet50 (ImageNet weights); mnist_toy "
        "is the SVMax circle figure's MNIST network (random weights only).",
        choices=models.BACKBONES,
    )
    decoded_cache: bool = option(
        False,
        "Decode and resize the training images once into memory (uint8, resize^2 x 3 bytes "
        "each: 1.15 GB for CUB-200's 5,864 at 256; twice that while building), then only crop "
        "and flip per batch. Pixels are the rounded resized ones (within 0.5 of the uncached "
        "pipeline's); decoding is most of the input pipeline's cost "
        "(benchmarks/input_pipeline.py). File datasets only.",
    )
    embedding_dim: int = option(
        128, "Embedding size, L2-normalised (paper: 128).", check=positive_int
    )
    loss: str = option(
        "contrastive",
        "Ranking loss. proxy_anchor adds one learnable proxy per training class (alpha 32); it "
        "trains with this trainer's SGD schedule, not the Proxy-Anchor original's AdamW recipe.",
        choices=LOSSES,
    )
    regularizer: str = option(
        "svmax",
        "svmax: bounded Eq. 4; svmax_unbounded: -lambda s_mu; spread_out: the paper's "
        "baseline (alpha = --spread_out_alpha).",
        choices=REGULARIZERS,
    )
    svmax_lambda: float | None = option(
        None,
        "SVMax weight (paper: 1 contrastive and N-pair, 0.1 triplet, 2 angular, 1e-4 "
        "Proxy-Anchor; 1 lifted).",
        check=non_negative_number,
    )
    spread_out_alpha: float = option(
        1.0, "Spread-out weight (paper: 1).", check=non_negative_number
    )
    xml_lambda: float = option(
        0.0,
        "Weight lambda of XML's cross-batch term (seed 004, Eq. 2.11; paper: 0.01): "
        "(1 - lambda) loss(Y) + lambda sum_k loss(Y_hat_k), where prototypes fitted in closed "
        "form to one half of the batch (disjoint classes) predict the other half's embeddings "
        "from its prototype histograms of the last convolutional map. 0: off. Small backbones.",
        check=non_negative_number,
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
        "triplet_hard, triplet_semihard, lifted, contrastive_pairs.",
        check=non_negative_int,
    )
    xbm_start_step: int = option(
        0,
        "Training steps before the cross-batch memory is used (XBM's warm-up; paper: 1000 on "
        "SOP). Needs --xbm_size > 0.",
        check=non_negative_int,
    )
    margin: float | None = option(
        None,
        "Margin (paper: 1.0 contrastive, 0.2 triplet, delta 0.1 Proxy-Anchor; 1.0 lifted; "
        "contrastive_pairs: the negatives' cosine margin, 0.5 as in the XBM paper).",
        check=non_negative_number,
    )
    learning_rate: float = option(
        0.01,
        "SGD learning rate; with --lr_schedule=paper fixed for train_steps/2 then decayed "
        "polynomially to 1e-7 (paper: 0.01, 0.001, 0.0001).",
        check=positive_number,
    )
    lr_schedule: str = option(
        "paper",
        "paper: --learning_rate for train_steps/2, then decayed polynomially to 1e-7 at "
        "train_steps (SVMax paper Sec. 4.1); constant: --learning_rate throughout (the MNIST "
        "circle figure's original).",
        choices=LR_SCHEDULES,
    )
    momentum: float = option(
        0.9,
        "SGD momentum in [0, 1) (paper: 0.9; the MNIST circle figure's original: 0, plain SGD).",
        check=_momentum,
    )
    train_steps: int | None = option(
        None,
        "Training steps K (paper: 5000 CUB/CARS, 20000 SOP; default glyphs: 3000, digits and "
        "digits_closed: 2000).",
        check=positive_int,
    )
    batch_p: int | None = option(
        None,
        "Classes per batch P (paper: 36 contrastive, 24 triplet, 72 N-pair/angular, 64 "
        "Proxy-Anchor; capped at the training classes when unset).",
    )
    batch_k: int | None = option(
        None,
        "Images per class K (paper: 4 contrastive and Proxy-Anchor, 6 triplet, 2 N-pair/angular).",
    )
    trace_every: int | None = option(
        None,
        "Steps per point of the loss / s_mu / learning-rate trace in results.json and "
        "training.png (default: eval_every / 20).",
        check=positive_int,
    )
    recall_ks: tuple[int, ...] = option(
        (1, 2, 4, 8), "K of Recall@K (SOP papers: 1,10,100,1000).", check=positive_int
    )
    kmeans_init: str = option(
        "k-means++",
        "NMI k-means seeding: greedy k-means++ (an SOP-sized evaluation takes ~35 s on 2 idle "
        "cores), k-means++-sklearn (the same algorithm on scikit-learn's random stream, ~8x the "
        "seeding time) or random (faster, lower NMI: 0.88 vs 0.92 on an SOP-shaped set).",
        choices=KMEANS_INITS,
    )
    kmeans_max_iter: int = option(300, "NMI k-means iterations.", check=positive_int)
    eval_batch_size: int = option(
        128, "Batch size for embedding the test split.", identity=False, check=positive_int
    )
    jit_compile: bool = option(
        False,
        "XLA-compile the train step (SVMax then uses its Newton-Schulz path, ~1.8x its non-XLA "
        "cost on CPU).",
    )
    strategy: str = strategy_option()
    cpu_devices: int = cpu_devices_option()
    cluster_timeout: int = cluster_timeout_option()


def build_optimizer(config):
    """`(optimizer, schedule)` of a resolved config: SGD with --momentum at the --lr_schedule
    rate, and that rate as a function of the step (the trace's learning rate)."""
    if config.lr_schedule == "paper":
        schedule = ConstantThenPolynomialDecay(config.learning_rate, config.train_steps)
        return keras.optimizers.SGD(schedule, momentum=config.momentum), schedule
    return (
        keras.optimizers.SGD(config.learning_rate, momentum=config.momentum),
        lambda step: config.learning_rate,
    )


def resolve(config, num_train_classes=None):
    """The config with every default filled in, checked; raises ConfigError naming flags."""
    c = config
    check_fields_and_data(c, EMBEDDED)
    check_strategy_combinations(c)
    if c.decoded_cache and c.dataset in EMBEDDED:
        raise ConfigError(
            f"--decoded_cache caches decoded image files; --dataset={c.dataset} is already in "
            f"memory."
        )
    paper_p, paper_k = PAPER_BATCH[c.loss]
    batch_k = paper_k if c.batch_k is None else c.batch_k
    batch_p = paper_p if c.batch_p is None else c.batch_p
    if c.batch_p is None and num_train_classes is not None and batch_p > num_train_classes:
        batch_p = num_train_classes  # e.g. digits: 5 training classes
        if c.loss == "contrastive":
            batch_p -= batch_p % 2
    required_k = {"contrastive": 4, "npair": 2, "angular": 2}.get(c.loss)
    if required_k is not None and batch_k != required_k:
        raise ConfigError(
            f"--loss={c.loss} pairs the rows of each class as the original does and needs "
            f"--batch_k={required_k}; received --batch_k={batch_k}."
        )
    if c.loss == "contrastive" and batch_p % 2:
        raise ConfigError(
            f"--loss=contrastive pairs the classes two by two as the original does and needs "
            f"an even --batch_p; received --batch_p={batch_p}."
        )
    if batch_k < 2:
        raise ConfigError(f"--batch_k must be >= 2 (positives per class); received {batch_k}.")
    if batch_p < 2:
        raise ConfigError(f"--batch_p must be >= 2 (negatives need 2 classes); got {batch_p}.")
    if num_train_classes is not None and batch_p > num_train_classes:
        raise ConfigError(
            f"--batch_p={batch_p} exceeds the {num_train_classes} training classes of "
            f"--dataset={c.dataset}."
        )
    cadence = resolve_cadence(c, DEFAULT_STEPS[c.dataset])
    _check_xml(c, batch_p)
    _check_xbm(c)
    return dataclasses.replace(
        c,
        xml_prototypes=(64 if c.xml_prototypes is None else c.xml_prototypes)
        if c.xml_lambda
        else None,
        batch_p=batch_p,
        batch_k=batch_k,
        **cadence,
        svmax_lambda=PAPER_LAMBDA[c.loss] if c.svmax_lambda is None else c.svmax_lambda,
        margin=PAPER_MARGIN.get(c.loss) if c.margin is None else c.margin,
        input_size=image_input_size(c, EMBEDDED),
        recall_ks=tuple(int(k) for k in c.recall_ks),
    )


# The --loss values whose mining takes a separate reference set (`losses.CrossBatchMemory`).
XBM_LOSSES = ("triplet_hard", "triplet_semihard", "lifted", "contrastive_pairs")


def _check_xbm(c):
    if not c.xbm_size:
        if c.xbm_start_step:
            raise ConfigError("--xbm_start_step needs --xbm_size > 0 (the memory is off).")
        return
    if c.loss not in XBM_LOSSES:
        raise ConfigError(
            f"--xbm_size needs a loss that mines anchors against a reference set "
            f"({', '.join(XBM_LOSSES)}); received --loss={c.loss}."
        )
    if c.xml_lambda:
        raise ConfigError(
            "--xbm_size and --xml_lambda cannot be combined (XML evaluates the ranking loss on "
            "halves of the batch)."
        )


def _check_xml(c, batch_p):
    if not c.xml_lambda:
        if c.xml_prototypes is not None:
            raise ConfigError("--xml_prototypes needs --xml_lambda > 0 (XML is off).")
        return
    if c.xml_lambda > 1:
        raise ConfigError(f"--xml_lambda is a weight in [0, 1]; received {c.xml_lambda}.")
    if c.loss == "proxy_anchor":
        raise ConfigError(
            "--xml_lambda needs a loss on the embeddings alone; --loss=proxy_anchor scores "
            "them against its class proxies."
        )
    if c.backbone not in models.SMALL_BACKBONES:
        raise ConfigError(
            f"--xml_lambda takes its histograms from the convolutional map of the small "
            f"backbones {list(models.SMALL_BACKBONES)}; received --backbone={c.backbone}."
        )
    # Each half of the batch (disjoint classes) is a batch of the loss on its own: at least 2
    # classes (negatives), and the contrastive loss pairs the classes two by two.
    step = 4 if c.loss == "contrastive" else 2
    if batch_p % step or batch_p < 4:
        raise ConfigError(
            f"--xml_lambda splits the batch's classes into two halves, each a --loss={c.loss} "
            f"batch: --batch_p must be a multiple of {step} and >= 4; received {batch_p}."
        )


def load_split(config):
    """`(train, test, input_shape, map_fns)`; images in memory for the embedded sets, paths
    otherwise."""
    if config.dataset in EMBEDDED:
        split = EMBEDDED[config.dataset]()
        return split["train"], split["test"], split["train"][0].shape[1:], None
    with dataset_refusals(config):
        split = data.read_dataset(config.dataset, config.data_dir)
    size = image_input_size(config, EMBEDDED)
    loaders = (
        data.image_loader(training=True, input_size=size),
        data.image_loader(training=False, input_size=size),
    )
    return split["train"], split["test"], (size, size, 3), loaders


def head_output(config):
    """The output `build_training_model` adds beside ``"embedding"``: ``"xml"`` (XML's
    histograms appended to the embeddings), ``"proxies"`` (Proxy-Anchor's similarities) or None
    (the embedding model alone)."""
    if config.xml_lambda:
        return "xml"
    return "proxies" if config.loss == "proxy_anchor" else None


def build_loss(config, memory=None):
    """The ranking loss, composed with the regularizer through `RegularizedLoss`; with
    --xbm_size, the ranking loss in a `CrossBatchMemory` whose state is `memory` (the
    `CrossBatchMemoryBank` of `build_training_model`).

    With a `head_output` a dict for the two outputs of `build_training_model`: the loss on the
    head (Proxy-Anchor on the proxy similarities, or XML around the ranking loss) and the
    regularizer (if any) on the embeddings alone.
    """
    regularizers = _regularizers(config)
    head = head_output(config)
    if head is None:
        ranking = _ranking_loss(config)
        if config.xbm_size:
            ranking = losses.CrossBatchMemory(
                ranking, config.xbm_size, start_step=config.xbm_start_step, memory=memory
            )
        return losses.RegularizedLoss(ranking, regularizers) if regularizers else ranking
    if head == "xml":
        head_loss = losses.XMLLoss(
            _ranking_loss(config), config.xml_prototypes, lambda_=config.xml_lambda
        )
    else:
        head_loss = losses.ProxyAnchorLoss(alpha=PROXY_ANCHOR_ALPHA, delta=config.margin)
    out = {head: head_loss}
    if regularizers:
        (out["embedding"],) = regularizers  # one regularizer per run
    return out


def _ranking_loss(config):
    margin = config.margin
    return {
        "contrastive": lambda: losses.PKContrastiveLoss(margin=margin),
        "triplet_hard": lambda: losses.BatchHardTripletLoss(margin=margin),
        "triplet_semihard": lambda: losses.TripletSemiHardLoss(margin=margin),
        "npair": losses.PKNpairLoss,
        "angular": losses.PKAngularLoss,
        "lifted": lambda: losses.LiftedStructLoss(margin=margin),
        "contrastive_pairs": lambda: losses.AllPairsContrastiveLoss(neg_margin=margin),
    }[config.loss]()


def _regularizers(config):
    return {
        "none": [],
        "svmax": [losses.SVMaxLoss(lambda_=config.svmax_lambda)],
        "svmax_unbounded": [losses.SVMaxLoss(lambda_=config.svmax_lambda, bounded=False)],
        "spread_out": [losses.SpreadOutLoss(alpha=config.spread_out_alpha, seed=config.seed)],
    }[config.regularizer]


def build_training_model(config, embedding_model, num_classes, memory=None):
    """The model `fit` trains: the embedding model itself; for ``proxy_anchor`` the
    embedding model with a `CosineProxies` head (outputs ``{"embedding", "proxies"}``); with
    XML, ``{"embedding", "xml"}``, the latter the embeddings with the `PrototypeHistograms` of
    the backbone's last convolutional map appended; with --xbm_size, the embedding model
    followed by the cross-batch memory layer `memory` (an identity that holds the memory's
    state, checkpointed with the run)."""
    if config.xbm_size:
        return keras.Model(
            embedding_model.input, memory(embedding_model.output), name="xbm_training_model"
        )
    if config.xml_lambda:
        histograms = models.PrototypeHistograms(config.xml_prototypes, name="xml_prototypes")(
            models.pooled_feature_map(embedding_model)
        )
        joined = keras.layers.Concatenate(name="xml")([embedding_model.output, histograms])
        return keras.Model(
            embedding_model.input,
            {"embedding": embedding_model.output, "xml": joined},
            name="xml_training_model",
        )
    if config.loss != "proxy_anchor":
        return embedding_model
    embeddings = embedding_model.output
    similarities = models.CosineProxies(num_classes, name="proxies")(embeddings)
    return keras.Model(
        embedding_model.input,
        {"embedding": embeddings, "proxies": similarities},
        name="proxy_anchor_training_model",
    )


def train_retrieval(config, *, callbacks=()):
    """Trains, evaluates every `eval_every` steps, resumes from `output_dir` if interrupted
    (the shared loop: `trainers.harness.loop.run_job`).

    Returns the results dict (also in ``output_dir/results.json``), whose ``status`` is
    ``"completed"`` or ``"diverged"`` (non-finite loss: training stopped, the last good
    checkpoint kept, ``message`` says where).

    Raises:
      ConfigError: a flag combination the experiment cannot run.
      RunRefused: `output_dir` is in use by another process, holds another configuration,
        or its record is damaged (`trainers.harness.run_dir`).
    """
    started = time.perf_counter()
    config, split, embedding_model, strategy = _setup(config)
    evaluated = local_copy(embedding_model, strategy)  # multi_worker: the chief's own copy
    with strategy.scope():  # the training head, the loss's state, the optimizer's slots
        job = _job(config, split, embedding_model, callbacks, evaluated)
    return run_job(job, RetrievalConfig, started)


def _job(config, split, embedding_model, callbacks, evaluated):
    """The run's `Job`; `evaluated` is ``(model, refresh)`` of `local_copy`."""
    train, test, input_shape, loaders = split
    train_classes, train_labels = np.unique(train[1], return_inverse=True)
    memory = (
        losses.CrossBatchMemoryBank(config.xbm_size, name="xbm_memory") if config.xbm_size else None
    )
    model = build_training_model(config, embedding_model, len(train_classes), memory)
    optimizer, schedule = build_optimizer(config)
    head = head_output(config)
    proxies = head == "proxies"
    model.compile(
        optimizer=optimizer,
        loss=build_loss(config, memory),
        metrics={"embedding": metrics.svmax_metrics()} if head else metrics.svmax_metrics(),
        jit_compile=config.jit_compile,
    )
    batch = config.batch_p * config.batch_k
    bounds = ops.svmax_bounds(batch, config.embedding_dim)
    features, map_fn = train_features(config, train[0], input_shape, loaders)

    def batches(start_step):
        out = data.pk_batches(
            features,
            # Proxy-Anchor indexes one proxy per class: labels become 0 .. C-1 (order kept, so
            # the batches are those of the original labels).
            train_labels if proxies else train[1],
            batch_p=config.batch_p,
            batch_k=config.batch_k,
            seed=config.seed,
            map_fn=map_fn,
            start_batch=start_step,
        )
        if head:
            # Keras matches targets to every output (by its key in the output dict): each
            # gets the labels.
            out = out.map(
                lambda x, y: (x, {"embedding": y, head: y}),
                num_parallel_calls=tf.data.AUTOTUNE,
            )
        return out

    evaluator = _evaluator(
        config, test, input_shape, loaders, layout(config.output_dir)["tensorboard"]
    )
    xml = (
        f" + XML (λ {config.xml_lambda:g}, m {config.xml_prototypes})" if config.xml_lambda else ""
    )
    xbm = (
        f" + XBM (M {config.xbm_size} from step {config.xbm_start_step})" if config.xbm_size else ""
    )
    evaluated_model, refresh = evaluated
    evaluator.set_model(evaluated_model)

    def evaluate(step, epoch):
        refresh()
        record = evaluator.evaluate(step=step, epoch=epoch)  # also its TensorBoard scalars
        return metrics.split_retrieval_results(
            {k: v for k, v in record.items() if k not in ("step", "epoch")}
        )

    return Job(
        name="train_retrieval",
        config=config,
        model=model,
        schedule=schedule,
        batches=batches,
        global_batch=config.batch_p * config.batch_k,
        evaluate=evaluate,
        plot=lambda results, folder: plot_run(results, bounds, folder),
        save=lambda folder: embedding_model.save(os.path.join(folder, "embedding_model.keras")),
        header={
            "train_batch_bounds": {"batch_size": batch, "lower": bounds[0], "upper": bounds[1]}
        },
        description=(
            f"{config.dataset}, {config.backbone}, {config.loss} + {config.regularizer}{xml}"
            f"{xbm}, P x K = {config.batch_p} x {config.batch_k}, lr {config.learning_rate}"
            f"{' constant' if config.lr_schedule == 'constant' else ''}, momentum "
            f"{config.momentum:g}, {config.train_steps} steps"
        ),
        callbacks=callbacks,
        diagnose=image_file_diagnosis(train[0], test[0]) if loaders else None,
    )


def train_features(config, train_paths, input_shape, loaders):
    """What the P x K sampler draws from and its `map_fn`: the files and the decoding loader,
    or with --decoded_cache the decoded, resized images (built here, eagerly, once) and the
    crop-and-flip loader."""
    if not config.decoded_cache:
        return train_paths, loaders[0] if loaders else None
    try:
        cache = data.decoded_image_cache(train_paths, input_size=input_shape[0])
    except tf.errors.InvalidArgumentError as error:
        cause = image_file_diagnosis(train_paths)(error)
        if cause is None:
            raise
        raise RunFailed(f"{cause} (while building --decoded_cache)") from error
    return cache, data.cached_image_loader(input_size=input_shape[0])


def _setup(config):
    """Seeds, checks flags, reads the split and builds the embedding model — in that order,
    so the same config always gives the same initial weights."""
    resolve(config)  # refuse bad flags before reading any data
    strategy = make_strategy(config.strategy, config.cpu_devices, config.cluster_timeout)
    keras.utils.set_random_seed(config.seed)
    train, test, input_shape, loaders = load_split(config)
    config = resolve(config, num_train_classes=len(np.unique(train[1])))
    check_even_split(strategy, config.batch_p * config.batch_k)
    with strategy.scope():
        embedding_model = models.build_embedding_model(
            config.backbone,
            input_shape=input_shape,
            embedding_dim=config.embedding_dim,
            weights=config.weights,
        )
    return config, (train, test, input_shape, loaders), embedding_model, strategy


def _evaluator(config, test, input_shape, loaders, tensorboard_dir):
    kwargs = {
        "prefix": "",
        "log_dir": None if tensorboard_dir is None else os.path.join(tensorboard_dir, "test"),
        "ks": config.recall_ks,
        "kmeans_init": config.kmeans_init,
        "kmeans_max_iter": config.kmeans_max_iter,
        "seed": config.seed,
        "verbose": 0,
    }
    if loaders:
        test_data = data.image_dataset(
            *test, input_size=input_shape[0], batch_size=config.eval_batch_size
        )
        return metrics.RetrievalEvaluation(test_data, **kwargs)
    return metrics.RetrievalEvaluation(
        test[0], test[1], batch_size=config.eval_batch_size, **kwargs
    )


def evaluate_untrained(config):
    """The step-0 evaluation of `config`'s run without training or writing anything: the
    initial weights are those `train_retrieval(config)` starts from (same seed, same order)."""
    config, (_, test, input_shape, loaders), embedding_model, _ = _setup(config)
    evaluator = _evaluator(config, test, input_shape, loaders, None)
    evaluator.set_model(embedding_model)
    return evaluator.evaluate(step=0)


def summary(results):
    """One line with the last evaluation's retrieval metrics."""
    return loop_summary(results)


def run_title(config):
    """What a figure shows, so that it stands alone: dataset, loss, regularizer and λ."""
    c = config
    regularizer = {
        "none": "no regularizer",
        "svmax": f"SVMax λ = {c['svmax_lambda']:g}",
        "svmax_unbounded": f"unbounded SVMax λ = {c['svmax_lambda']:g}",
        "spread_out": f"spread-out α = {c['spread_out_alpha']:g}",
    }[c["regularizer"]]
    if c.get("xml_lambda"):  # records from before XML lack the key
        regularizer += f" + XML λ = {c['xml_lambda']:g} (m = {c['xml_prototypes']})"
    return (
        f"Retrieval: {c['dataset']}, {c['backbone']}, {c['loss']} + {regularizer}, lr "
        f"{c['learning_rate']:g}, P × K = {c['batch_p']} × {c['batch_k']}, seed {c['seed']}"
    )


def plot_run(results, bounds, directory):
    """``training.png`` (loss; s_mu of the training batches and of the test set, with the
    training batch's [L, U]) and ``recall.png`` (Recall@K over steps, step 0 marked as the
    untrained network, and at the last step); both titled with `run_title`."""
    plt = pyplot()
    title = run_title(results["config"])
    trace, evaluations = results["trace"], results["evaluations"]
    if not trace:
        return
    steps = [t["step"] for t in trace]
    widths = sorted({t.get("steps", 1) for t in trace})
    window = f"mean of {widths[0]} steps" if len(widths) == 1 else "mean of each window"
    fig, (ax_loss, ax_s) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot(steps, [t.get("loss", np.nan) for t in trace], label="loss")
    ax_loss.set(xlabel="step", ylabel=f"training loss ({window})", title="Loss")
    ax_lr = ax_loss.twinx()
    ax_lr.plot(steps, [t.get("learning_rate", np.nan) for t in trace], color="gray", ls="--")
    ax_lr.set_ylabel("learning rate (dashed)")
    ax_s.plot(
        steps,
        [
            t.get("mean_singular_value", t.get("embedding_mean_singular_value", np.nan))
            for t in trace
        ],
        label=f"s_mu, training batches ({window})",
    )
    ax_s.axhline(bounds[0], color="gray", ls="--", label=f"L = {bounds[0]:.3f}")
    ax_s.axhline(bounds[1], color="gray", ls=":", label=f"U = {bounds[1]:.3f}")
    ax_s.set(xlabel="step", ylabel="mean singular value", title="s_mu of the training batches")
    ax_s.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, os.path.join(directory, "training.png"))
    if not evaluations:
        return
    ks = sorted(int(k.split("_")[-1]) for k in evaluations[-1] if k.startswith("recall_at_"))
    fig, (ax_t, ax_k) = plt.subplots(1, 2, figsize=(11, 4))
    for k in ks:
        ax_t.plot(
            [e["step"] for e in evaluations],
            [e[f"recall_at_{k}"] for e in evaluations],
            marker="o",
            label=f"R@{k}",
        )
    if evaluations[0]["step"] == 0:
        ax_t.annotate(
            "untrained",
            (0, evaluations[0][f"recall_at_{ks[0]}"]),
            textcoords="offset points",
            xytext=(4, -12),
            fontsize=8,
        )
    ax_t.set(xlabel="step", ylabel="recall", title="Test Recall@K over training")
    ax_t.legend(fontsize=8)
    ax_k.plot(ks, [evaluations[-1][f"recall_at_{k}"] for k in ks], marker="o")
    ax_k.set_xscale("log", base=2)
    ax_k.set(xlabel="K", ylabel="Recall@K", title=f"Test recall at step {evaluations[-1]['step']}")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, os.path.join(directory, "recall.png"))
    plt.close("all")
