"""Resuming from checkpoints that may have been damaged or deleted by hand."""

import sys

import tensorflow as tf

from trainers.harness.run_dir import RunRefused

# What reading a checkpoint whose files are missing, truncated or foreign raises.
_UNREADABLE = (tf.errors.NotFoundError, tf.errors.DataLossError, tf.errors.InvalidArgumentError)


def restore_newest_readable(checkpoint, manager):
    """Restores the newest of `manager`'s checkpoints that reads completely into `checkpoint`
    and returns its path (None when there is none). Newer unreadable ones are skipped with a
    note on stderr; if every listed checkpoint is unreadable the run is refused (RunRefused)
    rather than silently restarted from scratch."""
    skipped = []
    for path in reversed(manager.checkpoints):
        try:
            checkpoint.restore(path).assert_existing_objects_matched()
        except (*_UNREADABLE, AssertionError) as error:
            skipped.append(f"{path} ({type(error).__name__}: {str(error).splitlines()[0]})")
            continue
        for note in skipped:
            print(f"[checkpoints] skipped unreadable {note}; resuming from {path}", file=sys.stderr)
        return path
    if skipped:
        raise RunRefused(
            "No checkpoint in this run folder can be read: " + "; ".join(skipped) + ". Move the "
            "folder away to start anew."
        )
    return None
