"""Plain progress lines for a log file: cadence on a fake clock, content, and the choice
between them and Keras' progress bar."""

import io
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers.harness import progress
from trainers.harness.config import verbose_option
from trainers.harness.progress import IntervalNote, ProgressLog, duration, fit_progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Clock:
    """A clock the test sets: every call returns `now`."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _no_control_characters(text):
    assert "\r" not in text and "\x1b" not in text and "\b" not in text
    assert all(c == "\n" or c.isprintable() for c in text)


@pytest.mark.parametrize(
    "seconds, expected",
    [(0, "0s"), (44.6, "45s"), (59.4, "59s"), (60, "1m00s"), (185, "3m05s"), (7620, "2h07m")],
)
def test_duration_reads_as_hours_minutes_seconds(seconds, expected):
    assert duration(seconds) == expected


def test_lines_come_at_the_wall_clock_interval_with_step_rate_loss_and_time_left():
    clock, out = _Clock(), io.StringIO()
    log = ProgressLog("toy", every_seconds=10, stream=out, clock=clock)
    log.set_params({"epochs": 3, "steps": 20, "verbose": 0})
    seconds_per_step = 3.0  # a slow step: a line after every 4th step (12 s >= 10 s)
    log.on_train_begin()
    for epoch in range(2):  # as a resumed run would, the last interval is never reached here
        log.on_epoch_begin(epoch)
        for batch in range(20):
            clock.now += seconds_per_step
            log.on_train_batch_end(batch, {"loss": 1.0 / (epoch * 20 + batch + 1)})
        clock.now += 7.0  # the evaluation
        log.on_epoch_end(epoch, {"loss": 0.25, "test_recall": 0.5})
    text = out.getvalue()
    _no_control_characters(text)
    lines = text.splitlines()
    assert lines[0] == (
        "[toy] training to step 60 in 3 evaluation intervals of 20 steps (Keras calls an "
        "interval an epoch; it is not a pass over the data); a progress line every 10s"
    )
    steps = [s + 1 for s in range(40) if (s % 20 + 1) % 4 == 0]  # 4, 8, .., 20, 24, .., 40
    pattern = re.compile(
        r"\[toy\] step (\d+)/60 · interval (\d)/3 · ([\d.]+) steps/s · loss ([\d.e-]+) "
        r"\(mean this interval\) · about (\S+) left"
    )
    progress_lines = [pattern.fullmatch(line) for line in lines if " steps/s" in line]
    assert all(progress_lines) and [int(m[1]) for m in progress_lines] == steps
    for match, step in zip(progress_lines, steps, strict=True):
        assert int(match[2]) == (step - 1) // 20 + 1
        assert float(match[3]) == pytest.approx(1 / seconds_per_step, rel=1e-2)
        assert float(match[4]) == pytest.approx(1.0 / step, rel=1e-3)
        # Wall time per step so far (the first evaluation included) times the steps left.
        elapsed = step * seconds_per_step + (7.0 if step > 20 else 0.0)
        assert match[5] == duration(elapsed / step * (60 - step))
    ends = [line for line in lines if " done at " in line]
    assert ends == [
        "[toy] interval 1/3 done at step 20/60 in 1m07s · loss 0.25 · test_recall 0.5 · "
        f"about {duration(67.0 / 20 * 40)} left",
        "[toy] interval 2/3 done at step 40/60 in 1m07s · loss 0.25 · test_recall 0.5 · "
        f"about {duration(134.0 / 40 * 20)} left",
    ]
    assert len(lines) == 1 + len(steps) + 2  # nothing else


def test_fast_steps_give_one_line_per_interval_of_wall_time_not_per_step():
    clock, out = _Clock(), io.StringIO()
    log = ProgressLog("toy", every_seconds=30, stream=out, clock=clock)
    log.set_params({"epochs": 1, "steps": 1000})
    log.on_train_begin()
    log.on_epoch_begin(0)
    for batch in range(999):
        clock.now += 0.125  # eight steps per second (exact in binary): a line every 240 steps
        log.on_train_batch_end(batch, {"loss": 0.5})
    rates = re.findall(r"step (\d+)/1000 · interval 1/1 · ([\d.]+) steps/s", out.getvalue())
    assert [int(s) for s, _ in rates] == [240, 480, 720, 960]
    assert all(float(r) == pytest.approx(8.0, rel=1e-2) for _, r in rates)


def test_a_resumed_run_counts_from_its_first_step():
    clock, out = _Clock(), io.StringIO()
    log = ProgressLog("toy", every_seconds=5, stream=out, clock=clock)
    log.set_params({"epochs": 4, "steps": 10})
    log.on_train_begin()
    log.on_epoch_begin(2)  # resumed at step 20
    for batch in range(5):
        clock.now += 1.0
        log.on_train_batch_end(batch, {})  # no loss logged: none shown
    assert out.getvalue().splitlines()[-1] == (
        f"[toy] step 25/40 · interval 3/4 · 1 steps/s · about {duration(15.0)} left"
    )


@pytest.mark.parametrize("every_seconds", [0, -1.0, float("inf"), True, "15", None])
def test_a_bad_interval_is_refused_by_name(every_seconds):
    with pytest.raises(
        ValueError, match=r"`every_seconds`. Expected a finite number > 0. Received"
    ):
        ProgressLog("toy", every_seconds=every_seconds)


def test_the_terminal_keeps_the_keras_bar_and_a_file_gets_plain_lines():
    verbose, callbacks = fit_progress(1, "toy", stream=_Terminal())
    assert verbose == 1 and [type(c) for c in callbacks] == [IntervalNote]  # the bar
    for verbose_flag, stream in [(1, io.StringIO()), (2, io.StringIO()), (2, _Terminal())]:
        verbose, callbacks = fit_progress(verbose_flag, "toy", stream=stream)
        assert verbose == 0 and [type(c) for c in callbacks] == [ProgressLog]
        assert callbacks[0].stream is stream
    assert fit_progress(0, "toy", stream=io.StringIO()) == (0, [])
    with pytest.raises(ValueError, match=r"`--verbose`. Expected 0, 1 or 2. Received: --verbose=3"):
        fit_progress(3, "toy", stream=io.StringIO())


def test_the_flag_help_states_the_interval():
    assert f"every {progress.EVERY_SECONDS:.0f} s" in verbose_option().metadata["help"]


def test_under_keras_fit_the_lines_are_plain_and_follow_the_steps(capsys):
    """The callback inside a real `fit` (Keras' own batch and epoch hooks), the fake clock
    advancing one second per step."""
    clock, out = _Clock(), io.StringIO()

    class Tick(keras.callbacks.Callback):  # runs before ProgressLog in the list
        def on_train_batch_end(self, batch, logs=None):
            clock.now += 1.0

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((8, 2), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4).repeat()
    verbose, callbacks = fit_progress(1, "toy", stream=out)
    callbacks[0].clock, callbacks[0].every_seconds = clock, 3.0
    model.fit(data, epochs=2, steps_per_epoch=7, verbose=verbose, callbacks=[Tick(), *callbacks])
    text = out.getvalue()
    _no_control_characters(text)
    assert re.findall(r"\] step (\d+)/14", text) == ["3", "6", "10", "13"]  # restarts per interval
    assert re.findall(r"interval (\d)/2 done at step (\d+)/14", text) == [("1", "7"), ("2", "14")]
    assert capsys.readouterr().out == ""  # Keras itself printed nothing
