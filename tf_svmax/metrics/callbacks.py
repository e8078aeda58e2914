"""A Keras callback that evaluates retrieval on a held-out split during training."""

import keras
import numpy as np
import tensorflow as tf

from tf_svmax import checks
from tf_svmax.metrics import retrieval


class RetrievalEvaluation(keras.callbacks.Callback):
    """Runs `evaluate_retrieval` on a test split every N epochs or every N steps.

    Per-epoch results are added to the epoch logs as ``<prefix><metric>`` (so they appear in
    ``model.fit(...).history`` and in later callbacks such as `keras.callbacks.CSVLogger`); every
    evaluation is also appended to `self.history` (with its epoch and optimizer step) and, with
    `log_dir`, written to TensorBoard at the optimizer step.

    Args:
      data: Test inputs: an array (with `labels`) or a `tf.data.Dataset` of `(inputs, labels)`
        batches, iterated in order once per evaluation.
      labels: `[n]` labels when `data` is an array.
      every_n_epochs: Evaluate after every N-th epoch (default 1).
      every_n_steps: Evaluate every N optimizer steps instead (exclusive with `every_n_epochs`);
        with ``steps_per_execution > 1``, once after each execution that passed a multiple of N.
      prefix: Prepended to the metric names in logs and TensorBoard.
      log_dir: TensorBoard directory for the scalars, or None.
      batch_size: Batch size for embedding an array `data`.
      verbose: 1 prints one line per evaluation.
      **evaluate_kwargs: Passed to `evaluate_retrieval` (`ks`, `kmeans_max_iter`, ...).

    Example:
      >>> callback = RetrievalEvaluation(x_test, y_test, every_n_epochs=5, log_dir="logs")
      >>> model.fit(train_batches, epochs=50, steps_per_epoch=100, callbacks=[callback])
    """

    def __init__(
        self,
        data,
        labels=None,
        *,
        every_n_epochs=None,
        every_n_steps=None,
        prefix="test_",
        log_dir=None,
        batch_size=256,
        verbose=0,
        **evaluate_kwargs,
    ):
        super().__init__()
        if every_n_epochs is not None and every_n_steps is not None:
            raise ValueError(
                "Invalid arguments: pass `every_n_epochs` or `every_n_steps`, not both. "
                f"Received: every_n_epochs={every_n_epochs}, every_n_steps={every_n_steps}"
            )
        if every_n_steps is None:
            every_n_epochs = checks.check_positive_int(
                1 if every_n_epochs is None else every_n_epochs, "every_n_epochs"
            )
        else:
            every_n_steps = checks.check_positive_int(every_n_steps, "every_n_steps")
        if isinstance(data, tf.data.Dataset):
            if labels is not None:
                raise ValueError(
                    "Invalid value for argument `labels`. Expected None when `data` is a "
                    "tf.data.Dataset of (inputs, labels). Received: an array of labels."
                )
        elif labels is None:
            raise ValueError(
                "Invalid value for argument `labels`. Expected the labels of the array `data`. "
                "Received: labels=None"
            )
        self.data, self.labels = data, labels
        self.every_n_epochs, self.every_n_steps = every_n_epochs, every_n_steps
        self.prefix, self.log_dir = str(prefix), log_dir
        self.batch_size = checks.check_positive_int(batch_size, "batch_size")
        self.verbose = verbose
        self.evaluate_kwargs = evaluate_kwargs
        self.history = []
        self._writer = None
        self._epoch = 0
        self._last_step = 0

    def embed(self):
        """`(embeddings, labels)` of the test split under the current weights."""
        if isinstance(self.data, tf.data.Dataset):
            outputs, labels = [], []
            for batch in self.data:
                if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                    raise ValueError(
                        "Invalid value for argument `data`: expected a dataset of "
                        "`(inputs, labels)` or `(inputs, labels, sample_weights)` batches. "
                        f"Received a batch of type {type(batch).__name__}."
                    )
                inputs, batch_labels = batch[0], batch[1]  # sample weights are not used
                outputs.append(np.asarray(self.model(inputs, training=False)))
                labels.append(np.asarray(batch_labels))
            return np.concatenate(outputs), np.concatenate(labels)
        embeddings = self.model.predict(self.data, batch_size=self.batch_size, verbose=0)
        return np.asarray(embeddings), np.asarray(self.labels)

    def evaluate(self, step=None, epoch=None):
        """Evaluates now; returns and records the result dict.

        Args:
          step: The training step to record (default: the model's optimizer iterations, 0 for
            an uncompiled model; pass it when the model evaluated is part of the one trained).
          epoch: The epoch to record (default: the number of epochs this callback has seen
            end; pass it when the callback is not in the `fit` call).
        """
        if epoch is not None:
            self._epoch = checks.check_non_negative_int(epoch, "epoch")
        embeddings, labels = self.embed()
        results = retrieval.evaluate_retrieval(embeddings, labels, **self.evaluate_kwargs)
        if step is None:
            optimizer = getattr(self.model, "optimizer", None)  # absent on an uncompiled model
            step = int(optimizer.iterations.numpy()) if optimizer is not None else 0
        record = {"epoch": self._epoch, "step": step, **results}
        self.history.append(record)
        metrics = retrieval.split_retrieval_results(results)["metrics"]
        self._write_tensorboard(step, metrics)
        if self.verbose:
            shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items())
            print(f"[retrieval @ step {step}] {shown}", flush=True)
        return record

    def _write_tensorboard(self, step, metrics):
        if self.log_dir is None:
            return
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(self.log_dir))
        with self._writer.as_default(step=step):
            for key, value in metrics.items():
                tf.summary.scalar(self.prefix + key, value)
        self._writer.flush()

    def on_epoch_end(self, epoch, logs=None):
        self._epoch = epoch + 1
        if self.every_n_epochs is not None and (epoch + 1) % self.every_n_epochs == 0:
            results = self.evaluate()
            if logs is not None:
                metrics = retrieval.split_retrieval_results(results)["metrics"]
                logs.update({self.prefix + k: v for k, v in metrics.items()})

    def on_train_begin(self, logs=None):
        optimizer = getattr(self.model, "optimizer", None)
        self._last_step = int(optimizer.iterations.numpy()) if optimizer is not None else 0

    def on_train_batch_end(self, batch, logs=None):
        if self.every_n_steps is None:
            return
        # With steps_per_execution > 1 this runs once per execution and the step jumps by
        # several: evaluate whenever a multiple of every_n_steps was passed since the last call.
        step = int(self.model.optimizer.iterations.numpy())
        if step // self.every_n_steps > self._last_step // self.every_n_steps:
            self.evaluate()
        self._last_step = step

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
