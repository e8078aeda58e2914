"""`custom_fit.fit` against Keras' own `Model.fit`: the same steps, logs and callback hooks.

The loop exists for MultiWorkerMirroredStrategy, where `fit` cannot run (its multi-process
proof is in test_distribute.py); here, on the default strategy, `fit` is the independent
reference it must equal.
"""

import io
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_svmax import losses, metrics
from trainers.harness import custom_fit, progress


class _Recorder(keras.callbacks.Callback):
    def __init__(self, stop_at=None):
        super().__init__()
        self.events, self.stop_at = [], stop_at

    def on_train_begin(self, logs=None):
        self.events.append(("train_begin",))

    def on_epoch_begin(self, epoch, logs=None):
        self.events.append(("epoch_begin", epoch))

    def on_train_batch_end(self, batch, logs=None):
        self.events.append(("batch_end", batch, {k: round(float(v), 5) for k, v in logs.items()}))
        if self.stop_at == (len([e for e in self.events if e[0] == "batch_end"])):
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self.events.append(("epoch_end", epoch, sorted(logs)))

    def on_train_end(self, logs=None):
        self.events.append(("train_end",))


def _model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(5), keras.layers.UnitNormalization()]
    )
    model.compile(
        keras.optimizers.SGD(keras.optimizers.schedules.PolynomialDecay(0.5, 12), momentum=0.9),
        loss=losses.RegularizedLoss(
            losses.TripletSemiHardLoss(margin=0.2), [losses.SVMaxLoss(lambda_=1.0)]
        ),
        metrics=metrics.svmax_metrics(),
    )
    return model


def _dataset():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16 * 12, 6)).astype(np.float32)
    y = np.repeat(np.arange(16 * 3), 4)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


@pytest.mark.parametrize("stop_at", [None, 5])
def test_the_loop_takes_the_steps_and_calls_the_hooks_of_keras_fit(stop_at):
    settings = dict(epochs=4, initial_epoch=1, steps_per_epoch=3, verbose=0)
    reference, ours = _model(), _model()
    expected, got = _Recorder(stop_at), _Recorder(stop_at)
    reference.fit(_dataset(), shuffle=False, callbacks=[expected], **settings)
    history = custom_fit.fit(ours, _dataset(), callbacks=[got], **settings)
    assert got.events == expected.events
    assert len([e for e in got.events if e[0] == "batch_end"]) == (stop_at or 9)
    for a, b in zip(ours.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert int(ours.optimizer.iterations.numpy()) == int(reference.optimizer.iterations.numpy())
    assert history is ours.history and history.history.keys() == reference.history.history.keys()
    # The weights moved: equal trainings, not two idle models.
    assert np.abs(ours.get_weights()[0] - _model().get_weights()[0]).max() > 1e-2


def test_the_progress_lines_are_those_of_keras_fit():
    """The harness's plain progress lines (`trainers.harness.progress`) read the same under
    this loop as under `fit`, on a fake clock of one second per step; a resumed run."""

    def progress_of(train):
        seconds = [0.0]
        out = io.StringIO()

        class Tick(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                seconds[0] += 1.0

        log = progress.ProgressLog("toy", every_seconds=2, stream=out, clock=lambda: seconds[0])
        train(callbacks=[Tick(), log], epochs=4, initial_epoch=1, steps_per_epoch=3, verbose=0)
        return out.getvalue()

    expected = progress_of(lambda **kw: _model().fit(_dataset(), shuffle=False, **kw))
    got = progress_of(lambda **kw: custom_fit.fit(_model(), _dataset(), **kw))
    assert got == expected
    assert re.findall(r"\] step (\d+)/12", got) == ["5", "8", "11"]
    assert len(re.findall(r"done at step", got)) == 3


class _TwoPlayers(keras.Model):
    """A custom `train_step` of the GAN trainer's kind: two sub-models, one optimizer each
    (the second built here), its own trackers."""

    def __init__(self):
        super().__init__()
        self.first = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
        self.second = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        self.second_optimizer = keras.optimizers.Adam(0.01)
        self.trackers = [keras.metrics.Mean(name="first_loss"), keras.metrics.Mean(name="second")]

    @property
    def metrics(self):
        return self.trackers

    def call(self, x):
        return self.second(self.first(x))

    def train_step(self, data):
        x, _ = data
        with tf.GradientTape() as tape:
            second = tf.reduce_mean(tf.square(self.second(self.first(x)) - 1.0))
        variables = self.second.trainable_variables
        self.second_optimizer.apply(tape.gradient(second, variables), variables)
        with tf.GradientTape() as tape:
            first = tf.reduce_mean(tf.square(self.first(x)))
        variables = self.first.trainable_variables
        self.optimizer.apply(tape.gradient(first, variables), variables)
        self.trackers[0].update_state(first)
        self.trackers[1].update_state(second)
        return {t.name: t.result() for t in self.trackers}


def _players():
    keras.utils.set_random_seed(5)
    model = _TwoPlayers()
    model.compile(keras.optimizers.SGD(0.1))
    return model


def test_a_custom_train_step_runs_as_in_keras_fit():
    settings = dict(epochs=2, initial_epoch=0, steps_per_epoch=4, verbose=0)
    reference, ours = _players(), _players()
    expected, got = _Recorder(), _Recorder()
    reference.fit(_dataset(), shuffle=False, callbacks=[expected], **settings)
    custom_fit.fit(ours, _dataset(), callbacks=[got], **settings)
    assert got.events == expected.events
    for a, b in zip(ours.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert np.abs(ours.get_weights()[0] - _players().get_weights()[0]).max() > 1e-2


def _contrastive():
    from tf_svmax import losses as library_losses
    from tf_svmax.training import ContrastiveModel

    keras.utils.set_random_seed(7)
    inputs = keras.Input((4, 4, 1))
    outputs = keras.layers.UnitNormalization()(
        keras.layers.Dense(6)(keras.layers.Flatten()(inputs))
    )
    encoder = keras.Model(inputs, outputs)
    model = ContrastiveModel(
        encoder,
        views=2,
        loss_fn=library_losses.LORACLoss(temperature=0.2, beta=float("inf")),
        prior_loss_fn=None,
        prior_start=0,
        key_momentum=0.9,
        queue_size=16,
        seed=0,
    )
    model.compile(keras.optimizers.SGD(0.5, momentum=0.9), jit_compile=False)
    return model


def test_the_contrastive_train_step_runs_as_in_keras_fit():
    """`ContrastiveModel`'s step: a momentum key encoder, a negative queue (state outside the
    optimizer) and its own trackers."""
    views = np.random.default_rng(1).standard_normal((8 * 6, 2, 4, 4, 1)).astype(np.float32)
    settings = dict(epochs=2, initial_epoch=0, steps_per_epoch=3, verbose=0)
    reference, ours = _contrastive(), _contrastive()
    expected, got = _Recorder(), _Recorder()
    reference.fit(
        tf.data.Dataset.from_tensor_slices(views).batch(8),
        shuffle=False,
        callbacks=[expected],
        **settings,
    )
    custom_fit.fit(
        ours, tf.data.Dataset.from_tensor_slices(views).batch(8), callbacks=[got], **settings
    )
    assert got.events == expected.events
    for a, b in zip(ours.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.queue(None), reference.queue(None), atol=1e-6)
    assert np.abs(ours.get_weights()[0] - _contrastive().get_weights()[0]).max() > 1e-3
