"""What the image experiments (retrieval, two-head) share: how a run starts (strategy, seed,
data, model, in that order), the loaders of image files, and the P x K batches with their labels
given to every output of the model."""

import contextlib

import keras
import tensorflow as tf

from tf_svmax import data
from trainers.harness.config import weights_refusals
from trainers.harness.distribute import check_even_split, check_same_config, make_strategy


def file_loaders(input_size):
    """``(training, evaluation)`` `path -> image` loaders of image files at `input_size` (the
    resolved config's): random crop and flip for training, center crop for evaluation."""
    return (
        data.image_loader(training=True, input_size=input_size),
        data.image_loader(training=False, input_size=input_size),
    )


def start(config):
    """The run's distribution strategy, made before any TensorFlow op runs, then the seed. A
    trainer reads its split after it and builds its model in `model_scope`, in that order, so
    the same config always starts from the same weights. The fields read here (strategy,
    cpu_devices, cluster_timeout, seed) are ones resolving never changes."""
    strategy = make_strategy(config.strategy, config.cpu_devices, config.cluster_timeout)
    keras.utils.set_random_seed(config.seed)
    return strategy


@contextlib.contextmanager
def model_scope(strategy, config):
    """Where a trainer builds its model from its resolved `config`: the strategy's scope.

    Raises:
      ConfigError: the workers of a multi-worker cluster hold different configs
        (`check_same_config`: every worker holds the chief's, or all refuse, before any
        variable is made), the global batch P x K does not split evenly over the replicas, or
        (building) a --weights file that does not fit the backbone.
    """
    check_same_config(strategy, config)
    check_even_split(strategy, config.batch_p * config.batch_k)
    with strategy.scope(), weights_refusals(config):  # --weights of another backbone
        yield


def pk_batches(
    config,
    features,
    labels,
    *,
    map_fn,
    start_step,
    outputs=None,
    num_parallel_calls=tf.data.AUTOTUNE,
):
    """`data.pk_batches` with the config's P, K and seed from batch `start_step`; with
    `outputs` (the output names of a model with several), each batch's labels are given to
    every one of them: Keras matches targets to outputs by key, trained or not.
    `num_parallel_calls` is `map_fn`'s parallelism (the trainers' AUTOTUNE; the input-pipeline
    benchmark varies it)."""
    batches = data.pk_batches(
        features,
        labels,
        batch_p=config.batch_p,
        batch_k=config.batch_k,
        seed=config.seed,
        map_fn=map_fn,
        start_batch=start_step,
        num_parallel_calls=num_parallel_calls,
    )
    if not outputs:
        return batches
    names = tuple(outputs)
    return batches.map(
        lambda x, y: (x, {name: y for name in names}), num_parallel_calls=tf.data.AUTOTUNE
    )
