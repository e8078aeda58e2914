"""Flags derived from a config dataclass: kinds, defaults, parsing back, errors."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from absl import flags

from trainers import retrieval
from trainers.harness.flags import (
    REQUIRED,
    FlagValueError,
    config_from_flags,
    define_flags,
    non_negative_int,
    number_at_least,
    open_fraction,
    option,
    positive_int,
    positive_number,
    validate,
    writable_folder,
)

ROOT = Path(__file__).resolve().parents[3]


@dataclasses.dataclass(frozen=True)
class Config:
    output_dir: str = option(REQUIRED, "Where.", flag_default="runs/x")
    mode: str = option("a", "Mode.", choices=("a", "b"))
    steps: int | None = option(None, "Steps.")
    rate: float = option(0.5, "Rate.")
    fast: bool = option(False, "Fast.")
    ks: tuple[int, ...] = option((1, 2), "Ks.")
    loud: bool = option(False, "Loud.", identity=False)
    hidden: int = 3  # no option(): no flag


def _parsed(*argv, **kwargs):
    values = flags.FlagValues()
    define_flags(Config, flag_values=values, **kwargs)
    values(["program", *argv])
    return values


def test_defaults_round_trip_to_the_dataclass_defaults():
    values = _parsed()
    assert "hidden" not in values
    assert config_from_flags(Config, values) == Config(output_dir="runs/x")


def test_each_kind_parses_to_the_field_type():
    values = _parsed("--output_dir=o", "--mode=b", "--steps=7", "--rate=2", "--fast", "--ks=4,8")
    config = config_from_flags(Config, values, hidden=9)
    assert config == Config(
        output_dir="o", mode="b", steps=7, rate=2.0, fast=True, ks=(4, 8), hidden=9
    )
    assert isinstance(config.ks[0], int) and isinstance(config.rate, float)


def test_enum_refuses_other_values_and_lists_refuse_bad_items():
    with pytest.raises(flags.IllegalFlagValueError):
        _parsed("--mode=c")
    with pytest.raises(FlagValueError, match=r"--ks expects a comma-separated list of int"):
        config_from_flags(Config, _parsed("--ks=1,x"))


def test_only_defaults_and_help_overrides():
    values = flags.FlagValues()
    define_flags(
        Config,
        only=("output_dir", "steps"),
        defaults={"output_dir": "elsewhere"},
        help_overrides={"steps": "Other help."},
        flag_values=values,
    )
    assert sorted(values) == ["output_dir", "steps"]
    assert values["output_dir"].default == "elsewhere" and values["steps"].help == "Other help."


def test_every_retrieval_config_field_is_a_flag_with_its_default():
    values = flags.FlagValues()
    define_flags(retrieval.RetrievalConfig, flag_values=values)
    values(["program"])
    fields = dataclasses.fields(retrieval.RetrievalConfig)
    assert sorted(values) == sorted(f.name for f in fields)
    config = config_from_flags(retrieval.RetrievalConfig, values)
    assert config == retrieval.RetrievalConfig(output_dir="runs/retrieval")
    assert values["loss"].parser.enum_values == list(retrieval.LOSSES)


@pytest.mark.parametrize(
    "arguments, main_returns, expected",
    [
        ("", 0, 0),
        ("", 1, 1),  # main's own status (1: diverged) is kept
        ("--help", 1, 0),  # absl exits 1 after printing help
        ("--helpfull", 1, 0),
        ("--no_such_flag", 0, 2),  # absl exits 1 for a flag it cannot parse
        ("--count=abc", 0, 2),
    ],
)
def test_run_gives_the_trainers_exit_codes(arguments, main_returns, expected):
    program = (
        "from absl import flags\n"
        "from trainers.harness.flags import run\n"
        "flags.DEFINE_integer('count', 1, 'A count.')\n"
        f"run(lambda argv: {main_returns})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, *arguments.split()],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == expected, done.stderr[-1000:]


@dataclasses.dataclass(frozen=True)
class Checked:
    rate: float = option(0.1, "Rate.", check=positive_number)
    steps: int | None = option(None, "Steps.", check=positive_int)
    seed: int = option(0, "Seed.", check=non_negative_int)
    ratio: float = option(1.0, "Ratio.", check=number_at_least(1.0))
    frames: int = option(6, "Frames.", check=number_at_least(2, integer=True))
    share: float = option(0.5, "Share.", check=open_fraction)
    ks: tuple[int, ...] = option((1, 2), "Ks.", check=positive_int)
    verbose: int = option(1, "Verbosity.", choices=(0, 1, 2))
    modes: tuple[str, ...] = option(("a",), "Modes.", choices=("a", "b"))
    name: str = option("a", "Name.")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("rate", 0.0, "`--rate`. Expected a finite float > 0"),
        ("rate", float("nan"), "`--rate`. Expected a finite float > 0"),
        ("steps", 0, "`--steps`. Expected an int >= 1"),
        ("steps", 2.5, "`--steps`. Expected an int >= 1"),
        ("seed", -1, "`--seed`. Expected an int >= 0"),
        ("ratio", 0.5, "`--ratio`. Expected a float >= 1"),
        ("frames", 1, "`--frames`. Expected an int >= 2"),
        ("frames", 2.5, "`--frames`. Expected an int"),
        ("frames", -3, "`--frames`. Expected an int >= 2. Received: --frames=-3"),
        ("ratio", -1.0, "`--ratio`. Expected a float >= 1. Received: --ratio=-1.0"),
        ("share", 1.0, "`--share`. Expected a float in (0, 1)"),
        ("ks", (1, 0), "`--ks`. Expected an int >= 1. Received: --ks=0"),
        ("ks", (), "`--ks`. Expected at least one value"),
        ("verbose", 3, "`--verbose`. Expected one of [0, 1, 2]"),
        ("modes", ("b", "c"), "`--modes`. Expected one of ['a', 'b']. Received: --modes='c'"),
        ("modes", (), "`--modes`. Expected at least one value"),
        ("seed", None, "`--seed`. Expected a value"),
    ],
)
def test_validate_names_the_flag_kind_and_value(field, value, message):
    validate(Checked())  # the defaults pass; None passes where the default is None
    with pytest.raises(FlagValueError) as error:
        validate(dataclasses.replace(Checked(), **{field: value}))
    assert message in str(error.value)


def test_writable_folder_accepts_a_folder_to_create_without_creating_it(tmp_path):
    target = tmp_path / "a" / "b"
    assert writable_folder(str(target), "--output_dir") == str(target)
    assert not (tmp_path / "a").exists() and os.listdir(tmp_path) == []
    assert writable_folder(str(tmp_path), "--output_dir") == str(tmp_path)
    assert os.listdir(tmp_path) == []  # the trial folder is removed


@pytest.mark.parametrize(
    "where, message",
    [
        ("/dev/null", "/dev/null is a file, not a folder"),
        ("/dev/null/run", "/dev/null is a file, not a folder"),
        ("{file}/run", "is a file, not a folder"),
        ("/proc/run", "a folder this process can write (/proc:"),
        ("", "Expected a folder path"),
    ],
)
def test_writable_folder_refuses_what_cannot_hold_a_run(tmp_path, where, message):
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ValueError, match="`--output_dir`") as error:
        writable_folder(where.format(file=a_file), "--output_dir")
    assert message in str(error.value)
