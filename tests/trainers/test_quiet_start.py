"""The programs' entry points start without TensorFlow's start-up log lines
(`trainers/quiet_start.py`): ``--help`` and a refusal print only what they are about (they
import no TensorFlow: `test_fast_start.py`), and a run imports TensorFlow without them unless
the user asks for them."""

import os
import subprocess
import sys

import pytest

from tests.trainers.programs import PROGRAMS, ROOT
from trainers import quiet_start

# What TensorFlow 2.21 printed before every program's --help (twice), whatever
# TF_CPP_MIN_LOG_LEVEL said.
START_UP = ("oneDNN", "absl::InitializeLog", "port.cc", "cpu_feature_guard")


def _run(program, *flags):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, "-m", f"trainers.{program}", *flags],
        cwd=ROOT,
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_program_is_found():
    assert {"train_retrieval", "train_two_head", "pretrain_glyphs", "reproduce_table1"} <= set(
        PROGRAMS
    )


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_prints_no_tensorflow_start_up_lines(program):
    done = _run(program, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    printed = done.stdout + done.stderr
    assert not [word for word in START_UP if word in printed], printed[:2000]
    assert "--helpfull" in done.stdout or "flags" in done.stdout.lower()


# Every trainer and grid (issue 44), with one flag value it refuses and the flag's name.
REFUSED = {
    **{
        program: ("--seed=-1", "`--seed`")
        for program in PROGRAMS
        if program.startswith("train_") or program == "pretrain_glyphs"
    },
    **{
        program: ("--seeds=-1", "--seeds")
        for program in PROGRAMS
        if program.startswith("reproduce_")
    },
}


def test_every_trainer_has_a_refused_flag():
    assert len(REFUSED) >= 10 and {"reproduce_circle", "train_gan_mog"} <= set(REFUSED)


@pytest.mark.parametrize("program", sorted(REFUSED))
def test_a_refused_flag_prints_no_tensorflow_start_up_lines(program):
    flag, name = REFUSED[program]
    done = _run(program, flag, "--output_dir=/tmp/never")
    assert done.returncode == 2, done.stderr[-2000:]
    printed = done.stdout + done.stderr
    assert not [word for word in START_UP if word in printed], printed[:2000]
    assert done.stdout == "" and name in done.stderr and "-1" in done.stderr


def _start_up_messages(stderr):
    """The messages of TensorFlow's start-up lines in `stderr` (absl's notice and its C++ log
    lines without their time stamp and thread id, which differ from process to process)."""
    messages = set()
    for line in stderr.splitlines():
        if line.startswith(quiet_start._ABSL_NOTICE):
            messages.add(line)
        elif quiet_start._LOG_LINE.match(line):
            messages.add(line.split("] ", 1)[1])
    return messages


@pytest.fixture(scope="module")
def bare_import_lines():
    """What a bare ``import tensorflow`` prints on this machine at TF_CPP_MIN_LOG_LEVEL=0: the
    start-up lines depend on the CPU and on TF_ENABLE_ONEDNN_OPTS ("oneDNN custom operations are
    on" only where TensorFlow turns them on, by default on some CPUs only), not on our code."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-c", "import tensorflow"],
        env=env | {"TF_CPP_MIN_LOG_LEVEL": "0"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return _start_up_messages(done.stderr)


@pytest.mark.parametrize("level", [None, "0"])
def test_the_users_tf_cpp_min_log_level_wins(tmp_path, level, bare_import_lines):
    """Once a run starts (TensorFlow imported; here a folder dataset refused when it is read,
    after the flags' checks), TensorFlow's start-up lines are hidden unless the user set
    TF_CPP_MIN_LOG_LEVEL=0, which asked for them: then shown, every line a bare ``import
    tensorflow`` prints on this machine at that level."""
    if level == "0" and not bare_import_lines:
        pytest.skip("this machine's TensorFlow prints no start-up line at TF_CPP_MIN_LOG_LEVEL=0")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.train_retrieval",
            "--dataset=folder",
            f"--data_dir={tmp_path / 'missing'}",
            f"--output_dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Dataset directory not found" in done.stderr, done.stderr
    printed = _start_up_messages(done.stderr)
    if level == "0":
        assert bare_import_lines <= printed, (bare_import_lines - printed, done.stderr[-2000:])
    else:
        assert not printed, done.stderr[-2000:]
        assert not [word for word in START_UP if word in done.stderr], done.stderr[-2000:]


def test_a_refusal_prints_only_the_refusal():
    done = _run("train_retrieval", "--seed=-1", "--output_dir=/tmp/never")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "train_retrieval: refused: Invalid value for argument `--seed`. Expected an int >= 0. "
        "Received: --seed=-1"
    ]


@pytest.mark.parametrize(
    "line, level, shown",
    [
        ("I0000 00:00:1795706503.327038    3273 port.cc:153] oneDNN custom operations", 2, False),
        ("I0000 00:00:1795706503.327038    3273 port.cc:153] oneDNN custom operations", 0, True),
        ("W0000 00:00:1795706503.327038    3273 dso_loader.cc:12] Could not load", 1, True),
        ("W0000 00:00:1795706503.327038    3273 dso_loader.cc:12] Could not load", 2, False),
        ("E0000 00:00:1795706503.327038    3273 cuda_dnn.cc:8] Unable to register", 2, True),
        ("WARNING: All log messages before absl::InitializeLog() is called are written", 1, False),
        ("WARNING: All log messages before absl::InitializeLog() is called are written", 0, True),
        ("ImportError: a Python error while importing", 3, True),
    ],
)
def test_start_up_lines_follow_tf_cpp_min_log_level(line, level, shown):
    assert quiet_start._shown(line + "\n", level) is shown
