"""The training loop every trainer shares, around `keras.Model.fit`.

A trainer builds a compiled model, its batches, its evaluation and its plots, and hands them
over as a `Job`; `run_job` does the rest, the same way for every trainer:

- the run folder (`RunDirectory`: lock, configuration identity, records kept);
- resume from the newest readable checkpoint (model, optimizer and the job's extra state), or
  report a finished run unchanged;
- an evaluation before the first step (optional) and every `eval_every` steps, each followed
  by ``results.json``, a checkpoint and the plots, in that order (a Ctrl-C during any of them
  is held until all are written, `interrupts_deferred`);
- a trace point every `trace_every` steps: the window's mean of every logged scalar, the
  learning rate the window ended with and the window's wall seconds per step;
- the NaN guard: a non-finite loss (checked every step) or non-finite weights (checked before
  each evaluation) stop training before anything non-finite is evaluated or saved; the run
  ends ``diverged`` with the last good checkpoint kept;
- progress: Keras' bar on a terminal, elsewhere plain lines every few seconds with the step,
  the rate, the loss and the time left (`trainers.harness.progress`);
- TensorBoard, and the final record (``status``, ``message``, ``wall_seconds`` over attempts).

Under MultiWorkerMirroredStrategy (which Keras 3's `fit` cannot run on) the steps run in
`trainers.harness.custom_fit.fit`, the same train step and callbacks; every worker runs the
same loop in lockstep, restores the chief's newest checkpoint and takes the same decisions
(the logged loss and the weights are the same on every worker), but only the chief keeps the
run folder, evaluates and plots. The other workers write their checkpoints at the same steps
(reading a variable synchronised on read is a collective step) into a temporary folder,
deleted when they end.

The loop knows no backend: it distributes and reads its input through the job's distribution
and `trainers.harness.runtime` (TensorFlow's strategies on TensorFlow, Keras' own on JAX and
PyTorch), and checkpoints in Keras' format on every backend (`trainers.harness.checkpoints`).

The job's config must have the fields ``output_dir``, ``train_steps``, ``eval_every``,
``trace_every``, ``evaluate_untrained`` and ``verbose`` (resolved: no None).
"""

import contextlib
import dataclasses
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import keras
import numpy as np

from tf_svmax import (
    checks,  # the library's validators
    data,
    records,
)
from trainers.harness import progress, runtime
from trainers.harness.checkpoints import WeightsCheckpoints
from trainers.harness.run_dir import RunDirectory, RunFailed, RunRefused, identity, layout


@dataclasses.dataclass
class Job:
    """What one trainer contributes to a run.

    Attributes:
      name: The program's name, prefixed to its progress lines (``train_retrieval``).
      config: The resolved config dataclass instance.
      model: The compiled model `fit` trains.
      schedule: The optimizer's learning-rate schedule (called with a step for the trace).
      batches: ``start_step -> dataset`` of training batches from that step on (what `fit`
        takes: a tf.data.Dataset, a `keras.utils.PyDataset`; `runtime.pk_batches`).
      distribution: The run's distribution, the model built in its scope:
        `runtime.make_distribution` of the config's --strategy, or for a trainer without one
        `runtime.default_distribution(model)`.
      global_batch: Rows of every training batch (split across the replicas of a
        multi-replica strategy, see `trainers.harness.distribute.replica_batches`).
      evaluate: ``(step, epoch) -> {"metrics": {...}, "info": {...}}``, the held-out
        evaluation: ``metrics`` are the numbers logged to TensorBoard and printed (a value may
        be None where undefined at that evaluation), ``info`` the bookkeeping recorded beside
        them (counts, timings, per-class tables). ``results.json`` keeps each evaluation as
        one flat record (``step``, ``epoch``, the metrics, the info) and lists the metric names
        under ``metric_keys``.
      plot: ``(results, folder) -> None``; writes the trainer's figures.
      save_models: ``folder -> None``; writes the finished model(s).
      header: Entries added to the record at every attempt (e.g. the batch's s_mu bounds).
      description: What the start line says the run is.
      state: What must survive a restart beside the model and its optimizer (name -> a
        Keras layer or optimizer, a `tf.Module` or a variable), saved in the checkpoint's
        weights file with them, e.g. a second optimizer (`trainers.harness.checkpoints`).
      callbacks: Extra Keras callbacks.
      diagnose: None, or ``error -> message or None``: for an error out of the input pipeline
        (`runtime.input_errors`, e.g. tf.data's on a corrupt image), a message naming its
        cause; the run then ends ``failed`` with that message (`RunFailed`) instead of the
        bare error.
      summarize: ``results -> dict`` of entries the final record adds when training ends
        (completed or diverged), e.g. the last evaluation's headline numbers.
    """

    name: str
    config: object
    model: keras.Model
    schedule: Callable
    batches: Callable[[int], object]
    distribution: object
    global_batch: int
    evaluate: Callable[[int, int], dict]
    plot: Callable[[dict, str], None]
    save_models: Callable[[str], None]
    header: dict = dataclasses.field(default_factory=dict)
    description: str = ""
    state: dict = dataclasses.field(default_factory=dict)
    callbacks: Sequence = ()
    diagnose: Callable[[Exception], str | None] | None = None
    summarize: Callable[[dict], dict] = lambda results: {}


def image_file_diagnosis(*path_lists):
    """A `Job.diagnose` for image-file datasets: names the first unreadable files among
    `path_lists` (None when every file decodes, so the original error stands)."""

    def diagnose(error):
        del error  # the decoder's message names no file; find the files instead
        bad = []
        for paths in path_lists:
            if len(bad) == 5:
                break
            bad += data.unreadable_images(paths, limit=5 - len(bad))
        if not bad:
            return None
        listed = "; ".join(f"{path} ({reason})" for path, reason in bad)
        return f"Unreadable image file(s): {listed}. Replace or remove them from the dataset."

    return diagnose


def config_record(config):
    """The config as JSON values (tuples become lists), as ``results.json`` records it."""
    out = dataclasses.asdict(config)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def window_means(start_sums, start_count, end_sums, end_count):
    """Means over steps ``start_count + 1 .. end_count`` from running sums at both ends."""
    width = end_count - start_count
    return {k: (v - start_sums.get(k, 0.0)) / width for k, v in end_sums.items()}


def evaluation_record(evaluation, step, epoch):
    """The flat record ``results.json`` keeps for one `Job.evaluate` result, and the names of
    its metrics; refuses a result that is not ``{"metrics": dict, "info": dict}`` or whose
    parts share a name (the flat record would lose one)."""
    if not (
        isinstance(evaluation, dict)
        and set(evaluation) == {"metrics", "info"}
        and all(isinstance(evaluation[part], dict) for part in ("metrics", "info"))
    ):
        keys = sorted(evaluation) if isinstance(evaluation, dict) else None
        raise TypeError(
            'Job.evaluate must return {"metrics": dict, "info": dict}; received '
            f"{type(evaluation).__name__} with keys {keys}."
        )
    metrics, info = evaluation["metrics"], evaluation["info"]
    shared = sorted(set(metrics) & set(info) | ({"step", "epoch"} & (set(metrics) | set(info))))
    if shared:
        raise ValueError(f"Job.evaluate: {shared} named twice (metrics, info, step/epoch).")
    return {"step": step, "epoch": epoch, **metrics, **info}, list(metrics)


def summary(results):
    """One line with the last evaluation's metrics (``results["metric_keys"]``)."""
    if not results["evaluations"]:
        return "no evaluation"
    last = results["evaluations"][-1]
    keys = results.get("metric_keys")
    if keys is None:  # a record written before metric_keys existed: every number shown
        keys = [
            k
            for k, v in last.items()
            if k not in ("step", "epoch")
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
        ]
    # None: a metric undefined at this evaluation (e.g. a KL over an empty histogram).
    shown = [f"{k}={'n/a' if last[k] is None else f'{last[k]:.4f}'}" for k in keys if k in last]
    return f"step {last['step']}: " + ", ".join(shown)


@contextlib.contextmanager
def interrupts_deferred():
    """Holds a Ctrl-C (SIGINT) that arrives inside the block until the block is done, then
    delivers it to the handler that was in place.

    An interval's commit (``results.json``, then the checkpoint's weights file, then the step
    record that makes it a checkpoint) must not stop half way: a checkpoint whose weights are
    written but not yet recorded is invisible to resume, and the interrupt message would say
    that the run restarts although its step is on disk. Python delivers signals only to the main
    thread, so elsewhere the block runs unguarded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)


def trained_state(model, state):
    """The variables a run trains and checkpoints: the model's, and those of the job's extra
    state (e.g. a second optimizer)."""
    variables = {id(v): v for v in model.weights}
    for trackable in state.values():
        variables.update((id(v), v) for v in getattr(trackable, "variables", []))
    return list(variables.values())


def variable_value(variable):
    """A Keras (or, in a job's TensorFlow state, a `tf.Variable`) variable's value in NumPy
    (each backend's way that Keras 3.15 reads without NumPy 2's copy-keyword warning)."""
    if runtime.on_tensorflow() or not isinstance(variable, keras.Variable):
        return np.asarray(variable.numpy())
    return keras.ops.convert_to_numpy(variable.value)


def non_finite_variables(variables, shown=3):
    """Names of the floating-point `variables` holding a NaN or an infinity (the first
    `shown`, then how many more), or "" when all are finite."""
    names = []
    for v in variables:
        if not keras.backend.standardize_dtype(v.dtype).startswith(("float", "bfloat")):
            continue
        if not np.all(np.isfinite(variable_value(v))):
            name = v.path if hasattr(v, "path") else v.name
            names += [name] if name not in names else []  # copies (an EMA encoder) share names
    if len(names) > shown:
        names = names[:shown] + [f"{len(names) - shown} more"]
    return ", ".join(names)


class _Cadence(keras.callbacks.Callback):
    """Per step: NaN guard, and every `trace_every` steps a trace point. Per interval:
    evaluation, results.json, checkpoint, plots (in that order)."""

    def __init__(self, job, run, results, checkpoints, started, chief=True):
        super().__init__()
        self.job, self.config, self.results = job, job.config, results
        self.run, self.paths = run, run.paths
        self.checkpoints, self.started, self.diverged_at = checkpoints, started, None
        self.chief = chief  # only the chief evaluates, records and plots
        self.diverged_what = None
        self._window_start = (0, {}, time.perf_counter())
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        # Keras resets its running means at each epoch; the clock restarts after evaluation.
        self._window_start = (0, {}, time.perf_counter())
        self._epoch = epoch

    def _step(self, done):
        """The optimizer's step after batch `done` of this epoch (an epoch is `eval_every`
        steps): counted, not read, since JAX's `fit` brings the variables back to the model
        only at the epoch's end."""
        return self._epoch * self.config.eval_every + done

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        loss = logs.get("loss")
        if loss is not None and not np.isfinite(float(loss)):
            self.diverged_at = self._step(batch + 1)
            self.diverged_what = "non-finite loss"
            self.model.stop_training = True
            return
        done = batch + 1
        if done % self.config.trace_every and done != self.config.eval_every:
            return
        # Keras logs running means since the epoch began; the window's mean is the difference of
        # the running sums (mean x count) at its two ends.
        start, start_sums, start_time = self._window_start
        now = time.perf_counter()
        sums = {k: float(v) * done for k, v in logs.items() if np.ndim(v) == 0}
        step = self._step(done)
        entry = window_means(start_sums, start, sums, done)
        entry.update(
            step=step,
            steps=done - start,
            learning_rate=float(self.job.schedule(step - 1)),
            # Includes tracing in a run's first window and input waits: compare medians.
            step_seconds=(now - start_time) / (done - start),
        )
        self.results["trace"].append(entry)
        self._window_start = (done, sums, now)

    def on_epoch_end(self, epoch, logs=None):
        if self.diverged_at is not None:
            return  # never evaluate or checkpoint non-finite weights
        logs = logs if logs is not None else {}
        step = int(variable_value(self.model.optimizer.iterations))
        # A finite loss does not prove finite weights (a loss over normalised embeddings, or a
        # step whose update overflowed after the loss was computed): the trained state is
        # checked before it is evaluated or saved.
        broken = non_finite_variables(trained_state(self.model, self.job.state))
        if broken:
            self.diverged_at, self.diverged_what = step, f"non-finite weights ({broken})"
            self.model.stop_training = True
            return
        if not self.chief:
            self.checkpoints.save(step)  # every worker saves at the same steps (see above)
            return
        record, self.results["metric_keys"] = evaluation_record(
            self.job.evaluate(step, epoch + 1), step, epoch + 1
        )
        logs.update(
            {f"test_{k}": record[k] for k in self.results["metric_keys"] if record[k] is not None}
        )
        evaluations = [e for e in self.results["evaluations"] if e["step"] < step]
        self.results["evaluations"] = evaluations + [record]
        self.results["wall_seconds"] = _wall_seconds(self.results, self.started)
        with interrupts_deferred():
            self.run.write_results(self.results)
            self.checkpoints.save(step)
            # Inside the commit too: matplotlib is not interrupt-safe (a Ctrl-C inside
            # tight_layout surfaced as an AttributeError from its cleanup, exit 1 instead of
            # 130) and a plot cut short would leave a partial PNG.
            self.job.plot(self.results, self.paths["plots"])


def fit_verbosity(verbose, stream=None):
    """The resolved ``--verbose``: the progress bar (1) only on a terminal; to a file or a CI
    log (where the bar's carriage returns pile up into megabytes) plain lines (2, which
    `trainers.harness.progress.fit_progress` turns into its `ProgressLog`). The library's rule
    (`evaluate_retrieval` follows it too)."""
    return checks.progress_verbosity(verbose, "--verbose", stream)


def _wall_seconds(results, started):
    """Earlier attempts' wall time plus this one's so far."""
    return results["wall_seconds_before"] + time.perf_counter() - started


def _record_end(results, status, message, started, run):
    """The attempt's final record: status, message and the wall time over all attempts."""
    results.update(status=status, message=message, wall_seconds=_wall_seconds(results, started))
    del results["wall_seconds_before"]
    run.write_results(results)


def run_job(job, started):
    """Trains `job` in its config's ``output_dir``, resuming what an earlier attempt left.

    Args:
      job: The `Job` (its config's ``identity=False`` fields may change on resume).
      started: `time.perf_counter()` when the program began (setup time counts).

    Returns the results dict (also in ``output_dir/results.json``), whose ``status`` is
    ``"completed"`` or ``"diverged"`` (``message`` says where and what is kept). On a
    non-chief worker of a multi-worker cluster: the same, kept nowhere (see the module
    docstring).

    Raises:
      RunRefused: `output_dir` is in use by another process, holds another configuration,
        or its record is damaged (`trainers.harness.run_dir`); under multi_worker, on every
        worker when any worker refuses.
    """
    config_dict = config_record(job.config)
    fields = identity(config_dict, type(job.config))  # what a resumed run must share
    distribution = job.distribution
    place = distribution.placement  # chief or not, multi-worker or not: resolved once
    # The chief's checkpoints, which every worker restores (a non-chief writes its own into a
    # temporary folder).
    shared_checkpoints = layout(job.config.output_dir)["checkpoints"]
    with contextlib.ExitStack() as stack:
        folder = job.config.output_dir
        if not place.chief:
            folder = tempfile.mkdtemp(prefix=f"{job.name}-worker-")
            stack.callback(shutil.rmtree, folder, ignore_errors=True)
        refusal = None
        try:
            run = stack.enter_context(RunDirectory(folder, fields))
        except RunRefused as error:
            refusal = error
        if place.multi_worker:
            # Every worker learns whether any refused, so none waits for the others for ever.
            refused = distribution.values_of_every_replica(0 if refusal is None else 1)
            if refusal is None and any(refused):
                refusal = RunRefused(
                    "another worker of the cluster refused this run (its output says why); "
                    "this worker stops too."
                )
        if refusal is not None:
            raise refusal
        return _run(job, config_dict, run, started, distribution, shared_checkpoints)


def _say(job, text):
    if job.config.verbose:
        print(f"[{job.name}] {text}", flush=True)


def _run(job, config_dict, run, started, distribution, shared_checkpoints):
    """`run_job`'s steps once `run` holds the folder: `distribution` is the run's (its
    ``placement`` this process's), `shared_checkpoints` the chief's checkpoint folder
    (`run.paths` are a non-chief's own)."""
    config, paths, model = job.config, run.paths, job.model
    place = distribution.placement
    chief = place.chief
    previous = run.previous_results()
    with distribution.scope():  # the optimizer's slots mirror the weights
        model.optimizer.build(model.trainable_variables)
    # Every worker restores the chief's checkpoint; a non-chief saves into its own folder.
    checkpoints = WeightsCheckpoints(
        model,
        shared_checkpoints,
        max_to_keep=2,
        state=job.state,
        keep_in=None if chief else paths["checkpoints"],
    )
    restored = checkpoints.restored
    start_step = int(variable_value(model.optimizer.iterations)) if restored else 0
    finished = bool(previous and previous.get("status") == "completed")
    if place.multi_worker:  # one collective step: every worker's restored step and record
        every = distribution.vectors_of_every_replica([start_step, int(finished)])
        steps = {step for step, _ in every}
        if len(steps) > 1:
            raise RunFailed(
                f"The workers restored different checkpoints (steps {sorted(steps)}) from "
                f"{shared_checkpoints}: every worker must see the chief's "
                "--output_dir (one shared folder). Nothing was trained."
            )
        finished = any(done for _, done in every)  # the chief's record decides for every worker
    if finished and start_step >= config.train_steps:
        # A finished run is reported, not re-recorded (wall time and files stay as they were).
        if chief:
            _say(job, f"already completed: {summary(previous)}")
        return previous or {"status": "completed"}
    results = previous or {"evaluations": [], "trace": [], "resumed_at_steps": []}
    results["evaluations"] = [e for e in results["evaluations"] if e["step"] <= start_step]
    results["trace"] = [t for t in results["trace"] if t["step"] <= start_step]
    if start_step:
        results["resumed_at_steps"] = results.get("resumed_at_steps", []) + [start_step]
    environment = records.environment()
    results.update(
        config=config_dict,
        versions=environment["versions"],
        machine=environment["machine"],
        device=records.device(environment["machine"]),
        distribution=place.description,
        status="running",
        message="",
        **job.header,
        wall_seconds_before=results.get("wall_seconds", 0.0),
    )
    where = f"resuming at step {start_step}" if start_step else "starting"
    _say(job, f"{where}: {job.description} -> {config.output_dir}")
    # The harness's callbacks of fit: the progress (bar or plain lines) and the cadence.
    keras_verbose, progress_callbacks = progress.fit_progress(config.verbose, job.name)
    cadence = _Cadence(job, run, results, checkpoints, started, chief)
    try:
        if chief and config.evaluate_untrained and start_step == 0 and not results["evaluations"]:
            # Step 0: where training starts from; kept if a restart finds it already recorded.
            record, results["metric_keys"] = evaluation_record(job.evaluate(0, 0), 0, 0)
            results["evaluations"] = [record]
            results["wall_seconds"] = _wall_seconds(results, started)
            run.write_results(results)
            _say(job, f"untrained: {summary(results)}")
        if start_step < config.train_steps:
            dataset = distribution.replica_batches(
                lambda: job.batches(start_step), job.global_batch
            )
            settings = dict(
                epochs=config.train_steps // config.eval_every,
                initial_epoch=start_step // config.eval_every,
                steps_per_epoch=config.eval_every,
                callbacks=[
                    cadence,
                    *runtime.tensorboard(paths["tensorboard"]),
                    *job.callbacks,
                    *progress_callbacks,  # last: its interval line shows the test_* metrics
                ],
                verbose=keras_verbose,
            )
            distribution.fit(model, dataset, **settings)
    except runtime.input_errors() as error:
        cause = job.diagnose(error) if job.diagnose is not None else None
        if cause is None:
            raise
        _record_end(results, "failed", cause, started, run)
        raise RunFailed(
            f"{cause} The last checkpoint (step {checkpoints.latest_step()}) is kept in "
            f"{paths['checkpoints']}; the same command resumes from it once the cause is fixed."
        ) from error
    except distribution.worker_lost as error:
        if not place.multi_worker:
            raise
        first_line = (str(error).strip().splitlines() or [""])[0][:300]
        cause = (
            f"A worker of the cluster was lost ({type(error).__name__}: {first_line}); "
            "training stopped."
        )
        _record_end(results, "failed", cause, started, run)
        last = checkpoints.latest_step() if chief else "the chief's newest"
        raise RunFailed(
            f"{cause} The last checkpoint (step {last}) is kept in "
            f"{shared_checkpoints}; run the same command on every worker "
            "to resume from it."
        ) from error
    if cadence.diverged_at is not None:
        last = checkpoints.latest_step()
        kept = (
            f"The last good checkpoint (step {last}) is kept in {paths['checkpoints']}"
            if last
            else "No checkpoint was written before it (the same command starts anew)"
        )
        status, message = (
            "diverged",
            f"{cadence.diverged_what.capitalize()} at step {cadence.diverged_at}: training "
            f"stopped. {kept}; lower --learning_rate or check the data.",
        )
    else:
        status, message = "completed", ""
        if chief:
            # Saving and the final plots take tens of seconds on a CPU: the log says why it waits.
            _say(job, "training done; saving the model and drawing the plots")
            job.save_models(config.output_dir)
    results.update(job.summarize(results))
    _record_end(results, status, message, started, run)
    if not chief:
        return results
    with interrupts_deferred():  # see _Cadence.on_epoch_end
        job.plot(results, paths["plots"])
    _say(job, f"{results['status']}: {summary(results)}")
    if results["message"]:
        _say(job, results["message"])
    return results
