"""The trainers' command line: a full disk is a named failure (exit status 1), not a traceback."""

import errno

import pytest

from trainers.harness import cli


class ResourceExhaustedError(Exception):
    """Stands for TensorFlow's, which its file writers raise on a full disk."""


@pytest.mark.parametrize(
    "error, full",
    [
        (OSError(errno.ENOSPC, "No space left on device", "runs/x/results.json.tmp"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (ResourceExhaustedError("runs/x/checkpoints/ckpt-2_temp; No space left on device"), True),
        (OSError(errno.EACCES, "Permission denied"), False),
        (ValueError("something else"), False),
    ],
)
def test_a_full_disk_is_recognized_by_errno_or_by_the_systems_message(error, full):
    assert cli.disk_full(error) is full


def test_a_full_disk_ends_the_program_with_status_1_and_one_line(capsys):
    def body():
        raise OSError(errno.ENOSPC, "No space left on device", "runs/x/results.json.tmp")

    assert cli.exit_status("train_x", body, lambda: "") == cli.EXIT_DIVERGED == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "train_x: failed: the disk is full (No space left on device writing "
        "runs/x/results.json.tmp). Nothing written before is lost"
    )
    assert "run the same command to resume" in line


def test_other_errors_still_propagate():
    def body():
        raise OSError(errno.EACCES, "Permission denied")

    with pytest.raises(OSError):
        cli.exit_status("train_x", body, lambda: "")
