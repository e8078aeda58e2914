"""Training progress a person can follow in a log file: plain lines on a wall-clock cadence.

Keras' progress bar redraws one line with carriage returns and colour codes: right on a
terminal, unreadable in a file, and Keras' one-line-per-epoch alternative (``verbose=2``) is
silent for a whole evaluation interval (a minute or more) after an ``Epoch 1/4`` whose "epoch"
is not a pass over the data. `ProgressLog` writes instead, to a stream that is not a terminal:

- at the start, what is trained and what an interval is (the harness runs `fit` with one Keras
  "epoch" per evaluation interval of ``eval_every`` steps);
- at least every `every_seconds` of wall time, one line: step/total, the interval, steps per
  second since the previous line, the loss (Keras' running mean since the interval began) and
  an estimate of the time left;
- at the end of each interval, one line with every logged value (the evaluation's ``test_*``
  metrics included) and the time the interval took.

Only ``\\n`` ends a line, and nothing else is written: no carriage returns, no colour codes.
`fit_progress` chooses between it and Keras' bar; `trainers.harness.loop.run_job` uses it for
every trainer.
"""

import sys
import time

import keras
import numpy as np

from tf_svmax import checks  # the library's validators

# A line at least this often: a person watching a log (or a CI log's idle timeout) sees the run
# move, and a run of hours still writes only a few hundred lines per hour.
EVERY_SECONDS = 15.0


def duration(seconds):
    """`seconds` as a person reads it: ``45s``, ``3m05s``, ``2h07m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _number(value):
    return f"{float(value):.4g}"


class IntervalNote(keras.callbacks.Callback):
    """One line when training begins: the steps to train, and that an interval (Keras'
    "epoch" under the harness) is ``eval_every`` steps, not a pass over the data. Reads Keras'
    ``params`` (``epochs``, ``steps``), so it works under `fit` and
    `trainers.harness.custom_fit.fit` alike.

    Args:
      name: The program's name, the lines' prefix (``[name]``, as the harness's other lines).
      stream: Where the line goes (default: sys.stdout when the callback is made).
    """

    def __init__(self, name, stream=None):
        super().__init__()
        self.name = name
        self.stream = sys.stdout if stream is None else stream

    def _write(self, text):
        self.stream.write(f"[{self.name}] {text}\n")
        self.stream.flush()

    def _intro(self):
        return (
            f"training to step {self.total} in {self.epochs} evaluation intervals of "
            f"{self.steps} steps (Keras calls an interval an epoch; it is not a pass over the "
            "data)"
        )

    def on_train_begin(self, logs=None):
        self.steps = int(self.params["steps"])
        self.epochs = int(self.params["epochs"])
        self.total = self.steps * self.epochs
        self._write(self._intro())


class ProgressLog(IntervalNote):
    """Plain progress lines for `fit` run with one Keras "epoch" per evaluation interval (see
    the module docstring), after `IntervalNote`'s line.

    Args:
      name: The program's name, the lines' prefix (``[name]``, as the harness's other lines).
      every_seconds: The wall time between two progress lines (> 0).
      stream: Where the lines go (default: sys.stdout when the callback is made).
      clock: Seconds as a float, monotonic (default `time.monotonic`; the tests pass a fake).
    """

    def __init__(self, name, every_seconds=EVERY_SECONDS, stream=None, clock=time.monotonic):
        super().__init__(name, stream)
        if (
            isinstance(every_seconds, bool)
            or not isinstance(every_seconds, (int, float))
            or not 0 < every_seconds < float("inf")
        ):
            raise ValueError(checks.invalid("every_seconds", "a finite number > 0", every_seconds))
        self.every_seconds = float(every_seconds)
        self.clock = clock

    def _intro(self):
        return f"{super()._intro()}; a progress line every {duration(self.every_seconds)}"

    def _step(self, epoch, batch):
        return epoch * self.steps + batch

    def _eta(self, step, now):
        """Time left at the mean wall time per step since training began (evaluations and the
        first steps' tracing included, so it settles after the first interval)."""
        done = step - self.first_step
        if done <= 0:
            return "unknown"
        return duration((now - self.began) / done * (self.total - step))

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self.began = self.last_time = self.clock()
        self.first_step = self.last_step = None

    def on_epoch_begin(self, epoch, logs=None):
        step = self._step(epoch, 0)
        if self.first_step is None:  # a resumed run starts past step 0
            self.first_step = step
        self.epoch, self.interval_began = epoch, self.clock()
        # The rate's window restarts after an evaluation: it measures training steps.
        self.last_step, self.last_time = step, self.interval_began

    def on_train_batch_end(self, batch, logs=None):
        now = self.clock()
        if now - self.last_time < self.every_seconds:
            return
        step = self._step(self.epoch, batch + 1)
        rate = (step - self.last_step) / (now - self.last_time)
        loss = (logs or {}).get("loss")
        loss = "" if loss is None else f" · loss {_number(loss)} (mean this interval)"
        self._write(
            f"step {step}/{self.total} · interval {self.epoch + 1}/{self.epochs} · "
            f"{rate:.3g} steps/s{loss} · about {self._eta(step, now)} left"
        )
        self.last_step, self.last_time = step, now

    def on_epoch_end(self, epoch, logs=None):
        now = self.clock()
        step = self._step(epoch + 1, 0)
        values = " · ".join(f"{k} {_number(v)}" for k, v in (logs or {}).items() if np.ndim(v) == 0)
        self._write(
            f"interval {epoch + 1}/{self.epochs} done at step {step}/{self.total} in "
            f"{duration(now - self.interval_began)}"
            + (f" · {values}" if values else "")
            + (f" · about {self._eta(step, now)} left" if step < self.total else "")
        )
        self.last_time = now


def fit_progress(verbose, name, stream=None, every_seconds=EVERY_SECONDS):
    """What `fit` gets for the trainers' ``--verbose``: ``(keras_verbose, callbacks)``.

    0: nothing. 1 on a terminal: Keras' progress bar (its ``Epoch k/n`` counts evaluation
    intervals). 1 elsewhere, and 2 anywhere: Keras silent and a `ProgressLog` writing plain
    lines to `stream` (default sys.stdout).
    """
    stream = sys.stdout if stream is None else stream
    verbose = checks.progress_verbosity(verbose, "--verbose", stream)
    if verbose == 1:
        return 1, [IntervalNote(name, stream=stream)]
    if verbose == 2:
        return 0, [ProgressLog(name, every_seconds=every_seconds, stream=stream)]
    return 0, []
