"""A trainer's output folder: one run at a time, one configuration per folder, records kept.

    with RunDirectory(output_dir, config_dict) as run:    # locks; refuses a foreign folder
        previous = run.previous_results()                 # None, or the record to resume
        ...
        run.write_results(results)                        # atomic

Layout: ``results.json`` (the record: configuration, evaluations, trace, status),
``config.json`` (the configuration alone, written before the first checkpoint, so a deleted
or damaged record cannot let another configuration resume these checkpoints),
``checkpoints/``, ``tensorboard/``, plots, and ``.lock`` (held while a process trains here;
the operating system releases it when the process ends, however it ends).
"""

import dataclasses
import fcntl
import json
import os

# What a folder without a recorded configuration may hold and still take a run: the lock this
# process took, and a run's own sub-folders (checked below: checkpoints must be empty).
_RUN_FOLDER_PARTS = {".lock", "checkpoints", "tensorboard"}


class RunRefused(ValueError):
    """The folder cannot take this run (exit status 2); the message says why and what to do."""


class RunFailed(RuntimeError):
    """The run stopped on an error whose cause `Job.diagnose` named, or a multi-worker run
    lost a worker (exit status 1). (Here, beside `RunRefused`, so that the command line
    `trainers.harness.cli` knows both without importing the training loop.)"""


def identity(config_dict, config_class):
    """The entries of `config_dict` that define a run (fields its option does not mark
    ``identity=False``, `trainers.harness.flags.option`): what a folder's runs must share."""
    ignored = {
        f.name for f in dataclasses.fields(config_class) if f.metadata.get("identity") is False
    }
    return {k: v for k, v in config_dict.items() if k not in ignored}


def config_differences(old, new):
    """Fields recorded in both `old` and `new` whose values differ. A field absent from `old`
    (added to the config after that run started) takes its default; one absent from `new` does
    not define the run (where it writes, how much it prints): neither is a difference."""
    return sorted(k for k in old if k in new and old[k] != new[k])


def layout(output_dir):
    """The paths of a run folder's parts (see the module docstring)."""
    return {
        "results": os.path.join(output_dir, "results.json"),
        "config": os.path.join(output_dir, "config.json"),
        "checkpoints": os.path.join(output_dir, "checkpoints"),
        "tensorboard": os.path.join(output_dir, "tensorboard"),
        "plots": output_dir,
    }


class RunDirectory:
    """The run folder under `output_dir` for the run that `config_dict` (JSON values: the
    fields that define what the run computes) identifies."""

    def __init__(self, output_dir, config_dict):
        self.output_dir = output_dir
        self.config = config_dict
        self.paths = layout(output_dir)
        self._lock = None

    def __enter__(self):
        os.makedirs(self.output_dir, exist_ok=True)
        self._acquire()
        try:
            self._claim()
        except BaseException:
            self._release()
            raise
        return self

    def __exit__(self, *exc):
        self._release()
        return False

    def _acquire(self):
        lock = open(os.path.join(self.output_dir, ".lock"), "a+")  # noqa: SIM115 (held open)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            lock.close()
            raise RunRefused(
                f"--output_dir={self.output_dir!r} is in use by a run in progress ({holder}). "
                "Wait for it, or use another --output_dir."
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        self._lock = lock

    def _release(self):
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _read(self, key):
        """The JSON file `key`, or None if absent; a damaged file is refused by name."""
        path = self.paths[key]
        if not os.path.exists(path):
            return None
        try:
            with open(path) as f:
                return json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise RunRefused(
                f"{path} is damaged ({error}); this run cannot be resumed from it. Move the "
                "folder away to start anew, or restore the file."
            ) from None

    def _claim(self):
        """Refuses a folder that holds another configuration; records this one."""
        recorded = self._read("config")
        if recorded is None:
            previous = self._read("results")
            recorded = None if previous is None else previous.get("config")
            if previous is not None and not recorded:
                raise RunRefused(f"{self.paths['results']} records no configuration.")
        if recorded is None:
            foreign = sorted(set(os.listdir(self.output_dir)) - _RUN_FOLDER_PARTS)
            if foreign:
                more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
                raise RunRefused(
                    f"--output_dir={self.output_dir!r} is not empty ({', '.join(foreign[:5])}"
                    f"{more}) and is not a run folder (no config.json or results.json); a run "
                    "would mix its files with these. Use a new or empty --output_dir."
                )
        if recorded is None and os.path.isdir(self.paths["checkpoints"]):
            if os.listdir(self.paths["checkpoints"]):
                raise RunRefused(
                    f"--output_dir={self.output_dir!r} holds checkpoints but no record of their "
                    "configuration (config.json and results.json are gone); they cannot be "
                    "resumed safely. Use a new --output_dir."
                )
        if recorded is not None:
            changed = config_differences(recorded, self.config)
            if changed:
                raise RunRefused(
                    f"--output_dir={self.output_dir!r} holds a run with a different "
                    f"configuration (differs in: {', '.join(changed)}). Use a new --output_dir "
                    "to start a new run, or the same flags to resume that one."
                )
        from tf_svmax import records  # when a run starts: the flags' checks import no Keras

        records.write_json(self.paths["config"], self.config)

    def previous_results(self):
        """The record of an earlier attempt of this run, or None."""
        return self._read("results")

    def write_results(self, results):
        from tf_svmax import records

        records.write_json(self.paths["results"], results)
