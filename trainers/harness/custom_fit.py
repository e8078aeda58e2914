"""`fit` for strategies Keras 3's own `Model.fit` cannot run on (MultiWorkerMirroredStrategy).

Keras 3's `fit` fails on `tf.distribute.MultiWorkerMirroredStrategy` (keras-team/keras#20585,
open upstream) in two places, both outside the training step itself: its first-batch build
reduces the nested distributed batch with one `strategy.reduce` (which that strategy refuses),
and its per-step reduction of the logged metrics calls ``strategy.reduce("MEAN", scalar,
axis=0)`` (which fails on a scalar). The step itself is sound there.

So this loop keeps everything of `fit` that defines the numbers — the model's own
`train_step` (Keras' default, or a custom one such as `tf_svmax.training.ContrastiveModel`'s),
run by ``strategy.run`` on each replica's share of the batch, its gradients summed across all
replicas by the optimizer (one all-reduce per step, as in `fit`), the learning-rate schedule
read from the optimizer's step counter — and replaces the two reductions: the model is built
by its first step (variables are created on the first trace, in the strategy's scope), and
each logged value is reduced on its own, the mean over the replicas as `fit` takes it.

It drives the same Keras callbacks as `fit` (`CallbackList`: batch and epoch hooks, the
progress bar, `History`, `stop_training`), so the harness's cadence, trace, NaN guard and
TensorBoard work unchanged. It does not offer what the harness does not use: validation data,
class weights, ``steps_per_execution`` > 1.
"""

import keras
import tensorflow as tf


def _reduce_logs(strategy, outputs):
    """Every logged value's mean over the replicas, one reduction per tensor (a nested
    `strategy.reduce` fails on MultiWorkerMirroredStrategy). Keras' metrics report each
    replica's running value; equal replica shares make their mean the global batch's."""
    return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), outputs)


def train_function(model):
    """One training step over the next element of a distributed iterator: the model's
    `train_step` on every replica, the logs reduced. As in `fit`, the step and its reductions
    are one `tf.function`, compiled with XLA when the model was compiled with
    ``jit_compile=True``; taking the next batch stays outside it."""
    strategy = model.distribute_strategy

    def step_on_data(data):
        return _reduce_logs(strategy, strategy.run(model.train_step, args=(data,)))

    step_on_data = tf.function(
        step_on_data, jit_compile=bool(model.jit_compile), reduce_retracing=True
    )

    @tf.function
    def one_step(iterator):
        return step_on_data(next(iterator))

    return one_step


def fit(model, dataset, *, epochs, initial_epoch, steps_per_epoch, callbacks, verbose):
    """Trains `model` like ``model.fit(dataset, epochs=..., initial_epoch=...,
    steps_per_epoch=..., callbacks=..., verbose=...)`` with the model's `train_step` under its
    distribution strategy (see the module docstring). `dataset` yields the model's batches
    (a `tf.distribute` distributed dataset under a multi-replica strategy) for at least
    ``(epochs - initial_epoch) * steps_per_epoch`` steps.

    Returns the `keras.callbacks.History` (also ``model.history``), as `fit` does.
    """
    callback_list = keras.callbacks.CallbackList(
        list(callbacks),
        add_history=True,
        add_progbar=verbose != 0,
        model=model,
        verbose=verbose,
        epochs=epochs,
        steps=steps_per_epoch,
    )
    step = train_function(model)
    iterator = iter(dataset)
    model.stop_training = False
    callback_list.on_train_begin()
    logs = {}
    for epoch in range(initial_epoch, epochs):
        model.reset_metrics()  # the logs are running means since the epoch began, as in fit
        callback_list.on_epoch_begin(epoch)
        for batch in range(steps_per_epoch):
            callback_list.on_train_batch_begin(batch)
            logs = {k: v.numpy() for k, v in step(iterator).items()}
            callback_list.on_train_batch_end(batch, logs)
            if model.stop_training:
                break
        epoch_logs = dict(logs)
        callback_list.on_epoch_end(epoch, epoch_logs)
        logs = epoch_logs
        if model.stop_training:
            break
    callback_list.on_train_end(logs)
    return model.history
