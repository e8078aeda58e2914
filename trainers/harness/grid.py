"""The reproduction programs' grid: their options as a config, their runs, their outputs.

A `reproduce_*` program declares its own options as a frozen subclass of `grid_config(its
default output_dir)` (the grid's output_dir, seeds and table, plus its rows and settings),
borrows the flags of the trainer it runs, and hands `main` the function that plans, trains
and writes. Its runs are one list of `Planned` runs: `Runs` refuses the whole list before the
first run trains, then imports TensorFlow; `Runs.train` trains it. Everything before the
`Runs` is planning and imports no Keras or TensorFlow (a run's ``train`` reads the training
code only when called), so a grid refuses a flag combination as fast as a trainer refuses a flag:

    @dataclasses.dataclass(frozen=True)
    class Grid(grid.grid_config("runs/two_head_table")):
        TABLE: ClassVar[str] = "two_head.md"
        modes: tuple[str, ...] = option(MODES, "Modes (rows).", choices=MODES)

    def reproduce(config):
        base = harness_flags.config_from_flags(two_head.TwoHeadConfig)
        planned = [
            grid.Planned(
                (setting, mode),
                lambda c: two_head.train_two_head(c),  # the training code, read as it trains
                two_head.resolve,
                dataclasses.replace(base, mode=mode, output_dir=...),
            )
            for ...
        ]
        runs = grid.Runs(PROGRAM, planned)  # ConfigError: a run its trainer refuses
        runs.train()
        grid.write(config, PROGRAM, text, record, figures)

    grid.main(Grid, reproduce, PROGRAM, trainer=two_head.TwoHeadConfig, only=("dataset",))

Every run lives in its own folder under --output_dir; its trainer reports a run that already
completed there unchanged (`trainers.harness.loop.run_job`) and resumes an unfinished one, so
the same command reuses a grid's finished runs and a smaller grid shares its runs with a larger.

Exit status (as `trainers.harness.cli`): 0 written, 1 a run failed (or its folder refused it
once earlier runs had trained: held by another process, another configuration), 2 refused
before any run (a flag absl cannot parse, a list item of the wrong kind or outside its
choices, an empty list where the option needs a value, a combination a trainer refuses),
130 interrupted.
"""

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, ClassVar

import numpy as np

from trainers import quiet_start
from trainers.harness import cli
from trainers.harness import flags as harness_flags
from trainers.harness.flags import option, random_seed, writable_folder
from trainers.harness.run_dir import RunFailed, RunRefused
from trainers.harness.tables import mean_std


class _Table:
    """Where a grid's table goes (a grid config's base: `grid_config`)."""

    TABLE: ClassVar[str] = "table.md"

    @property
    def table_path(self):
        """Where the table goes; its figures and JSON go beside it, named by its stem."""
        return self.table or os.path.join(self.output_dir, self.TABLE)


SEEDS_HELP = "Seeds; every cell is the mean ± std over them."


def grid_config(output_dir, *, seeds=(0, 1, 2), seeds_help=SEEDS_HELP):
    """The options every reproduction program has, `output_dir` (a program's default folder)
    and `seeds` (a non-empty list of seeds in [0, 2**32 - 1]) with the program's defaults, and
    `table`; a program subclasses it with its own rows and settings and names its table's
    file in ``TABLE``."""
    return dataclasses.make_dataclass(
        "GridConfig",
        [
            (
                "output_dir",
                str,
                option(
                    output_dir,
                    "Parent folder of the runs (one folder per run).",
                    check=writable_folder,
                ),
            ),
            ("seeds", tuple[int, ...], option(tuple(seeds), seeds_help, check=random_seed)),
            (
                "table",
                str | None,
                option(None, "Markdown output (default: <output_dir>/<the program's table>)."),
            ),
        ],
        bases=(_Table,),
        frozen=True,
    )


# The grid config of a program whose runs go under runs/ and whose cells average seeds 0-2.
GridConfig = grid_config("runs")


def main(config_class, reproduce, program, *, trainer=None, argv=None, **borrowed):
    """Defines the flags of `config_class` (and of `trainer`'s config fields named in
    ``borrowed["only"]``, with `define_flags`' defaults and help_overrides), parses `argv`,
    validates the grid config and the borrowed flags' values, then runs ``reproduce(config)``;
    exits with the shared codes. `reproduce` raises `RunRefused` (e.g. `ConfigError`) for what
    it refuses, before any run: its own combinations and its planned runs' (`Runs`), before
    `Runs` imports TensorFlow (`quiet_start.import_tensorflow`) and the training starts."""
    cli.define_program_flags(
        config_class,
        help_overrides={"table": f"Markdown output (default: <output_dir>/{config_class.TABLE})."},
    )
    if trainer is not None:
        cli.define_program_flags(trainer, **borrowed)

    def run(argv):
        del argv  # absl keeps only positional arguments; the tables show sys.argv
        cli.quiet_checkpoint_logs()

        def reproduce_from_flags():
            config = harness_flags.config_from_flags(config_class)
            harness_flags.validate(config)
            if trainer is not None:  # the borrowed trainer flags' values, as each run checks them
                borrowed_values = harness_flags.config_from_flags(
                    trainer, output_dir=config.output_dir
                )
                harness_flags.validate(borrowed_values, only=borrowed.get("only"))
            reproduce(config)  # plans without Keras; its `Runs` imports TensorFlow
            return cli.EXIT_COMPLETED

        return cli.exit_status(
            program,
            reproduce_from_flags,
            lambda: (
                "interrupted; the same command resumes the unfinished run and reuses the "
                "finished ones."
            ),
        )

    harness_flags.run(run, argv)


@dataclasses.dataclass(frozen=True)
class Planned:
    """One run of a grid: the table cell it fills (`key`), its trainer's ``train(config,
    **kwargs)`` and ``resolve(config)`` (which raises `ConfigError` for a config the trainer
    refuses), its config (its own ``output_dir``) and any other arguments of `train`.

    A grid plans its runs before TensorFlow is imported: `resolve` is the trainer's Keras-free
    config function, and `train` reads the training code only when called (e.g. ``lambda
    config: retrieval.train_retrieval(config)``: reading ``retrieval.train_retrieval`` imports
    it, `trainers.harness.lazy`)."""

    key: Hashable
    train: Callable
    resolve: Callable
    config: Any
    kwargs: Mapping = dataclasses.field(default_factory=dict)


class Runs:
    """A grid's planned runs: refused in full when made (each `Planned.resolve`, before any
    run trains), then, the grid accepted, TensorFlow imported (`quiet_start`: the work
    starts; what the program does before making its `Runs` imports no Keras); then trained one
    at a time by `train` (a fresh Keras session each), printing progress and keeping their
    results: all in order (``runs.all``) and per table cell (``runs.cells[key]``, one entry
    per seed in the order trained)."""

    def __init__(self, program, planned, tensorflow_only=None):
        self.program, self.planned = program, tuple(planned)
        for run in self.planned:
            run.resolve(run.config)  # ConfigError: the grid is refused, nothing has run
        if tensorflow_only is not None:  # why its runs are TensorFlow by nature
            cli.refuse_off_tensorflow(program, tensorflow_only)
        quiet_start.import_tensorflow()  # every run is accepted: the work starts
        self.total = len(self.planned)
        self.all, self.cells = [], {}
        self.started = time.perf_counter()

    def train(self):
        """Trains every planned run in order; returns their results in that order."""
        return [self._train(run) for run in self.planned]

    def _train(self, run):
        """``run.train(run.config, **run.kwargs)`` (a trainer: a finished run in its
        ``output_dir`` is reported unchanged), its results appended to cell ``run.key`` and
        returned."""
        key, train, config, kwargs = run.key, run.train, run.config, run.kwargs
        name = os.path.basename(os.path.normpath(config.output_dir))
        print(f"[{self.program}] {len(self.all) + 1}/{self.total} {name}", flush=True)
        import keras  # the training code's, as the first run starts (the flags are checked)

        from trainers.harness.loop import summary

        keras.backend.clear_session()
        try:
            results = train(config, **kwargs)
        except RunRefused as error:
            # Exit 2 means refused before any run; a folder refusing a run mid-grid (held by
            # another process, another configuration) comes after trained runs: a failure.
            raise RunFailed(f"{name}: {error}") from None
        print(
            f"[{self.program}]   {results['status']} in {results['wall_seconds']:.0f} s: "
            f"{summary(results)}",
            flush=True,
        )
        self.all.append(results)
        self.cells.setdefault(key, []).append(results)
        return results

    def minutes(self):
        """Minutes since the grid started."""
        return (time.perf_counter() - self.started) / 60

    def wall_time(self, detail=""):
        """The table's last line: this invocation's minutes and the runs' own."""
        run_minutes = sum(r["wall_seconds"] for r in self.all) / 60
        return (
            f"Wall time of this invocation: {self.minutes():.1f} min; the runs' own wall times"
            f"{detail} add up to {run_minutes:.1f} min."
        )


def final(results):
    """The last evaluation of a completed run, None for any other."""
    return results["evaluations"][-1] if results["status"] == "completed" else None


def step_seconds(results):
    """Median seconds per training step over the trace windows after the first (the first
    includes graph tracing); NaN without any."""
    seconds = [t["step_seconds"] for t in results["trace"][1:] if "step_seconds" in t]
    return float(np.median(seconds)) if seconds else float("nan")


def error_bars(groups):
    """``(means, stds)`` of a bar chart's bars: per group of per-seed values, the mean (NaN for
    an empty group) and the sample std (ddof = 1; 0 for fewer than two values)."""
    means = [float(np.mean(v)) if len(v) else float("nan") for v in groups]
    stds = [float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for v in groups]
    return means, stds


def signed_mean_std(values, scale=1.0, digits=2):
    """`mean_std` of paired differences with the sign always shown (``+0.12 ± 0.30``)."""
    text = mean_std(values, scale, digits)
    return text if text.startswith("-") else f"+{text}"


def provenance(program, first):
    """The table's opening line: the command (`sys.argv`), the machine and the versions of
    the grid's first run."""
    v = first["versions"]
    # Records written before the other backends ran the trainers hold no keras_backend.
    backend = v.get("keras_backend", "tensorflow")
    name = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}.get(backend, backend)
    return (
        f"Generated by `python -m trainers.{program} {' '.join(sys.argv[1:])}` on "
        f"{first['device']} with {name} {v.get(backend)}, Keras {v['keras']}, tf_svmax "
        f"{v['tf_svmax']}."
    )


def write(config, program, text, record, figures, minutes):
    """Writes the table `text` to ``config.table_path``, each ``(suffix, draw)`` of `figures`
    as ``draw(<stem><suffix>)`` and `record` as ``<stem>.json``; prints the table and the files
    written."""
    path = config.table_path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    stem = os.path.splitext(path)[0]
    written = [path]
    for suffix, draw in figures:
        draw(f"{stem}{suffix}")
        written.append(f"{stem}{suffix}")
    from tf_svmax import records

    records.write_json(f"{stem}.json", record)
    written.append(f"{stem}.json")
    print(text)
    print(f"[{program}] wrote {', '.join(written)} ({minutes:.1f} min)")
