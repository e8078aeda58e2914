"""The trainers' command line: flags from the config dataclass, the shared exit codes.

    harness.cli.main(
        retrieval.RetrievalConfig,
        lambda config: retrieval.train_retrieval(config),  # read once TensorFlow is imported
        "train_retrieval",
        check=retrieval.check,
    )

(the training programs call it through `trainers.experiments.main`, from one record each).
Flags are defined, parsed and checked (absl's parsing, the config's fields, the trainer's
`check`: every refusal that needs no data; it returns the resolved config the run is given)
before TensorFlow is imported: ``--help`` and a
refused flag return in under a second, without TensorFlow's start-up lines. TensorFlow is
imported (`trainers.quiet_start`) when the run starts, where it is Keras' backend (with
``KERAS_BACKEND=jax`` or ``torch`` nothing is, and TensorFlow need not be installed), then the
training code.

Exit status: 0 completed, 1 diverged (non-finite loss) or failed (a named cause, e.g. a corrupt
image, a full disk), 2 refused (a flag absl cannot parse, a flag combination the trainer cannot
run, an --output_dir in use by another run or holding another configuration), 130 interrupted
(Ctrl-C; the same command resumes).
"""

import errno
import os
import sys

from absl import flags, logging

from trainers import quiet_start
from trainers.harness import flags as harness_flags
from trainers.harness.run_dir import RunFailed, RunRefused, layout

EXIT_COMPLETED, EXIT_DIVERGED, EXIT_REFUSED, EXIT_INTERRUPTED = 0, 1, 2, 130


def interrupted_message(config):
    """One line: where the run stopped and how to resume it."""
    if config is None or "keras" not in sys.modules:  # stopped while checking the flags
        return "interrupted before the run started."
    from trainers.harness import checkpoints  # Keras was imported before the run started

    step = checkpoints.latest_step(layout(config.output_dir)["checkpoints"])
    if not step:
        return "interrupted before the first checkpoint; the same command starts the run anew."
    return (
        f"interrupted; the checkpoint of step {step} in {config.output_dir} is kept. Run the "
        "same command to resume from it."
    )


def quiet_checkpoint_logs():
    """Raises absl's log level to WARNING unless --verbosity was given: TensorFlow's checkpoint
    saver logs one INFO line per save through absl, which would interleave with the progress
    lines; --verbosity=0 brings them back."""
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)


def define_program_flags(config_class, **kwargs):
    """Defines `config_class`'s flags (`define_flags` with `kwargs`) as the running program's:
    --help lists the main module's key flags, and these are defined from the harness."""
    before = set(flags.FLAGS)
    harness_flags.define_flags(config_class, **kwargs)
    for flag in sorted(set(flags.FLAGS) - before):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[flag])


# What a write into a full disk (or over the user's quota) raises: OSError with one of these
# errno values, or a framework's own error carrying its text (TensorFlow's file writers raise a
# ResourceExhaustedError "...; No space left on device").
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(error):
    """Whether `error` is a write into a full disk or over the quota (see `DISK_FULL`)."""
    if isinstance(error, OSError) and error.errno in DISK_FULL:
        return True
    return any(os.strerror(code) in str(error) for code in DISK_FULL)


def disk_full_message(error):
    """One sentence for `disk_full`'s `error`: what is kept and how to go on."""
    where = f" writing {error.filename}" if getattr(error, "filename", None) else ""
    reason = error.strerror if isinstance(error, OSError) else str(error).strip().splitlines()[-1]
    return (
        f"the disk is full ({reason}{where}). Nothing written before is lost: results.json "
        "keeps the evaluations it recorded (its status stays 'running') and the last complete "
        "checkpoint is kept; free some space and run the same command to resume."
    )


def exit_status(name, body, interrupted):
    """``body()``'s exit status, or the shared one of what it raised, with a line on stderr:
    2 refused (`RunRefused`, `FlagValueError`), 1 failed (`RunFailed`, a full disk),
    130 interrupted (Ctrl-C; ``interrupted()`` says where the work stopped and how to resume
    it)."""
    try:
        return body()
    except (RunRefused, harness_flags.FlagValueError) as error:
        print(f"{name}: refused: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except RunFailed as error:
        print(f"{name}: failed: {error}", file=sys.stderr)
        return EXIT_DIVERGED
    except Exception as error:
        if not disk_full(error):
            raise
        print(f"{name}: failed: {disk_full_message(error)}", file=sys.stderr)
        return EXIT_DIVERGED
    except KeyboardInterrupt:
        print(f"\n{name}: {interrupted()}", file=sys.stderr)
        return EXIT_INTERRUPTED


def refuse_off_tensorflow(name, reason):
    """Raises RunRefused, in one sentence naming `reason`, unless Keras' backend (as it will
    resolve it: `quiet_start.keras_backend`) is TensorFlow: for the programs that are
    TensorFlow by nature."""
    backend = quiet_start.keras_backend()
    if backend != "tensorflow":
        raise RunRefused(
            f"{name} runs with KERAS_BACKEND=tensorflow only ({reason}); this process would use "
            f"{backend}."
        )


def main(config_class, train, name, argv=None, *, check=None, tensorflow_only=None):
    """Defines `config_class`'s flags, parses `argv`, makes the config and resolves it once
    with ``check(config)`` (the trainer's resolve: refuses what it refuses, raising
    `RunRefused`, e.g. `ConfigError`, and returns the config marked resolved), then imports
    TensorFlow where it is the backend (`quiet_start.import_tensorflow`) and runs
    ``train(config)`` on the resolved config (which takes it as it is); exits with the
    shared codes. Nothing before ``train`` imports Keras or TensorFlow: `train` is where the
    program imports its training code (e.g. reading a name of its package: `harness.lazy`).
    With `tensorflow_only` (why the program is TensorFlow by nature), another backend is
    refused (exit 2) once the flags are checked (`refuse_off_tensorflow`). Call once, from the
    program's ``if __name__ == "__main__"``."""
    define_program_flags(config_class)

    def run(argv):
        del argv
        quiet_checkpoint_logs()
        parsed = []  # the config, once the flags made one: where an interrupted run stopped

        def train_from_flags():
            parsed.append(harness_flags.config_from_flags(config_class))
            if check is not None:  # the refusals that need no data, before TensorFlow loads
                parsed[0] = check(parsed[0])
            if tensorflow_only is not None:
                refuse_off_tensorflow(name, tensorflow_only)
            quiet_start.import_tensorflow()
            results = train(parsed[0])
            return EXIT_COMPLETED if results["status"] == "completed" else EXIT_DIVERGED

        return exit_status(
            name, train_from_flags, lambda: interrupted_message(parsed[0] if parsed else None)
        )

    harness_flags.run(run, argv)
