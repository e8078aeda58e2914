"""The shared training loop on a toy job: trace windows, cadence, extra state, resume."""

import dataclasses
import io
import re
import signal

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers.harness import runtime
from trainers.harness.flags import option
from trainers.harness.loop import (
    Job,
    evaluation_record,
    fit_verbosity,
    interrupts_deferred,
    non_finite_variables,
    run_job,
    summary,
    window_means,
)


def test_window_means_are_the_means_of_the_window_steps():
    values = np.random.default_rng(0).normal(size=12)
    # Keras-style running means after 5 and after 12 steps, as sums.
    start = {"loss": values[:5].mean() * 5}
    end = {"loss": values.mean() * 12}
    np.testing.assert_allclose(window_means(start, 5, end, 12)["loss"], values[5:].mean())


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    output_dir: str = option("", "Where.", identity=False)
    train_steps: int = option(6, "Steps.")
    eval_every: int = option(3, "Interval.")
    trace_every: int = option(1, "Trace interval.")
    evaluate_untrained: bool = option(True, "Step 0.")
    verbose: int = option(0, "Quiet.", identity=False)


def _job(config, counter):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = np.random.default_rng(0).normal(size=(64, 2)).astype("float32")
    y = x @ np.array([[1.0], [-2.0]], "float32")

    def batches(start_step):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
        return ds.skip(start_step)

    def evaluate(step, epoch):
        counter.assign_add(1.0)  # extra state the loop must checkpoint and restore
        mse = float(model.evaluate(x, y, verbose=0))
        return {"metrics": {"mse": mse}, "info": {"rows": len(x)}}

    return Job(
        name="toy",
        config=config,
        model=model,
        schedule=lambda step: 0.1,
        batches=batches,
        distribution=runtime.default_distribution(model),
        global_batch=8,
        evaluate=evaluate,
        plot=lambda results, folder: None,
        save_models=lambda folder: None,
        state={"counter": counter},
    )


def test_cadence_trace_and_extra_state_resume(tmp_path):
    config = ToyConfig(output_dir=str(tmp_path))
    counter = tf.Variable(0.0)
    results = run_job(_job(config, counter), started=0.0)
    assert results["status"] == "completed"
    assert [e["step"] for e in results["evaluations"]] == [0, 3, 6]
    assert [t["step"] for t in results["trace"]] == [1, 2, 3, 4, 5, 6]
    assert all(t["step_seconds"] > 0 and t["learning_rate"] == 0.1 for t in results["trace"])
    assert results["evaluations"][-1]["mse"] < results["evaluations"][0]["mse"]
    # One flat record per evaluation; the metric names listed once.
    assert results["evaluations"][0] == {
        "step": 0,
        "epoch": 0,
        "mse": results["evaluations"][0]["mse"],
        "rows": 64,
    }
    assert results["metric_keys"] == ["mse"]
    # The counter was 3 at the last checkpoint (step 6); a longer run resumes it from there.
    longer = dataclasses.replace(config, train_steps=9)
    with pytest.raises(ValueError, match="differs in: train_steps"):
        run_job(_job(longer, tf.Variable(0.0)), started=0.0)
    fresh = tf.Variable(0.0)
    again = run_job(_job(config, fresh), started=0.0)
    assert again == results  # finished: reported unchanged
    assert float(fresh.numpy()) == 3.0  # restored from the checkpoint, not re-counted


def test_a_log_file_gets_plain_progress_lines_naming_the_interval(tmp_path, capsys):
    """--verbose=1 with stdout not a terminal (pytest's capture): the harness's own plain lines
    for every trainer, with each interval's evaluation, instead of Keras' "Epoch 1/2"."""
    config = ToyConfig(output_dir=str(tmp_path), verbose=1)
    results = run_job(_job(config, tf.Variable(0.0)), started=0.0)
    assert results["status"] == "completed"
    out = capsys.readouterr().out
    assert "\r" not in out and "\x1b" not in out and "Epoch" not in out
    assert "[toy] training to step 6 in 2 evaluation intervals of 3 steps" in out
    ends = re.findall(
        r"\[toy\] interval (\d)/2 done at step (\d)/6 in \S+ · loss \S+ · test_mse (\S+)", out
    )
    mse = [f"{e['mse']:.4g}" for e in results["evaluations"][1:]]
    assert [(i, s, m) for i, s, m in ends] == [("1", "3", mse[0]), ("2", "6", mse[1])]


def test_summary_shows_the_listed_metrics_and_every_number_of_an_older_record():
    last = {"step": 6, "epoch": 2, "mse": 0.5, "rows": 64, "kl": None, "tag": "x"}
    assert summary({"evaluations": [last], "metric_keys": ["mse", "kl"]}) == (
        "step 6: mse=0.5000, kl=n/a"
    )
    # A results.json written before metric_keys existed: its numbers, not its strings.
    assert summary({"evaluations": [last]}) == "step 6: mse=0.5000, rows=64.0000"
    assert summary({"evaluations": []}) == "no evaluation"


def test_evaluation_record_refuses_what_is_not_metrics_and_info():
    record, keys = evaluation_record({"metrics": {"a": 1.0}, "info": {"n": 3}}, 5, 1)
    assert record == {"step": 5, "epoch": 1, "a": 1.0, "n": 3} and keys == ["a"]
    with pytest.raises(TypeError, match=r'must return \{"metrics": dict, "info": dict\}'):
        evaluation_record({"step": 5, "a": 1.0}, 5, 1)
    with pytest.raises(TypeError, match="received list"):
        evaluation_record([1.0], 5, 1)
    with pytest.raises(ValueError, match=r"\['a'\] named twice"):
        evaluation_record({"metrics": {"a": 1.0}, "info": {"a": 2}}, 5, 1)
    with pytest.raises(ValueError, match=r"\['step'\] named twice"):
        evaluation_record({"metrics": {"step": 1.0}, "info": {}}, 5, 1)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_only_on_a_terminal():
    assert fit_verbosity(1, _Terminal()) == 1
    assert fit_verbosity(1, io.StringIO()) == 2  # a log file gets plain lines
    assert fit_verbosity(0, io.StringIO()) == 0 and fit_verbosity(2, _Terminal()) == 2


@pytest.fixture
def live_ctrl_c():
    """Python's own SIGINT handler for the test: a process started in the background by a
    non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, where no Ctrl-C arrives."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_inside_the_commit_is_delivered_after_it(live_ctrl_c):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            signal.raise_signal(signal.SIGINT)
            done.append("results.json")  # the block goes on to its end
            done.append("checkpoint")
    assert done == ["results.json", "checkpoint"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_while_plotting_waits_for_the_plot_then_interrupts(tmp_path, live_ctrl_c):
    # Third-party plotting is not interrupt-safe: matplotlib's tight_layout, hit by a Ctrl-C,
    # raised AttributeError from its own cleanup (exit 1, not 130), and a half-written PNG
    # would be left behind. The interval's plots belong to its commit.
    config = ToyConfig(output_dir=str(tmp_path))
    plotted = []

    def plot(results, folder):
        signal.raise_signal(signal.SIGINT)  # arrives mid-plot
        plotted.append(results["evaluations"][-1]["step"])  # the plot still finishes

    job = _job(config, tf.Variable(0.0))
    job.plot = plot
    with pytest.raises(KeyboardInterrupt):
        run_job(job, started=0.0)
    assert plotted == [3]  # the first interval's plot, whole; no later interval ran
    assert [p.name for p in sorted((tmp_path / "checkpoints").glob("ckpt-*"))] == [
        "ckpt-3.json",
        "ckpt-3.weights.h5",
    ]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_commit_without_ctrl_c_raises_nothing(live_ctrl_c):
    with interrupts_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class _BreakKernelAt(keras.callbacks.Callback):
    """Sets the kernel to NaN after `step`: the loss of that step was finite."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            kernel = self.model.layers[0].kernel
            kernel.assign(np.full(kernel.shape, np.nan, "float32"))


def test_non_finite_weights_under_a_finite_loss_end_the_run_diverged(tmp_path):
    config = ToyConfig(output_dir=str(tmp_path))
    job = _job(config, tf.Variable(0.0))
    job.callbacks = [_BreakKernelAt(6)]  # the last step of the second interval
    evaluated = []
    evaluate = job.evaluate
    job.evaluate = lambda step, epoch: evaluated.append(step) or evaluate(step, epoch)
    results = run_job(job, started=0.0)
    assert results["status"] == "diverged" and evaluated == [0, 3]
    assert re.match(r"Non-finite weights \(\S*dense\S*/kernel\) at step 6", results["message"])
    assert "The last good checkpoint (step 3) is kept" in results["message"]
    assert [p.name for p in sorted((tmp_path / "checkpoints").glob("ckpt-*"))] == [
        "ckpt-3.json",
        "ckpt-3.weights.h5",
    ]


def test_non_finite_variables_names_each_broken_variable_once():
    finite = tf.Variable([1.0, 2.0], name="finite")
    broken = [tf.Variable([np.inf], name=f"b{i}") for i in range(5)]
    steps = tf.Variable(3, name="steps")  # integers cannot hold a NaN: skipped
    assert non_finite_variables([finite, steps]) == ""
    assert non_finite_variables([finite, broken[0], broken[0]]) == "b0:0"
    assert non_finite_variables(broken) == "b0:0, b1:0, b2:0, 2 more"
