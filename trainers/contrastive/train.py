"""Contrastive pre-training, top to bottom: the resolved config, the data split, the views
per step, the encoder and its `tf_svmax.training.ContrastiveModel`, the harness's run."""

import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from tf_svmax import data, losses, models, training
from trainers.contrastive.config import (
    DATASETS,
    ConfigError,
    describe,
    prior_start_step,
    resolve,
)
from trainers.contrastive.evaluate import evaluate
from trainers.contrastive.plots import plot_run
from trainers.harness import runtime
from trainers.harness.config import resolved
from trainers.harness.loop import Job, run_job

# The pre-training classes' images held out for the probe's test (a fixed split: data seed 0).
DATA_SEED = 0
TEST_FRACTION = 0.25


def load_split(config):
    """``{"pretrain": (x, y), "heldout": (x, y), "open_set": (x, y)}``: the training classes'
    images split per class (pre-training and probe fit / probe test) and the disjoint classes."""
    split = DATASETS[config.dataset].load()
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


def train_contrastive(config, *, callbacks=()):
    """Pre-trains, evaluates every `eval_every` steps, resumes from `output_dir` if interrupted.

    Returns the results dict (also in ``output_dir/results.json``) with ``status``
    ``"completed"`` or ``"diverged"``.

    Raises:
      ConfigError: a flag combination the experiment cannot run.
      RunRefused: `output_dir` in use, holding another configuration, or damaged.
    """
    started = time.perf_counter()
    config = resolved(config, resolve)
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
        distribution=runtime.default_distribution(model),
        global_batch=config.batch_size,
        evaluate=lambda step, epoch: evaluate(config, model, features, split),
        plot=lambda results, folder: plot_run(results, folder, title),
        save_models=lambda folder: model.encoder.save(os.path.join(folder, "encoder.keras")),
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
    return run_job(job, started)
