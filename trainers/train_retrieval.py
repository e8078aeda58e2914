"""Retrieval training with a ranking loss and SVMax (SVMax paper Sec. 4.1, Table 1).

    python -m trainers.train_retrieval                       # glyphs, contrastive + SVMax
    python -m trainers.train_retrieval --dataset=cub200 --data_dir=/data/CUB_200_2011 \\
        --backbone=resnet50 --weights=imagenet --loss=triplet_hard --learning_rate=0.001

Flags left unset take the paper's value for the chosen loss (P x K, SVMax lambda, margin) or the
dataset's (train_steps). Re-running the same command resumes from the last checkpoint in
--output_dir. `--flagfile=FILE` reads flags from a file; command-line flags after it override it.
Exit status: 0 completed, 1 diverged (non-finite loss), 2 refused (flag combination, or
an --output_dir in use by another run or holding another configuration), 130 interrupted
(Ctrl-C; the same command resumes).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sys  # noqa: E402

from absl import flags, logging  # noqa: E402

from trainers import retrieval  # noqa: E402
from trainers.harness import flags as harness_flags  # noqa: E402
from trainers.harness.run_dir import RunRefused  # noqa: E402

FLAGS = flags.FLAGS
harness_flags.define_flags(retrieval.RetrievalConfig)
flags.adopt_module_key_flags(harness_flags)  # --help lists them as this program's flags


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        # TensorFlow's checkpoint saver logs one INFO line per save through absl, which would
        # interleave with the progress lines; --verbosity=0 brings them back.
        logging.set_verbosity(logging.WARNING)
    try:
        config = harness_flags.config_from_flags(retrieval.RetrievalConfig)
        results = retrieval.train_retrieval(config)
    except (RunRefused, harness_flags.FlagValueError) as error:
        print(f"train_retrieval: refused: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"\ntrain_retrieval: interrupted. The last checkpoint in {config.output_dir} is kept; "
            "run the same command again to resume from it.",
            file=sys.stderr,
        )
        return 130
    return 0 if results["status"] == "completed" else 1


if __name__ == "__main__":
    harness_flags.run(main)
