"""The two-head classification experiment behind `trainers/train_two_head.py`, callable
without flags.

Dissertation `001` Sec. 5.3-5.4: a backbone whose pooled last map feeds the softmax head and
whose unpooled map feeds an L2-normalised embedding head trained with a ranking loss (λ = 1;
center loss λ = 0.003, α = 0.5; semi-hard margin 0.2; batch-hard with the softplus margin;
squared Euclidean distance), P x K batches with K = 4 (b = 32), SGD momentum 0.9 and a
polynomially decaying learning rate from 0.01. Also softmax + OLÉ on the pooled features (OLÉ
paper `002`, Eq. 11, λ = 0.25, Δ = 1) and SVMax on the embedding head as an extra term.

Evaluated on held-out images of the training classes: top-1 (micro) and macro accuracy,
per-class accuracy, Recall@K / NMI / MAP@R of the embedding head (of the pooled features for
the single-head modes), and the share of misclassified test images whose nearest training
image in that embedding has the predicted label.

    config = TwoHeadConfig(output_dir="/tmp/run", mode="hard")   # glyphs, two-head (hard)
    results = train_two_head(config)                            # also in results.json
"""

import dataclasses
import os
import time

import keras
import numpy as np
import tensorflow as tf

from tf_svmax import data, losses, metrics, models
from tf_svmax.metrics.kmeans import INITS as KMEANS_INITS
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
    non_negative_number,
    number_at_least,
    open_fraction,
    option,
    positive_int,
    positive_number,
    rate,
)
from trainers.harness.loop import Job, image_file_diagnosis, run_job
from trainers.harness.loop import summary as loop_summary
from trainers.harness.plots import pyplot, save_figure

MODES = ("softmax", "center", "semi_hard", "hard", "ole")
# The modes whose term acts on the embedding head (the others train the single-head network).
TWO_HEAD_MODES = ("center", "semi_hard", "hard")
DATASETS = ("glyphs", "digits", "fgvr", "folder")


def _glyph_classes():
    """The glyph set's 142 training classes with 64 renderings each (generated once, then
    cached): the open-set test half stays unseen, for novel-class experiments."""
    split = data.load_glyphs_open_set(images_per_class=64)
    return split["train"][0], split["train"][1], split["characters"]


def _digit_classes():
    split = data.load_digits_open_set()
    images = np.concatenate([split["train"][0], split["test"][0]])
    return images, np.concatenate([split["train"][1], split["test"][1]]), None


# Embedded sets as classification sets: ``() -> (images, labels, class names or None)``; each
# class's images are split into train and test.
EMBEDDED = {"glyphs": _glyph_classes, "digits": _digit_classes}
# The weight of each mode's term (dissertation Sec. 5.4.1; OLÉ paper Fig. 4 / Table 2: 0.25).
PAPER_LAMBDA = {"center": 0.003, "semi_hard": 1.0, "hard": 1.0, "ole": 0.25}
PAPER_MARGIN, PAPER_CENTER_ALPHA = 0.2, 0.5  # semi-hard margin; center loss update rate
DEFAULT_STEPS = {"glyphs": 3000, "digits": 1000, "fgvr": 40000, "folder": 40000}
# Images of each class held out for testing in the embedded sets (a fixed split: data seed 0).
DATA_SEED = 0


@dataclasses.dataclass(frozen=True)
class TwoHeadConfig(ImageDataConfig):
    """One two-head run. `None` fields take the paper's (or the dataset's) default. Each field's
    help is its command-line flag's (`trainers/train_two_head.py`)."""

    output_dir: str = output_dir_option("runs/two_head")
    dataset: str = option(
        "glyphs",
        "glyphs: embedded rendered characters, the open-set training half (142 classes, 64 "
        "images each; no download); digits: scikit-learn's 8 x 8 digits, 10 classes (tiny, "
        "fast); both split each class's images into train and test (--test_fraction). fgvr: "
        "the FGVR list files (lists/train_all_sub_list.csv, lists/test_all_sub_list.csv) "
        "under --data_dir; folder: "
        "--data_dir/train/<class>/<image> and --data_dir/test/<class>/<image>.",
        choices=DATASETS,
    )
    image_dir: str = option(
        "",
        "fgvr: the images' folder relative to --data_dir (Flowers-102: jpg; Aircraft: "
        "fgvc-aircraft-2013b/data/images; Stanford Cars: empty).",
    )
    backbone: str = option(
        "small_cnn_bn",
        "Backbone; the dissertation uses ResNet-50, Inception-V4 and DenseNet-161 (ImageNet "
        "weights). small_cnn_bn: three convolutions with batch normalization (the embedded "
        "sets' default; without it a softmax head barely moves at lr 0.01).",
        choices=models.BACKBONES,
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
    margin: float | None = option(
        None,
        "Semi-hard triplet margin (--mode=semi_hard only; default: the paper's 0.2).",
        check=non_negative_number,
    )
    center_alpha: float | None = option(
        None,
        "Center-loss center update rate in (0, 1] (--mode=center only; default: the paper's 0.5).",
        check=rate,
    )
    svmax_lambda: float = option(
        0.0,
        "Weight of SVMax (bounded, on the embedding head) added to any mode; 0: none. With "
        "softmax or ole it adds the embedding head.",
        check=non_negative_number,
    )
    embedding_dim: int = option(
        256, "Embedding head size, L2-normalised (paper: 256).", check=positive_int
    )
    learning_rate: float = option(
        0.01,
        "SGD (momentum 0.9) learning rate, decayed linearly to 1e-4 over --train_steps "
        "(paper: 0.01, polynomial decay; TensorFlow's polynomial_decay defaults).",
        check=positive_number,
    )
    train_steps: int | None = option(
        None,
        "Training steps (paper: 40000 ResNet-50/DenseNet-161, 80000 Inception-V4; default "
        "glyphs 3000, digits 1000, fgvr and folder 40000).",
        check=positive_int,
    )
    batch_p: int = option(8, "Classes per batch P (paper: b = 32 = 8 x 4).", check=positive_int)
    batch_k: int = option(4, "Images per class K (paper: 4).", check=positive_int)
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
    recall_ks: tuple[int, ...] = option(
        (1, 4, 8, 16), "K of Recall@K (paper: 1, 4, 8, 16).", check=positive_int
    )
    kmeans_init: str = option("k-means++", "NMI k-means seeding.", choices=KMEANS_INITS)
    kmeans_max_iter: int = option(300, "NMI k-means iterations.", check=positive_int)
    eval_batch_size: int = option(
        256, "Batch size for evaluation.", identity=False, check=positive_int
    )
    jit_compile: bool = option(False, "XLA-compile the train step (slow with SVD on CPU).")
    strategy: str = strategy_option()
    cpu_devices: int = cpu_devices_option()
    cluster_timeout: int = cluster_timeout_option()


def resolve(config, num_classes=None):
    """The config with every default filled in, checked; raises ConfigError naming flags."""
    c = config
    check_fields_and_data(c, EMBEDDED)
    if c.mode == "softmax" and c.regularizer_lambda not in (None, 0.0):
        raise ConfigError(
            "--mode=softmax has no regularizer term; --regularizer_lambda="
            f"{c.regularizer_lambda} would be ignored. Leave it unset (or use --svmax_lambda)."
        )
    for name, mode in (("margin", "semi_hard"), ("center_alpha", "center")):
        if getattr(c, name) is not None and c.mode != mode:
            raise ConfigError(
                f"--{name} applies to --mode={mode} only; with --mode={c.mode} it would be "
                "ignored. Leave it unset."
            )
    check_strategy_combinations(c)
    if c.jit_compile and c.mode == "ole":
        raise ConfigError(
            "--mode=ole cannot be XLA-compiled (the number of classes in a batch decides the "
            "shapes of its SVDs); leave --jit_compile unset."
        )
    if c.batch_k < 2:
        raise ConfigError(f"--batch_k must be >= 2 (positives per class); received {c.batch_k}.")
    if c.batch_p < 2 and c.mode in ("semi_hard", "hard"):
        raise ConfigError(f"--mode={c.mode} needs --batch_p >= 2 (negatives); got {c.batch_p}.")
    if num_classes is not None and c.batch_p > num_classes:
        raise ConfigError(
            f"--batch_p={c.batch_p} exceeds the {num_classes} classes of --dataset={c.dataset}."
        )
    return dataclasses.replace(
        c,
        **resolve_cadence(c, DEFAULT_STEPS[c.dataset]),
        regularizer_lambda=(
            PAPER_LAMBDA.get(c.mode, 0.0) if c.regularizer_lambda is None else c.regularizer_lambda
        ),
        margin=PAPER_MARGIN if c.margin is None and c.mode == "semi_hard" else c.margin,
        center_alpha=(
            PAPER_CENTER_ALPHA if c.center_alpha is None and c.mode == "center" else c.center_alpha
        ),
        input_size=image_input_size(c, EMBEDDED),
        recall_ks=tuple(int(k) for k in c.recall_ks),
    )


def has_embedding_head(config):
    return config.mode in TWO_HEAD_MODES or config.svmax_lambda > 0


# Data.


def _subsets(config, train_labels, test_labels):
    """Indices into the train and test splits after the long-tail and scarce-data options."""
    train_idx, test_idx = np.arange(len(train_labels)), np.arange(len(test_labels))
    if config.imbalance_ratio > 1:
        classes = np.unique(train_labels)
        shares = data.long_tail_fractions(
            len(classes), imbalance_ratio=config.imbalance_ratio, seed=config.seed
        )
        train_idx = data.long_tailed_subset(train_labels, shares, min_per_class=2, seed=config.seed)
        test_shares = shares[np.searchsorted(classes, np.unique(test_labels))]
        test_idx = data.long_tailed_subset(test_labels, test_shares, seed=config.seed)
    if config.train_images_per_class is not None:
        kept = data.cap_per_class(
            train_labels[train_idx],
            images_per_class=config.train_images_per_class,
            seed=config.seed,
        )
        train_idx = train_idx[kept]
    return train_idx, test_idx


def load_split(config):
    """``{"train": (x, y), "test": (x, y), "input_shape", "loaders", "class_names"}`` with labels
    0 .. C-1 shared by both splits; `x` arrays for the embedded sets, paths otherwise."""
    if config.dataset in EMBEDDED:
        images, labels, names = EMBEDDED[config.dataset]()
        train_idx, test_idx = data.split_per_class(
            labels, test_fraction=config.test_fraction, seed=DATA_SEED
        )
        train, test = (images[train_idx], labels[train_idx]), (images[test_idx], labels[test_idx])
        input_shape, loaders = images.shape[1:], None
    else:
        if config.dataset == "fgvr":
            with dataset_refusals(config):
                split = data.read_fgvr_lists(config.data_dir, image_dir=config.image_dir)
        else:
            # Without both, read_image_folder would split the classes (open set) instead.
            if not all(os.path.isdir(os.path.join(config.data_dir, s)) for s in ("train", "test")):
                raise ConfigError(
                    "--dataset=folder needs --data_dir/train/<class>/<image> and "
                    "--data_dir/test/<class>/<image> for classification (the same classes in "
                    f"both); {config.data_dir!r} lacks train/ or test/."
                )
            with dataset_refusals(config):
                split = data.read_image_folder(config.data_dir)
        train, test = split["train"], split["test"]
        size = image_input_size(config, EMBEDDED)
        input_shape = (size, size, 3)
        loaders = (
            data.image_loader(training=True, input_size=size),
            data.image_loader(training=False, input_size=size),
        )
        names = split.get("class_names")
    classes = np.unique(train[1])
    missing = np.setdiff1d(np.unique(test[1]), classes)
    if len(missing):
        raise ConfigError(
            f"--dataset={config.dataset}: {len(missing)} test classes have no training image "
            f"(e.g. label {missing[0]}); classification needs the same classes in both splits."
        )
    train_idx, test_idx = _subsets(config, train[1], test[1])
    train = (train[0][train_idx], np.searchsorted(classes, train[1][train_idx]))
    test = (test[0][test_idx], np.searchsorted(classes, test[1][test_idx]))
    if names is not None:
        names = [names[c] for c in classes]
    return {
        "train": train,
        "test": test,
        "input_shape": tuple(int(s) for s in input_shape),
        "loaders": loaders,
        "class_names": names,
        "num_classes": len(classes),
    }


# Model and loss.


def build_model(config, split):
    return models.build_two_head_model(
        config.backbone,
        input_shape=split["input_shape"],
        num_classes=split["num_classes"],
        embedding_dim=config.embedding_dim,
        embedding_head=has_embedding_head(config),
        weights=config.weights,
    )


def build_losses(config, num_classes):
    """``(losses, loss_weights, state)``: a loss per trained output of `build_model`, their
    weights, and the non-trainable state to checkpoint (the center loss's centers)."""
    lam = config.regularizer_lambda
    out = {"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
    weights = {"logits": 1.0}
    state = {}
    embedding_terms, weight = [], 1.0
    if config.mode == "center":
        center = losses.CenterLoss(
            num_classes,
            config.embedding_dim,
            lambda_=lam,
            alpha=config.center_alpha,
            seed=config.seed,
        )
        embedding_terms.append(center)
        state["center_loss"] = center.centers
    elif config.mode in ("semi_hard", "hard") and lam > 0:
        # The squared Euclidean distance (Sec. 5.3.2), as the TF1 contrib losses the original
        # used; batch-hard with the softplus (soft) margin, semi-hard with margin m.
        if config.mode == "semi_hard":
            triplet = losses.TripletSemiHardLoss(margin=config.margin, distance_metric="squared-L2")
        else:
            triplet = losses.TripletHardLoss(soft=True, distance_metric="squared-L2")
        embedding_terms.append(triplet)
        weight = lam  # the output's weight; the center and OLÉ losses carry their λ themselves
    elif config.mode == "ole":
        out["features"] = losses.OLELoss(lambda_=lam, delta=1.0)
        weights["features"] = 1.0
    if config.svmax_lambda > 0:
        # Scaled by 1 / weight: the output's weight multiplies every term on it.
        embedding_terms.append(losses.SVMaxLoss(lambda_=config.svmax_lambda / weight))
    if embedding_terms:
        first, *rest = embedding_terms
        out["embedding"] = losses.RegularizedLoss(first, rest) if rest else first
        weights["embedding"] = weight
    return out, weights, state


# Evaluation.


def _predict(model, images, loader, batch_size, input_size):
    if loader is None:
        outputs = model.predict(images, batch_size=batch_size, verbose=0)
    else:
        dataset = data.image_dataset(
            images, np.zeros(len(images), np.int64), input_size=input_size, batch_size=batch_size
        ).map(lambda x, y: x)
        outputs = model.predict(dataset, verbose=0)
    return {k: np.asarray(v) for k, v in outputs.items()}


def retrieval_features(outputs):
    """The embedding evaluated for retrieval: the embedding head, or for a single-head network
    the L2-normalised pooled features."""
    if "embedding" in outputs:
        return outputs["embedding"]
    from sklearn.preprocessing import normalize

    # Rows of exact zeros (a dead ReLU map) stay zero rather than dividing by 0.
    return normalize(outputs["features"].astype(np.float64))


def evaluate(config, model, split):
    """The held-out evaluation: ``{"metrics": test accuracy, macro accuracy and the retrieval
    metrics of the retrieval features, "info": per-class accuracy, the error neighbours' agreement
    and the retrieval bookkeeping}``."""
    loaders = split["loaders"]
    loader = None if loaders is None else loaders[1]
    size = split["input_shape"][0]
    test = _predict(model, split["test"][0], loader, config.eval_batch_size, size)
    train = _predict(model, split["train"][0], loader, config.eval_batch_size, size)
    labels = split["test"][1]
    predictions = np.argmax(test["logits"], axis=1)
    accuracies = metrics.classification_accuracies(labels, predictions)
    test_embedding, train_embedding = retrieval_features(test), retrieval_features(train)
    retrieval = metrics.split_retrieval_results(
        metrics.evaluate_retrieval(
            test_embedding,
            labels,
            ks=config.recall_ks,
            kmeans_init=config.kmeans_init,
            kmeans_max_iter=config.kmeans_max_iter,
            seed=config.seed,
        )
    )
    share, errors = metrics.neighbour_agreement_of_errors(
        train_embedding, split["train"][1], test_embedding, labels, predictions
    )
    per_class = {str(k): v for k, v in accuracies["per_class_accuracy"].items()}
    return {
        "metrics": {
            "accuracy": accuracies["accuracy"],
            "macro_accuracy": accuracies["macro_accuracy"],
            **retrieval["metrics"],
        },
        "info": {
            "per_class_accuracy": per_class,
            **retrieval["info"],
            # None (JSON null) when there is no error to explain.
            "error_neighbour_agreement": None if errors == 0 else share,
            "test_errors": errors,
        },
    }


def summary(results):
    return loop_summary(results)


def plot_run(results, directory, title):
    """``training.png`` (loss and training accuracy) and ``accuracy.png`` (test accuracy,
    macro accuracy and R@1 over steps)."""
    plt = pyplot()
    trace, evaluations = results["trace"], results["evaluations"]
    if not trace:
        return
    steps = [t["step"] for t in trace]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for key in sorted(k for k in trace[-1] if k.endswith("loss")):
        ax_loss.plot(steps, [t.get(key, np.nan) for t in trace], label=key)
    ax_loss.set(xlabel="step", ylabel="training loss (window mean)", title="Training losses")
    ax_loss.legend(fontsize=8)
    accuracy_key = next((k for k in trace[-1] if k.endswith("accuracy")), None)
    if accuracy_key:
        ax_acc.plot(steps, [t.get(accuracy_key, np.nan) for t in trace], label="training batches")
    if evaluations:
        ax_acc.plot(
            [e["step"] for e in evaluations],
            [e["accuracy"] for e in evaluations],
            marker="o",
            label="test (top-1)",
        )
        ax_acc.plot(
            [e["step"] for e in evaluations],
            [e["macro_accuracy"] for e in evaluations],
            marker="s",
            ls="--",
            label="test (macro)",
        )
        k = min(int(key.split("_")[-1]) for key in evaluations[-1] if key.startswith("recall_at_"))
        ax_acc.plot(
            [e["step"] for e in evaluations],
            [e[f"recall_at_{k}"] for e in evaluations],
            marker="^",
            ls=":",
            label=f"test R@{k} (embedding)",
        )
        if evaluations[0]["step"] == 0:
            ax_acc.annotate(
                "untrained",
                (0, evaluations[0]["accuracy"]),
                textcoords="offset points",
                xytext=(4, 6),
                fontsize=8,
            )
    ax_acc.set(xlabel="step", ylabel="accuracy", title="Accuracy")
    ax_acc.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, os.path.join(directory, "training.png"))
    plt.close("all")


def _setup(config):
    """Seeds, checks flags, reads the data and builds the model — in that order, so the same
    config always gives the same initial weights."""
    resolve(config)  # refuse bad flags before reading any data
    strategy = make_strategy(config.strategy, config.cpu_devices, config.cluster_timeout)
    keras.utils.set_random_seed(config.seed)
    split = load_split(config)
    config = resolve(config, num_classes=split["num_classes"])
    check_even_split(strategy, config.batch_p * config.batch_k)
    with strategy.scope():
        return config, split, build_model(config, split), strategy


def describe(config):
    extra = f" + SVMax (λ {config.svmax_lambda})" if config.svmax_lambda > 0 else ""
    term = "" if config.mode == "softmax" else f" (λ {config.regularizer_lambda})"
    return f"{config.mode}{term}{extra}"


def train_two_head(config, *, callbacks=()):
    """Trains, evaluates every `eval_every` steps, resumes from `output_dir` if interrupted.

    Returns the results dict (also in ``output_dir/results.json``), with ``status``
    ``"completed"`` or ``"diverged"``.

    Raises:
      ConfigError: a flag combination the experiment cannot run.
      RunRefused: `output_dir` in use, holding another configuration, or damaged.
    """
    started = time.perf_counter()
    config, split, model, strategy = _setup(config)
    evaluated, refresh = local_copy(model, strategy)  # multi_worker: the chief's own copy
    schedule = keras.optimizers.schedules.PolynomialDecay(
        config.learning_rate, config.train_steps, end_learning_rate=1e-4, power=1.0
    )
    with strategy.scope():  # the center loss's centers and the optimizer's slots
        loss, loss_weights, state = build_losses(config, split["num_classes"])
        model.compile(
            optimizer=keras.optimizers.SGD(schedule, momentum=0.9),
            loss=loss,
            loss_weights=loss_weights,
            metrics={"logits": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]},
            jit_compile=config.jit_compile,
        )
    train_x, train_y = split["train"]
    # Keras matches targets to every named output, trained or not: each gets the labels.
    output_names = tuple(model.output_names)

    def batches(start_step):
        out = data.pk_batches(
            train_x,
            train_y,
            batch_p=config.batch_p,
            batch_k=config.batch_k,
            seed=config.seed,
            map_fn=split["loaders"][0] if split["loaders"] else None,
            start_batch=start_step,
        )
        return out.map(
            lambda x, y: (x, {name: y for name in output_names}),
            num_parallel_calls=tf.data.AUTOTUNE,
        )

    def evaluate_at(step, epoch):
        refresh()
        return evaluate(config, evaluated, split)

    counts = np.bincount(train_y, minlength=split["num_classes"])
    title = (
        f"Two-head trainer: {describe(config)}, {config.dataset} ({split['num_classes']} "
        f"classes), seed {config.seed}"
    )
    job = Job(
        name="train_two_head",
        config=config,
        model=model,
        schedule=schedule,
        batches=batches,
        global_batch=config.batch_p * config.batch_k,
        evaluate=evaluate_at,
        plot=lambda results, folder: plot_run(results, folder, title),
        save=lambda folder: model.save(os.path.join(folder, "model.keras")),
        header={
            "data": {
                "num_classes": split["num_classes"],
                "train_images": len(train_y),
                "test_images": len(split["test"][1]),
                "train_images_per_class": {"min": int(counts.min()), "max": int(counts.max())},
                "class_names": split["class_names"],
                "embedding_head": has_embedding_head(config),
                "retrieval_features": "embedding head"
                if has_embedding_head(config)
                else "pooled features (L2-normalised)",
            }
        },
        description=(
            f"{config.dataset} ({split['num_classes']} classes, {len(train_y)} train / "
            f"{len(split['test'][1])} test images), {config.backbone}, {describe(config)}, "
            f"P x K = {config.batch_p} x {config.batch_k}, lr {config.learning_rate}, "
            f"{config.train_steps} steps"
        ),
        state=state,
        callbacks=callbacks,
        diagnose=(
            image_file_diagnosis(split["train"][0], split["test"][0]) if split["loaders"] else None
        ),
    )
    return run_job(job, TwoHeadConfig, started)
