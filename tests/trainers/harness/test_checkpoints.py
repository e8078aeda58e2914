"""Resume from damaged checkpoint folders: each damage a user or a crash can leave."""

import pytest
import tensorflow as tf

from trainers.harness.checkpoints import checkpoints_on_disk, restore_newest_readable
from trainers.harness.run_dir import RunRefused


def _folder(directory, steps=(50, 100)):
    """A checkpoint folder as a run leaves it: a variable saved at each of `steps`."""
    variable = tf.Variable([0.0, 0.0])
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=variable), directory, max_to_keep=2)
    for step in steps:
        variable.assign([step, -step])
        manager.save(checkpoint_number=step)
    return directory


def _restore(directory):
    variable = tf.Variable([0.0, 0.0])
    manager, path = restore_newest_readable(tf.train.Checkpoint(v=variable), str(directory), 2)
    return manager, path, variable.numpy().tolist()


def _data_file(directory, step):
    (path,) = directory.glob(f"ckpt-{step}.data-*")
    return path


def test_an_intact_folder_restores_the_newest(tmp_path):
    _, path, value = _restore(_folder(tmp_path))
    assert path.endswith("ckpt-100") and value == [100.0, -100.0]


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated: the reader raises IndexError
        lambda b: b"\0" * len(b),  # overwritten: a checksum OpError
    ],
    ids=["truncated", "zeroed"],
)
def test_a_damaged_newest_data_file_is_skipped_for_the_one_before(tmp_path, capfd, damage):
    data = _data_file(_folder(tmp_path), 100)
    data.write_bytes(damage(data.read_bytes()))
    _, path, value = _restore(tmp_path)
    assert path.endswith("ckpt-50") and value == [50.0, -50.0]
    assert f"skipped unreadable {tmp_path / 'ckpt-100'}" in capfd.readouterr().err


@pytest.mark.parametrize("state", ["garbage {{{", None], ids=["garbage", "deleted"])
def test_a_damaged_state_file_loses_no_checkpoint(tmp_path, capfd, state):
    _folder(tmp_path)
    if state is None:
        (tmp_path / "checkpoint").unlink()
    else:
        (tmp_path / "checkpoint").write_text(state)
    manager, path, value = _restore(tmp_path)
    assert path.endswith("ckpt-100") and value == [100.0, -100.0]
    assert "does not list ckpt-50, ckpt-100" in capfd.readouterr().err
    # The state file is rewritten: the manager lists both and rotates them on the next save.
    assert [p.rsplit("/", 1)[-1] for p in manager.checkpoints] == ["ckpt-50", "ckpt-100"]
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-100")


def test_every_checkpoint_unreadable_refuses_the_run(tmp_path):
    _folder(tmp_path)
    for step in (50, 100):
        _data_file(tmp_path, step).write_bytes(b"")
    with pytest.raises(RunRefused, match="No checkpoint in this run folder can be read"):
        _restore(tmp_path)


def test_an_empty_folder_restores_nothing(tmp_path):
    manager, path, value = _restore(tmp_path)
    assert path is None and value == [0.0, 0.0] and manager.checkpoints == []


def test_checkpoints_on_disk_are_ordered_by_step_not_by_name(tmp_path):
    _folder(tmp_path, steps=(9, 10))
    assert [p.rsplit("/", 1)[-1] for p in checkpoints_on_disk(str(tmp_path))] == [
        "ckpt-9",
        "ckpt-10",
    ]
