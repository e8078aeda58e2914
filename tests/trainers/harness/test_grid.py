"""The reproduction programs' grid: its config's flags and refusals, its runs, its outputs."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainers import gan_mog
from trainers.harness import grid
from trainers.harness.config import ConfigError
from trainers.harness.loop import RunFailed
from trainers.harness.run_dir import RunRefused

ROOT = Path(__file__).resolve().parents[3]

# A program on the grid: its own rows, a borrowed trainer flag, a refusal of its own; it
# "trains" nothing and writes its config as the table.
PROGRAM = """
import dataclasses, json
from typing import ClassVar
from trainers import gan_mog
from trainers.harness import flags as harness_flags, grid
from trainers.harness.config import ConfigError
from trainers.harness.flags import option

@dataclasses.dataclass(frozen=True)
class Toy(grid.GridConfig):
    TABLE: ClassVar[str] = "toy.md"
    rows: tuple[str, ...] = option(("a", "b"), "Rows.", choices=("a", "b"))

def reproduce(config):
    base = harness_flags.config_from_flags(gan_mog.GanConfig, output_dir=config.output_dir)
    if base.learning_rate > 1:
        raise ConfigError("--learning_rate above 1")
    text = json.dumps([config.seeds, config.rows, base.learning_rate, config.table_path])
    grid.write(config, "toy", text, {"rows": config.rows}, (), 0.0)

grid.main(Toy, reproduce, "toy", trainer=gan_mog.GanConfig, only=("learning_rate",))
"""


def _toy(*flags):
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *flags],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_flags_come_from_the_grid_config_and_the_borrowed_trainer_fields(tmp_path):
    done = _toy(f"--output_dir={tmp_path}", "--seeds=3,4", "--rows=b", "--learning_rate=0.5")
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "toy.md").read_text())
    assert written == [[3, 4], ["b"], 0.5, str(tmp_path / "toy.md")]
    assert json.loads((tmp_path / "toy.json").read_text()) == {"rows": ["b"]}
    helped = _toy("--help")
    assert helped.returncode == 0
    for flag in ("--seeds", "--rows", "--learning_rate", "--output_dir", "<output_dir>/toy.md"):
        assert flag in helped.stdout, flag


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--rows=a,c", "`--rows`. Expected one of ['a', 'b']. Received: --rows='c'"),
        ("--rows=", "`--rows`. Expected at least one value"),
        ("--seeds=", "`--seeds`. Expected at least one value"),
        ("--seeds=0,x", "--seeds expects a comma-separated list of int"),
        ("--seeds=-1", "`--seeds`. Expected an int >= 0"),
        ("--learning_rate=2", "--learning_rate above 1"),
        ("--no_such_flag", "no_such_flag"),
    ],
)
def test_a_bad_flag_is_refused_with_exit_2_before_any_output(tmp_path, flag, message):
    done = _toy(f"--output_dir={tmp_path / 'out'}", flag)
    assert done.returncode == 2 and message in done.stderr, done.stderr[-1000:]
    assert not (tmp_path / "out").exists()


def test_mean_std_of_paired_differences_against_numpy():
    diffs = np.array([0.012, -0.004, 0.02])
    text = grid.signed_mean_std(diffs, 100)
    assert text == f"+{100 * diffs.mean():.2f} ± {100 * diffs.std(ddof=1):.2f}"
    assert grid.signed_mean_std([-0.5, -0.25], digits=3) == (
        f"{np.mean([-0.5, -0.25]):.3f} ± {np.std([-0.5, -0.25], ddof=1):.3f}"
    )
    assert grid.signed_mean_std([0.25]) == "+0.25"


def test_error_bars_are_the_mean_and_sample_std_per_group():
    groups = [[1.0, 2.0, 4.0], [3.0], []]
    means, stds = grid.error_bars(groups)
    np.testing.assert_allclose(means[:2], [np.mean(groups[0]), 3.0])
    np.testing.assert_allclose(stds, [np.std(groups[0], ddof=1), 0.0, 0.0])
    assert np.isnan(means[2])


def test_final_and_step_seconds():
    trace = [{"step_seconds": 9.0}, {"step_seconds": 0.3}, {}, {"step_seconds": 0.1}]
    trace += [{"step_seconds": 0.2}]
    results = {"status": "completed", "evaluations": [{"step": 0}, {"step": 4}], "trace": trace}
    assert grid.final(results) == {"step": 4}
    assert grid.step_seconds(results) == np.median([0.3, 0.1, 0.2])  # the first window left out
    assert grid.final({**results, "status": "diverged"}) is None
    assert np.isnan(grid.step_seconds({**results, "trace": trace[:1]}))


def _gan(output_dir, seed):
    return gan_mog.GanConfig(
        output_dir=str(output_dir), train_steps=2, eval_every=1, seed=seed, verbose=0
    )


def _planned(config, train=gan_mog.train_gan_mog):
    return grid.Planned("vanilla", train, gan_mog.resolve, config)


def test_runs_collect_per_cell_and_a_finished_run_is_reused_not_retrained(tmp_path, capsys):
    runs = grid.Runs("toy", [_planned(_gan(tmp_path / f"s{seed}", seed)) for seed in (0, 1)])
    assert runs.train() == runs.all
    assert [r["config"]["seed"] for r in runs.cells["vanilla"]] == [0, 1]
    assert runs.all == runs.cells["vanilla"]
    assert "[toy] 2/2 s1" in capsys.readouterr().out
    record = tmp_path / "s1" / "results.json"
    written = record.stat().st_mtime_ns
    again = grid.Runs("toy", [_planned(_gan(tmp_path / "s1", 1))])
    (reused,) = again.train()
    assert record.stat().st_mtime_ns == written  # not retrained, not re-recorded
    assert reused == json.loads(record.read_text())
    assert reused["wall_seconds"] == runs.cells["vanilla"][1]["wall_seconds"]
    minutes = sum(r["wall_seconds"] for r in again.all) / 60
    assert again.wall_time().endswith(f"add up to {minutes:.1f} min.")


def test_a_run_its_folder_refuses_mid_grid_is_a_failure_not_a_refusal(tmp_path):
    # Exit 2 promises nothing ran; a folder held by another process or another configuration
    # refuses a run only when the grid reaches it, after earlier runs trained.
    def refused(config):
        raise RunRefused(f"{config.output_dir} is in use by another run")

    runs = grid.Runs("toy", [_planned(_gan(tmp_path / "s0", 0), train=refused)])
    with pytest.raises(RunFailed, match="s0: .* is in use by another run"):
        runs.train()


def test_a_grid_is_refused_in_full_before_its_first_run(tmp_path):
    # The last planned run is one the trainer refuses: the grid is refused when planned, and
    # not one run, the first ones included, has trained or made its folder.
    trained = []

    def train(config):
        trained.append(config.seed)
        return gan_mog.train_gan_mog(config)

    planned = [_planned(_gan(tmp_path / f"s{seed}", seed), train=train) for seed in (0, 1)]
    bad = dataclasses.replace(_gan(tmp_path / "s2", 2), eval_every=3)  # 2 steps, every 3
    planned.append(_planned(bad, train=train))
    with pytest.raises(ConfigError, match="--eval_every"):
        grid.Runs("toy", planned)
    assert trained == [] and not any(tmp_path.iterdir())


def test_write_puts_table_figures_and_json_side_by_side(tmp_path, capsys):
    @dataclasses.dataclass(frozen=True)
    class Toy(grid.GridConfig):
        TABLE = "toy.md"

    drawn = []
    config = Toy(output_dir=str(tmp_path / "runs"))
    grid.write(config, "toy", "| a |\n", {"k": [1.5]}, [("_x.png", drawn.append)], minutes=1.5)
    assert (tmp_path / "runs" / "toy.md").read_text() == "| a |\n"
    assert json.loads((tmp_path / "runs" / "toy.json").read_text()) == {"k": [1.5]}
    assert drawn == [str(tmp_path / "runs" / "toy_x.png")]
    written = f"{tmp_path / 'runs' / 'toy.md'}, {tmp_path / 'runs' / 'toy_x.png'}, "
    written += f"{tmp_path / 'runs' / 'toy.json'} (1.5 min)"
    assert capsys.readouterr().out.splitlines()[-1] == f"[toy] wrote {written}"
    elsewhere = dataclasses.replace(config, table=str(tmp_path / "t" / "x.md"))
    grid.write(elsewhere, "toy", "y", {}, (), 0.0)
    assert (tmp_path / "t" / "x.md").read_text() == "y" and (tmp_path / "t" / "x.json").exists()


@pytest.mark.parametrize(
    "versions, named",
    [
        ({"keras_backend": "torch", "torch": "2.13.0", "tensorflow": None}, "with PyTorch 2.13.0,"),
        ({"keras_backend": "jax", "jax": "0.10.2", "tensorflow": "2.21.0"}, "with JAX 0.10.2,"),
        ({"tensorflow": "2.21.0"}, "with TensorFlow 2.21.0,"),  # a record from before JAX/torch
    ],
)
def test_provenance_names_the_backend_the_runs_used(versions, named):
    first = {"device": "CPU", "versions": {**versions, "keras": "3.15.1", "tf_svmax": "0.1.0"}}
    line = grid.provenance("reproduce_two_head", first)
    assert named in line and "Keras 3.15.1" in line and "None" not in line
