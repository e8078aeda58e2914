"""RunDirectory: one process per folder, one configuration per folder, damaged records refused."""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainers import retrieval
from trainers.harness.flags import option
from trainers.harness.run_dir import RunDirectory, RunRefused, config_differences, identity

ROOT = Path(__file__).resolve().parents[3]
CONFIG = {"loss": "contrastive", "learning_rate": 0.01, "seed": 0}


def test_a_second_run_in_the_same_folder_is_refused_while_the_first_holds_it(tmp_path):
    with RunDirectory(str(tmp_path), CONFIG):
        with pytest.raises(RunRefused, match=r"in use by a run in progress \(pid \d+\)"):
            with RunDirectory(str(tmp_path), CONFIG):
                pass
    with RunDirectory(str(tmp_path), CONFIG):  # released on exit
        pass


def test_the_lock_holds_across_processes_and_dies_with_its_holder(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from trainers.harness.run_dir import RunDirectory\n"
            f"with RunDirectory({str(tmp_path)!r}, {CONFIG!r}):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunRefused, match=f"pid {holder.pid}"):
            RunDirectory(str(tmp_path), CONFIG).__enter__()
    finally:
        holder.kill()  # SIGKILL: no clean-up code runs
        holder.wait()
    deadline = time.time() + 10
    while True:
        try:
            with RunDirectory(str(tmp_path), CONFIG):
                break
        except RunRefused:
            assert time.time() < deadline
            time.sleep(0.1)


def test_another_configuration_is_refused_naming_the_fields(tmp_path):
    with RunDirectory(str(tmp_path), CONFIG) as run:
        run.write_results({"config": CONFIG, "evaluations": []})
    other = {**CONFIG, "learning_rate": 0.1, "seed": 1}
    with pytest.raises(RunRefused, match=r"differs in: learning_rate, seed"):
        RunDirectory(str(tmp_path), other).__enter__()
    # Fields added to the config after the run started are no difference.
    with RunDirectory(str(tmp_path), {**CONFIG, "new_field": 3}):
        pass
    assert config_differences({"a": 1}, {"a": 1, "b": 2}) == []
    # Fields the new identity leaves out (where the run writes, how much it prints) neither.
    assert config_differences({"a": 1, "verbose": 2}, {"a": 1}) == []


def test_a_deleted_record_does_not_let_another_configuration_resume(tmp_path):
    with RunDirectory(str(tmp_path), CONFIG) as run:
        run.write_results({"config": CONFIG})
    (tmp_path / "results.json").unlink()
    with pytest.raises(RunRefused, match=r"differs in: loss"):
        RunDirectory(str(tmp_path), {**CONFIG, "loss": "triplet_hard"}).__enter__()
    (tmp_path / "config.json").unlink()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-3.index").write_bytes(b"x")
    with pytest.raises(RunRefused, match=r"holds checkpoints but no record"):
        RunDirectory(str(tmp_path), CONFIG).__enter__()


def test_a_damaged_record_is_refused_by_name(tmp_path):
    with RunDirectory(str(tmp_path), CONFIG) as run:
        run.write_results({"config": CONFIG, "evaluations": [{"step": 0}]})
    text = (tmp_path / "results.json").read_text()
    (tmp_path / "results.json").write_text(text[: len(text) // 2])
    with RunDirectory(str(tmp_path), CONFIG) as run:
        with pytest.raises(RunRefused, match=r"results.json is damaged"):
            run.previous_results()
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(RunRefused, match=r"config.json is damaged"):
        RunDirectory(str(tmp_path), CONFIG).__enter__()


def test_config_is_recorded_before_anything_else(tmp_path):
    with RunDirectory(str(tmp_path / "new"), CONFIG):
        assert json.loads((tmp_path / "new" / "config.json").read_text()) == CONFIG


def test_a_non_empty_folder_that_is_not_a_run_folder_is_refused(tmp_path):
    (tmp_path / "thesis.tex").write_text("")
    (tmp_path / "data").mkdir()
    with pytest.raises(RunRefused, match=r"is not empty \(data, thesis.tex\) and is not a run"):
        with RunDirectory(str(tmp_path), CONFIG):
            pass
    assert not (tmp_path / "config.json").exists()


def test_a_run_folder_whose_record_is_not_yet_written_takes_the_run(tmp_path):
    (tmp_path / "tensorboard").mkdir()  # a run's own part, e.g. killed before config.json
    with RunDirectory(str(tmp_path), CONFIG):
        pass
    assert json.loads((tmp_path / "config.json").read_text()) == CONFIG


def test_identity_leaves_out_the_fields_whose_option_says_so():
    @dataclasses.dataclass(frozen=True)
    class Config:
        ks: tuple[int, ...] = option((1, 2), "Ks.")
        loud: bool = option(False, "Loud.", identity=False)
        hidden: int = 3  # no option(): part of the identity

    assert identity(dataclasses.asdict(Config()), Config) == {"ks": (1, 2), "hidden": 3}
    kept = identity(
        dataclasses.asdict(retrieval.RetrievalConfig(output_dir="o")), retrieval.RetrievalConfig
    )
    assert {"output_dir", "verbose", "eval_batch_size"}.isdisjoint(kept) and "learning_rate" in kept
