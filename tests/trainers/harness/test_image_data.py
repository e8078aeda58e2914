"""The start of an image run (strategy, seed, data, model), the file loaders and the P x K
batches labelled for every output."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.data import fake_trees
from tf_svmax import data
from trainers.harness import distribute, image_data, runtime
from trainers.harness.config import ConfigError, model_scope


def _config(**kwargs):
    fields = dict(strategy="default", cpu_devices=0, cluster_timeout=60, seed=3, data_dir=None)
    return types.SimpleNamespace(**{**fields, "batch_p": 2, "batch_k": 2, **kwargs})


def test_file_loaders_load_training_and_evaluation_images_at_the_given_side(tmp_path):
    path = str(tmp_path / "a.jpg")
    fake_trees.write_image(path, 0, size=(40, 30))
    training, evaluation = image_data.file_loaders(24)
    for loader in (training, evaluation):
        image = loader(tf.constant(path))
        assert tuple(image.shape) == (24, 24, 3) and image.dtype == tf.float32
    reference = data.image_loader(training=False, input_size=24)(tf.constant(path))
    np.testing.assert_array_equal(evaluation(tf.constant(path)).numpy(), reference.numpy())


def _start(config):
    """A trainer's start: the strategy and seed, the config resolved with its data (P = 4),
    the model built in `model_scope`."""
    distribution = runtime.start(config)
    config = types.SimpleNamespace(**{**vars(config), "batch_p": 4})
    with model_scope(distribution, config):
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
        in_scope = tf.distribute.get_strategy()
    return config, model, distribution.strategy, in_scope


def test_start_seeds_and_the_same_config_builds_the_same_weights_in_the_strategys_scope():
    runs = [_start(_config()) for _ in range(2)]
    (config, model, strategy, in_scope), (_, again, _, _) = runs
    assert config.batch_p == 4 and in_scope is strategy
    assert strategy is tf.distribute.get_strategy()
    for w, v in zip(model.weights, again.weights, strict=True):  # seeded before building
        np.testing.assert_array_equal(w.numpy(), v.numpy())
    other = _start(_config(seed=4))[1]
    assert not np.array_equal(other.weights[0].numpy(), model.weights[0].numpy())


def test_model_scope_refuses_a_batch_the_replicas_cannot_share(monkeypatch):
    class TwoReplicas:
        num_replicas_in_sync = 2

    monkeypatch.setattr(
        distribute,
        "default_strategy",
        lambda *args: distribute.TensorFlowDistribution(TwoReplicas()),
    )
    config = _config(batch_p=3, batch_k=1)
    strategy = runtime.start(config)
    with pytest.raises(
        ConfigError, match=r"global batch \(3 = --batch_p x --batch_k\).*2 replicas"
    ):
        with model_scope(strategy, config):
            pytest.fail("the scope is entered")


def test_pk_batches_give_every_output_the_labels_of_the_plain_sampler():
    features = np.arange(24, dtype=np.float32).reshape(12, 2)
    labels = np.repeat(np.arange(4), 3)
    config = _config(batch_p=2, batch_k=3)
    plain = data.pk_batches(features, labels, batch_p=2, batch_k=3, seed=3, start_batch=1)
    alone = runtime.pk_batches(config, features, labels, map_fn=None, start_step=1)
    labelled = runtime.pk_batches(
        config, features, labels, map_fn=None, start_step=1, outputs=("embedding", "proxies")
    )
    for (x, y), (x1, y1), (x2, y2) in zip(
        plain.take(3), alone.take(3), labelled.take(3), strict=True
    ):
        np.testing.assert_array_equal(x1.numpy(), x.numpy())
        np.testing.assert_array_equal(y1.numpy(), y.numpy())
        np.testing.assert_array_equal(x2.numpy(), x.numpy())
        assert set(y2) == {"embedding", "proxies"}
        for name in y2:
            np.testing.assert_array_equal(y2[name].numpy(), y.numpy())
