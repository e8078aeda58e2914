"""One entry for the training programs: ``python -m trainers PROGRAM [flags]`` is
``python -m trainers.PROGRAM [flags]`` (the same flags, help, refusals and exit status), where
PROGRAM is one of `trainers.experiments.PROGRAMS` and a leading ``train_`` may be left out:

    python -m trainers retrieval --dataset=digits      # python -m trainers.train_retrieval ...
    python -m trainers pretrain_glyphs --help
"""

import importlib
import sys

from trainers import experiments
from trainers.harness.cli import EXIT_REFUSED

COMMANDS = {
    **{name.removeprefix("train_"): name for name in experiments.PROGRAMS},
    **{name: name for name in experiments.PROGRAMS},
}


def main(argv):
    """Runs the program `argv[1]` names on the flags after it; exit status 2 (refused) with
    the accepted names where it names none."""
    if len(argv) < 2 or argv[1] not in COMMANDS:
        received = repr(argv[1]) if len(argv) > 1 else "nothing"
        print(
            f"trainers: refused: expected a program, one of {sorted(COMMANDS)}; received "
            f"{received}.",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_REFUSED)
    name = COMMANDS[argv[1]]
    # absl's --help prints the main module's docstring: the program's own.
    sys.modules["__main__"].__doc__ = importlib.import_module(f"trainers.{name}").__doc__
    experiments.main(name, [argv[0], *argv[2:]])


main(sys.argv)
