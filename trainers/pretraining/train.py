"""Pretraining, top to bottom: the resolved config, the glyph pretraining source, the batches,
the classifier, the held-out evaluation and the harness's run."""

import os
import time

import keras
import numpy as np
import tensorflow as tf

from tf_svmax import data, models
from tf_svmax.training import ConstantThenPolynomialDecay
from trainers.harness import runtime
from trainers.harness.config import ConfigError, resolved
from trainers.harness.loop import Job, run_job
from trainers.pretraining.config import resolve
from trainers.pretraining.plots import plot_run

BACKBONE_FILE = "backbone.weights.h5"


def batch_indices(num_images, batch_size, train_steps, seed):
    """``[train_steps, batch_size]`` image indices: epoch ``e`` is a permutation of all
    images seeded by ``(seed, e)``, cut into full batches (the last partial one dropped), so
    batch ``i`` is the same whether a run starts at step 0 or resumes at step ``i``."""
    per_epoch = num_images // batch_size
    if per_epoch == 0:
        raise ConfigError(f"--batch_size ({batch_size}) exceeds the {num_images} training images.")
    epochs = -(-train_steps // per_epoch)
    rows = [
        np.random.default_rng([seed, e]).permutation(num_images)[: per_epoch * batch_size]
        for e in range(epochs)
    ]
    return np.concatenate(rows).reshape(-1, batch_size)[:train_steps]


def build_classifier(config, input_shape, num_classes):
    """``(classifier, backbone)``: the backbone's pooled features under a softmax layer;
    ``backbone`` is the `models.build_backbone` model whose weights file is the result."""
    backbone = models.build_backbone(config.backbone, input_shape=input_shape)
    logits = keras.layers.Dense(num_classes, name="logits")(backbone.output)
    return keras.Model(backbone.input, logits, name=f"{config.backbone}_classifier"), backbone


def top_k_accuracies(logits, labels, ks=(1, 5)):
    """``{"top<k>": share of rows whose label is among the k largest logits}``. A tie with the
    label's logit counts against the label (every other class with the same value ranks ahead
    of it), so a network that outputs constants scores 0, not 1."""
    logits = np.asarray(logits, np.float64)
    labels = np.asarray(labels)
    own = logits[np.arange(len(labels)), labels]
    # Rank 0 = best: the classes strictly ahead, plus the ties other than the label itself.
    rank = np.sum(logits > own[:, None], axis=1) + np.sum(logits == own[:, None], axis=1) - 1
    return {f"top{k}": float(np.mean(rank < k)) for k in ks}


def pretrain(config):
    """Pretrains, evaluates every `eval_every` steps, resumes from `output_dir` if
    interrupted (the shared loop, `trainers.harness.loop.run_job`); on completion writes
    ``backbone.weights.h5`` and ``classifier.keras`` there.

    Returns the results dict (also in ``output_dir/results.json``); its ``plateau`` entry is
    the held-out top-1's change over the last evaluation interval.

    Raises:
      ConfigError: a flag combination the program cannot run.
      RunRefused: `output_dir` is in use by another process, holds another configuration,
        or its record is damaged.
    """
    started = time.perf_counter()
    config = resolved(config, resolve)  # refuse bad flags before rendering anything
    keras.utils.set_random_seed(config.seed)
    source = data.load_glyph_pretraining(
        seed=config.seed,
        images_per_class=config.images_per_class,
        held_out_per_class=config.held_out_per_class,
    )
    (x_train, y_train), (x_held, y_held) = source["train"], source["held_out"]
    num_classes = len(source["characters"])
    classifier, backbone = build_classifier(config, x_train.shape[1:], num_classes)
    schedule = ConstantThenPolynomialDecay(config.learning_rate, config.train_steps)
    classifier.compile(
        optimizer=keras.optimizers.SGD(schedule, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="batch_accuracy")],
    )
    indices = batch_indices(len(x_train), config.batch_size, config.train_steps, config.seed)
    images, labels = tf.constant(x_train), tf.constant(y_train)

    def batches(start_step):
        return (
            tf.data.Dataset.from_tensor_slices(indices[start_step:])
            .map(lambda i: (tf.gather(images, i), tf.gather(labels, i)))
            .prefetch(tf.data.AUTOTUNE)
        )

    def evaluate(step, epoch):
        logits = classifier.predict(x_held, batch_size=config.eval_batch_size, verbose=0)
        return {"metrics": top_k_accuracies(logits, y_held), "info": {}}

    def save(folder):
        backbone.save_weights(os.path.join(folder, BACKBONE_FILE))
        classifier.save(os.path.join(folder, "classifier.keras"))

    def summarize(results):
        top1 = [e["top1"] for e in results["evaluations"]]
        return {
            "classes": num_classes,
            "train_images": int(len(x_train)),
            "held_out_images": int(len(x_held)),
            "plateau": None if len(top1) < 2 else top1[-1] - top1[-2],
        }

    job = Job(
        name="pretrain_glyphs",
        config=config,
        model=classifier,
        schedule=schedule,
        batches=batches,
        distribution=runtime.default_distribution(classifier),
        global_batch=config.batch_size,
        evaluate=evaluate,
        plot=plot_run,
        save_models=save,
        description=(
            f"{config.backbone} on {num_classes} pretraining classes ({len(x_train)} images), "
            f"batch {config.batch_size}, lr {config.learning_rate}, {config.train_steps} steps"
        ),
        summarize=summarize,
    )
    return run_job(job, started)
