"""Resuming from checkpoints that may have been damaged or deleted by hand."""

import glob
import os
import re
import sys

import tensorflow as tf

from trainers.harness.run_dir import RunRefused

# What reading a checkpoint whose files are missing, truncated or foreign raises: TensorFlow's
# errors (NotFound, DataLoss, a checksum mismatch as a bare OpError, ...), and an IndexError
# from the reader when a `.data` file is shorter than its index says.
_UNREADABLE = (tf.errors.OpError, IndexError)


def _step(path):
    return int(path.rsplit("-", 1)[-1])


def checkpoints_on_disk(directory):
    """The checkpoint prefixes whose ``.index`` file is in `directory`, oldest first."""
    prefixes = [path[: -len(".index")] for path in glob.glob(os.path.join(directory, "*.index"))]
    return sorted((p for p in prefixes if re.fullmatch(r".*-\d+", p)), key=_step)


def restore_newest_readable(checkpoint, directory, max_to_keep, keep_in=None):
    """Restores the newest checkpoint in `directory` that reads completely into `checkpoint`.

    The candidates are the checkpoints the state file (``directory/checkpoint``) lists and
    those whose files are on disk, so a damaged or deleted state file loses no checkpoint (it
    is rewritten to list them); they are tried newest first, unreadable ones skipped with a
    note on stderr. If every candidate is unreadable the run is refused (RunRefused) rather
    than silently restarted from scratch.

    With `keep_in` (a non-chief worker of a multi-worker run, restoring the chief's
    checkpoints), `directory` is only read (its state file is left as it is) and the manager
    saves into `keep_in` instead.

    Returns ``(manager, path)``: a `tf.train.CheckpointManager` of `checkpoint` in `directory`
    (or `keep_in`) keeping `max_to_keep` checkpoints, and the restored path (None when there
    was none).
    """
    listed = list(tf.train.CheckpointManager(checkpoint, directory, max_to_keep).checkpoints)
    on_disk = checkpoints_on_disk(directory)
    unlisted = [p for p in on_disk if p not in listed]
    candidates = sorted(set(listed) | set(on_disk), key=_step)
    if unlisted and keep_in is None:
        print(
            f"[checkpoints] {os.path.join(directory, 'checkpoint')} does not list "
            f"{', '.join(os.path.basename(p) for p in unlisted)} (the state file is damaged, "
            "deleted or older); rewriting it to list the checkpoint files on disk",
            file=sys.stderr,
        )
        # With their files' times, so that the manager rotates them (it keeps for ever the
        # checkpoints older than `last_preserved_timestamp`).
        times = [os.path.getmtime(f"{p}.index") for p in on_disk]
        tf.compat.v1.train.update_checkpoint_state(
            directory,
            on_disk[-1],
            all_model_checkpoint_paths=on_disk,
            all_model_checkpoint_timestamps=times,
            last_preserved_timestamp=min(times) - 1.0,
        )
    manager = tf.train.CheckpointManager(checkpoint, keep_in or directory, max_to_keep)
    skipped = []
    for path in reversed(candidates):
        try:
            checkpoint.restore(path).assert_existing_objects_matched()
        except (*_UNREADABLE, AssertionError) as error:
            first_line = (str(error).splitlines() or [""])[0]
            skipped.append(f"{path} ({type(error).__name__}: {first_line})")
            continue
        for note in skipped:
            print(f"[checkpoints] skipped unreadable {note}; resuming from {path}", file=sys.stderr)
        return manager, path
    if skipped:
        raise RunRefused(
            "No checkpoint in this run folder can be read: " + "; ".join(skipped) + ". Move the "
            "folder away to start anew."
        )
    return manager, None
