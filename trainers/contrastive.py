"""Contrastive pre-training (LORAC seed `003`, Algorithm 1; MoCo-M; MoCo) behind
`trainers/train_contrastive.py`, callable without flags; the model and its train step are
`tf_svmax.training.ContrastiveModel`.

Each step draws N training images and M augmented views of each (`data.random_view`): M - 1
query views through the trainable encoder, one key view through the momentum (EMA) key encoder,
and K negatives from a FIFO queue of earlier keys (`training.MomentumEncoder`,
`training.NegativeQueue`). The loss is `losses.lorac_loss`: LORAC with its prior from
``prior_start`` of the steps on (beta = inf before: the paper anneals, Sec. 6.2), MoCo-M
(beta = inf throughout) or MoCo (M = 2, beta = inf). SGD with momentum 0.9, weight decay 1e-4
and a cosine learning-rate decay; tau = 0.2 (Sec. 6, App. A); key momentum 0.99 (the paper's
0.999 is for runs 50 times longer).

The encoder is the small convolutional backbone, global average pooling ("features", what the
linear probe sees, as the paper's layers before ResNet-18's pooling) and a two-layer projection
head (with batch normalization) to C L2-normalised dimensions. Queries and keys are normalised
by their own batch's statistics, as in MoCo; MoCo's shuffled BN (which keeps a query and its key
out of the same normalisation group across GPUs) has no counterpart on one device. Without BN in
the head, runs here collapsed (every embedding one vector: positive similarity 0.97, loss at
ln(K + 1)) both with the BN backbone and keys through the EMA encoder's running statistics and
with no BN at all; with it (keys in training mode) they learn.

Evaluated on held-out images of the pre-training classes (the set's per-class split): a linear
probe (logistic regression on the frozen, standardised features; scikit-learn) and k-NN accuracy
(cosine, the training images' features); the nuclear norm of the C-d embeddings of 32 augmented
views of each held-out image (seed 003 Fig. 4c); and open-set retrieval (Recall@1, MAP@R) of the
features on the set's disjoint test classes.

    config = ContrastiveConfig(output_dir="/tmp/run", method="lorac")
    results = train_contrastive(config)                   # also in results.json
"""

import dataclasses
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from tf_svmax import data, losses, metrics, models, training
from tf_svmax.losses.lorac import PRIORS
from trainers.harness.config import (
    ConfigError,
    RunConfig,
    check_fields,
    output_dir_option,
    resolve_cadence,
)
from trainers.harness.flags import (
    non_negative_number,
    option,
    positive_int,
    positive_number,
)
from trainers.harness.loop import Job, run_job
from trainers.harness.loop import summary as loop_summary
from trainers.harness.plots import pyplot, save_figure

METHODS = ("lorac", "moco_m", "moco")
DEFAULT_STEPS = {"glyphs": 1000, "digits": 400}
# The pre-training classes' images held out for the probe's test (a fixed split: data seed 0).
DATA_SEED = 0
TEST_FRACTION = 0.25
# Seed of the evaluation's augmented views: the same views for every run and method.
EVAL_VIEW_SEED = 2**20


def _glyphs():
    return data.load_glyphs_open_set(images_per_class=32)


EMBEDDED = {"glyphs": _glyphs, "digits": data.load_digits_open_set}


@dataclasses.dataclass(frozen=True)
class ContrastiveConfig(RunConfig):
    """One pre-training run. `None` fields take the method's default. Each field's help is its
    command-line flag's (`trainers/train_contrastive.py`)."""

    output_dir: str = output_dir_option("runs/contrastive")
    dataset: str = option(
        "glyphs",
        "glyphs: the embedded rendered characters' open-set training half (142 classes x 32 "
        "images; 3/4 of each class pre-train and train the probe, 1/4 test it; the 143 other "
        "classes test open-set retrieval). digits: scikit-learn's 8 x 8 digits 0-4 (5-9 for "
        "retrieval; tiny, fast). Labels are used by the evaluation only.",
        choices=tuple(EMBEDDED),
    )
    backbone: str = option(
        "small_cnn_bn",
        "Encoder backbone (before the projection head).",
        choices=models.SMALL_BACKBONES,
    )
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
        check=positive_int,
    )
    prior: str = option(
        "laplace",
        "lorac's prior: laplace (Eq. 11, exp(-||Q||_* / (M beta tau))), gaussian "
        "(exp(-(||Q||_* - sqrt(5))^2 / (beta M tau))) or margin (||Q||_* replaced by 3).",
        choices=PRIORS,
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
        check=non_negative_number,
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
        check=non_negative_number,
    )
    embedding_dim: int = option(
        128, "C: the L2-normalised projection (paper: 128).", check=positive_int
    )
    hidden_units: int = option(
        256, "Projection head's hidden layer (MoCo v2: an MLP).", check=positive_int
    )
    batch_size: int = option(64, "N: images per step (paper: 256).", check=positive_int)
    learning_rate: float = option(
        0.03,
        "SGD (momentum 0.9) learning rate, cosine decay to 0 (MoCo: 0.03).",
        check=positive_number,
    )
    weight_decay: float = option(1e-4, "SGD weight decay (paper: 1e-4).", check=non_negative_number)
    train_steps: int | None = option(
        None, "Training steps (default: glyphs 1000, digits 400).", check=positive_int
    )
    knn_k: int = option(10, "k of the k-NN accuracy (cosine, majority vote).", check=positive_int)
    test_views: int = option(
        32,
        "Augmented views per held-out image for the test nuclear norm (paper: 32).",
        check=positive_int,
    )
    eval_batch_size: int = option(
        512, "Batch size for evaluation.", identity=False, check=positive_int
    )


def resolve(config):
    """The config with every default filled in, checked; raises ConfigError naming flags."""
    c = config
    check_fields(c)
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
    if views < 2:
        raise ConfigError(f"--views must be >= 2 (at least one query and the key); got {views}.")
    if c.key_momentum > 1:
        raise ConfigError(f"--key_momentum must be in [0, 1]; got {c.key_momentum}.")
    if c.prior_start > 1:
        raise ConfigError(f"--prior_start is a share of the steps in [0, 1]; got {c.prior_start}.")
    if c.queue_size < c.batch_size:
        raise ConfigError(
            f"--queue_size ({c.queue_size}) must hold at least one batch (--batch_size "
            f"{c.batch_size}): each step enqueues its keys."
        )
    return dataclasses.replace(
        c,
        views=views,
        beta=(2.0 if c.beta is None else c.beta) if c.method == "lorac" else math.inf,
        **resolve_cadence(c, DEFAULT_STEPS[c.dataset]),
    )


def prior_start_step(config):
    """The first step trained with the prior (never, for moco_m and moco)."""
    if config.method != "lorac":
        return config.train_steps
    return int(round(config.prior_start * config.train_steps))


# Data.


def load_split(config):
    """``{"pretrain": (x, y), "heldout": (x, y), "open_set": (x, y)}``: the training classes'
    images split per class (pre-training and probe fit / probe test) and the disjoint classes."""
    split = EMBEDDED[config.dataset]()
    images, labels = split["train"]
    train_idx, test_idx = data.split_per_class(labels, test_fraction=TEST_FRACTION, seed=DATA_SEED)
    return {
        "pretrain": (images[train_idx], labels[train_idx]),
        "heldout": (images[test_idx], labels[test_idx]),
        "open_set": split["test"],
    }


def view_batches(images, *, batch_size, views, seed, start_step):
    """``[batch_size, views, H, W, C]`` per step: images drawn without replacement within a
    step and their augmented views, from stateless seeds (seed, step), so a resumed run sees the
    batches it would have seen."""
    images = tf.constant(images, tf.float32)
    n = int(images.shape[0])

    def draw(step):
        step_seed = tf.stack([tf.constant(seed, tf.int64), step])
        seeds = tf.random.experimental.stateless_split(step_seed, views + 1)
        order = tf.argsort(tf.random.stateless_uniform([n], seeds[0]))[:batch_size]
        chosen = tf.gather(images, order)
        return tf.stack([data.random_view(chosen, seeds[v + 1]) for v in range(views)], axis=1)

    return (
        tf.data.Dataset.range(start_step, 2**62)
        .map(draw, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(2)
    )


# Model.


def build_encoder(config, input_shape):
    """Images -> L2-normalised C-d embeddings; the pooled backbone output is the layer
    ``"features"``."""
    inputs = keras.Input(tuple(input_shape), name="images")
    pooled = keras.layers.GlobalAveragePooling2D(name="features")(
        models.feature_map(config.backbone, inputs)
    )
    # Batch normalization in the head (SimCLR's and MoCo v3's): without it the pooled ReLU
    # features of these small images start in one narrow cone (mean pairwise cosine 0.99 at
    # initialisation), every key is every other key's near copy, and training collapses.
    x = keras.layers.Dense(config.hidden_units, use_bias=False, name="projection_hidden")(pooled)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization(name="projection_bn")(x))
    x = keras.layers.Dense(config.embedding_dim, name="projection")(x)
    outputs = keras.layers.UnitNormalization(name="l2_normalize")(x)
    return keras.Model(inputs, outputs, name="contrastive_encoder")


def feature_extractor(encoder):
    """The encoder up to its pooled features (shares its weights)."""
    return keras.Model(encoder.inputs, encoder.get_layer("features").output)


def build_model(config, input_shape):
    """``(model, schedule)``: the compiled `tf_svmax.training.ContrastiveModel` of a resolved
    config (weights seeded by config.seed) and its learning-rate schedule."""
    keras.utils.set_random_seed(config.seed)
    encoder = build_encoder(config, input_shape)
    prior = {}
    if config.method == "lorac":
        prior = dict(
            prior_loss_fn=losses.LORACLoss(
                temperature=config.temperature, beta=config.beta, prior=config.prior
            ),
            prior_start=prior_start_step(config),
        )
    model = training.ContrastiveModel(
        encoder,
        views=config.views,
        loss_fn=losses.LORACLoss(temperature=config.temperature, beta=math.inf),
        **prior,
        key_momentum=config.key_momentum,
        queue_size=config.queue_size,
        seed=config.seed,
    )
    schedule = keras.optimizers.schedules.CosineDecay(config.learning_rate, config.train_steps)
    model.compile(
        optimizer=keras.optimizers.SGD(
            schedule, momentum=0.9, weight_decay=config.weight_decay or None
        ),
        jit_compile=False,  # the SVD of the prior: never let XLA take the CPU step hostage
    )
    return model, schedule


# Evaluation.


def augmented_nuclear_norms(encoder, images, *, views, batch_size):
    """``||Q_hat||_*`` per image: the nuclear norm of the `[views, C]` embeddings of `views`
    augmented views of it (seed 003 Fig. 4c; the same views for every run)."""
    embeddings = [
        encoder.predict(
            data.random_view(images, tf.constant([EVAL_VIEW_SEED, v], tf.int64)).numpy(),
            batch_size=batch_size,
            verbose=0,
        )
        for v in range(views)
    ]
    stacked = np.stack(embeddings, axis=1).astype(np.float64)  # [n, views, C]
    return np.linalg.svd(stacked, compute_uv=False).sum(axis=1)


def evaluate(config, model, features, split):
    """The held-out evaluation, ``{"metrics": ..., "info": ...}``; `features` is the encoder's
    `feature_extractor`."""
    from sklearn.preprocessing import normalize

    def predict(x):
        return features.predict(x, batch_size=config.eval_batch_size, verbose=0)

    (train_x, train_y), (test_x, test_y) = split["pretrain"], split["heldout"]
    train_f, test_f = predict(train_x), predict(test_x)
    norms = augmented_nuclear_norms(
        model.encoder, test_x, views=config.test_views, batch_size=config.eval_batch_size
    )
    open_x, open_y = split["open_set"]
    # Rows of exact zeros (a dead ReLU map) stay zero rather than dividing by 0.
    open_f = normalize(predict(open_x).astype(np.float64))
    retrieval = metrics.split_retrieval_results(
        metrics.evaluate_retrieval(open_f, open_y, ks=(1,), compute_nmi=False)
    )
    return {
        "metrics": {
            "linear_probe_accuracy": metrics.linear_probe_accuracy(
                train_f, train_y, test_f, test_y, seed=config.seed
            ),
            "knn_accuracy": metrics.knn_accuracy(train_f, train_y, test_f, test_y, k=config.knn_k),
            "test_nuclear_norm": float(norms.mean()),
            **{f"open_set_{k}": v for k, v in retrieval["metrics"].items()},
        },
        "info": {
            "test_nuclear_norm_std": float(norms.std()),
            # ||Q_hat||_* of `test_views` unit rows lies in [sqrt(views), views].
            "test_nuclear_norm_bounds": [math.sqrt(config.test_views), float(config.test_views)],
            **{f"open_set_{k}": v for k, v in retrieval["info"].items()},
        },
    }


def describe(config):
    if config.method == "lorac":
        return (
            f"LORAC ({config.prior} prior, β {config.beta:g} from step "
            f"{prior_start_step(config)}, M {config.views})"
        )
    return f"MoCo-M (M {config.views})" if config.method == "moco_m" else "MoCo (M 2)"


def plot_run(results, directory, title):
    """``training.png``: the loss and the batch's mean ||Q||_* per trace window, and the
    held-out probe / k-NN accuracies and test nuclear norm per evaluation."""
    plt = pyplot()
    trace, evaluations = results["trace"], results["evaluations"]
    if not trace:
        return
    steps = [t["step"] for t in trace]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(steps, [t["loss"] for t in trace])
    axes[0].set(xlabel="step", ylabel="loss (window mean)", title="Contrastive loss")
    axes[1].plot(steps, [t["nuclear_norm"] for t in trace], label="training Q (M rows)")
    axes[1].set(xlabel="step", ylabel="mean ||Q||_*", title="Nuclear norm of Q per instance")
    start = results.get("prior_start_step")
    if start is not None and start < steps[-1]:
        for ax in axes[:2]:
            ax.axvline(start, color="grey", ls=":", label="prior on")
    axes[1].legend(fontsize=8)
    if evaluations:
        at = [e["step"] for e in evaluations]
        axes[2].plot(
            at, [e["linear_probe_accuracy"] for e in evaluations], marker="o", label="linear probe"
        )
        axes[2].plot(at, [e["knn_accuracy"] for e in evaluations], marker="s", label="k-NN")
        axes[2].plot(
            at, [e["open_set_recall_at_1"] for e in evaluations], marker="^", label="open-set R@1"
        )
        twin = axes[2].twinx()
        twin.plot(
            at,
            [e["test_nuclear_norm"] for e in evaluations],
            color="k",
            ls="--",
            label="test ||Q̂||_*",
        )
        twin.set_ylabel(f"mean test ||Q̂||_* ({results['config']['test_views']} views)")
        twin.legend(fontsize=8, loc="lower right")
    axes[2].set(xlabel="step", ylabel="held-out accuracy", title="Evaluation")
    axes[2].legend(fontsize=8, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, os.path.join(directory, "training.png"))
    plt.close("all")


def summary(results):
    return loop_summary(results)


def train_contrastive(config, *, callbacks=()):
    """Pre-trains, evaluates every `eval_every` steps, resumes from `output_dir` if interrupted.

    Returns the results dict (also in ``output_dir/results.json``) with ``status``
    ``"completed"`` or ``"diverged"``.

    Raises:
      ConfigError: a flag combination the experiment cannot run.
      RunRefused: `output_dir` in use, holding another configuration, or damaged.
    """
    started = time.perf_counter()
    config = resolve(config)
    split = load_split(config)
    train_x = split["pretrain"][0]
    if config.batch_size > len(train_x):
        raise ConfigError(
            f"--batch_size ({config.batch_size}) exceeds the {len(train_x)} pre-training images."
        )
    if config.knn_k >= len(train_x):
        # k = n makes every vote the whole training set's (the majority class for every image).
        raise ConfigError(
            f"--knn_k ({config.knn_k}) must be below the {len(train_x)} pre-training images the "
            "k-NN classifier votes among."
        )
    model, schedule = build_model(config, train_x.shape[1:])
    features = feature_extractor(model.encoder)
    title = f"Contrastive pre-training: {describe(config)}, {config.dataset}, seed {config.seed}"
    job = Job(
        name="train_contrastive",
        config=config,
        model=model,
        schedule=schedule,
        batches=lambda start_step: view_batches(
            train_x,
            batch_size=config.batch_size,
            views=config.views,
            seed=config.seed,
            start_step=start_step,
        ),
        global_batch=config.batch_size,
        evaluate=lambda step, epoch: evaluate(config, model, features, split),
        plot=lambda results, folder: plot_run(results, folder, title),
        save=lambda folder: model.encoder.save(os.path.join(folder, "encoder.keras")),
        header={
            "prior_start_step": prior_start_step(config),
            "data": {
                "pretrain_images": len(train_x),
                "heldout_images": len(split["heldout"][1]),
                "classes": len(np.unique(split["pretrain"][1])),
                "open_set_images": len(split["open_set"][1]),
                "open_set_classes": len(np.unique(split["open_set"][1])),
            },
            "training_nuclear_norm_bounds": [math.sqrt(config.views), float(config.views)],
        },
        description=(
            f"{config.dataset} ({len(train_x)} images), {config.backbone}, {describe(config)}, "
            f"N {config.batch_size}, K {config.queue_size}, lr {config.learning_rate:g}, "
            f"{config.train_steps} steps"
        ),
        state={"key_encoder": model.key_encoder, "queue": model.queue},
        callbacks=callbacks,
    )
    return run_job(job, ContrastiveConfig, started)
