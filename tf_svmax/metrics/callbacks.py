"""A Keras callback that evaluates retrieval on a held-out split during training, on every
Keras backend (TensorFlow need not be installed)."""

import json
import os

import keras
import numpy as np

from tf_svmax import _backend, checks
from tf_svmax.metrics import retrieval

# The summary file in `log_dir`: one JSON object per evaluation, on every backend.
SCALARS_FILE = "scalars.jsonl"


class RetrievalEvaluation(keras.callbacks.Callback):
    """Runs `evaluate_retrieval` on a test split every N epochs or every N steps.

    Per-epoch results are added to the epoch logs as ``<prefix><metric>`` (so they appear in
    ``model.fit(...).history`` and in later callbacks such as `keras.callbacks.CSVLogger`); every
    evaluation is also appended to `self.history` (with its epoch and optimizer step) and, with
    `log_dir`, written there: on every backend as one JSON line per evaluation in
    ``log_dir/scalars.jsonl`` (``{"step", "epoch", "<prefix><metric>", ...}``), and on the
    TensorFlow backend also as TensorBoard scalars at the optimizer step. (Not on JAX or PyTorch
    where TensorFlow happens to be installed: importing it into such a process would initialise
    its GPUs and take their memory.)

    Args:
      data: Test inputs: an array (with `labels`), or an iterable of `(inputs, labels)` or
        `(inputs, labels, sample_weights)` batches iterated in order once per evaluation (a
        `keras.utils.PyDataset`, a `tf.data.Dataset`, a list), or a function of no arguments
        returning such an iterable (a generator function: a generator itself is spent after one
        evaluation).
      labels: `[n]` labels when `data` is an array, else None.
      every_n_epochs: Evaluate after every N-th epoch (default 1).
      every_n_steps: Evaluate every N optimizer steps instead (exclusive with `every_n_epochs`);
        with ``steps_per_execution > 1``, once after each execution that passed a multiple of N.
      prefix: Prepended to the metric names in logs and TensorBoard.
      log_dir: Directory for the scalars (see above), or None.
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
        if not _is_array(data):
            if labels is not None:
                raise ValueError(
                    "Invalid value for argument `labels`. Expected None when `data` is an "
                    "iterable of (inputs, labels) batches. Received: an array of labels."
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
        """`(embeddings, labels)` of the test split under the current weights, as NumPy."""
        if _is_array(self.data):
            embeddings = self.model.predict(self.data, batch_size=self.batch_size, verbose=0)
            return np.asarray(embeddings), np.asarray(self.labels)
        outputs, labels = [], []
        batches = self.data() if callable(self.data) else self.data
        for batch in batches:
            if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                raise ValueError(
                    "Invalid value for argument `data`: expected a dataset of "
                    "`(inputs, labels)` or `(inputs, labels, sample_weights)` batches. "
                    f"Received a batch of type {type(batch).__name__}."
                )
            inputs, batch_labels = batch[0], batch[1]  # sample weights are not used
            outputs.append(keras.ops.convert_to_numpy(self.model(inputs, training=False)))
            labels.append(np.asarray(batch_labels))
        if not outputs:
            raise ValueError(
                "Invalid value for argument `data`: expected at least one `(inputs, labels)` "
                "batch. Received: no batches (a generator is spent after one evaluation; pass "
                "the function that makes it)."
            )
        return np.concatenate(outputs), np.concatenate(labels)

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
            step = self._optimizer_step()
        record = {"epoch": self._epoch, "step": step, **results}
        self.history.append(record)
        metrics = retrieval.split_retrieval_results(results)["metrics"]
        self._write_summaries(step, metrics)
        if self.verbose:
            shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items())
            print(f"[retrieval @ step {step}] {shown}", flush=True)
        return record

    def _optimizer_step(self):
        """The model's optimizer iterations; 0 for an uncompiled model (no optimizer)."""
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            return 0
        return int(keras.ops.convert_to_numpy(optimizer.iterations))

    def _write_summaries(self, step, metrics):
        if self.log_dir is None:
            return
        os.makedirs(self.log_dir, exist_ok=True)
        scalars = {self.prefix + key: float(value) for key, value in metrics.items()}
        with open(os.path.join(self.log_dir, SCALARS_FILE), "a", encoding="utf-8") as file:
            file.write(json.dumps({"step": step, "epoch": self._epoch, **scalars}) + "\n")
        self._writer = _backend.write_tensorboard_scalars(self._writer, self.log_dir, step, scalars)

    def on_epoch_end(self, epoch, logs=None):
        self._epoch = epoch + 1
        if self.every_n_epochs is not None and (epoch + 1) % self.every_n_epochs == 0:
            results = self.evaluate()
            if logs is not None:
                metrics = retrieval.split_retrieval_results(results)["metrics"]
                logs.update({self.prefix + k: v for k, v in metrics.items()})

    def on_train_begin(self, logs=None):
        self._last_step = self._optimizer_step()

    def on_train_batch_end(self, batch, logs=None):
        if self.every_n_steps is None:
            return
        # With steps_per_execution > 1 this runs once per execution and the step jumps by
        # several: evaluate whenever a multiple of every_n_steps was passed since the last call.
        step = self._optimizer_step()
        if step // self.every_n_steps > self._last_step // self.every_n_steps:
            self.evaluate()
        self._last_step = step

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _is_array(data):
    """True for array input (NumPy, a backend tensor: anything with a shape), which `predict`
    batches; False for an iterable of batches or a function making one."""
    return hasattr(data, "shape") and not callable(data)
