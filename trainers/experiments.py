"""The training programs, one `Program` record each: which experiment package a program runs,
its config class, its resolve and its training function. The programs' modules
(``python -m trainers.train_retrieval``) and the one entry (``python -m trainers retrieval``)
both start a run with `main`.

Adding a training program is one record here and a module whose docstring is its ``--help``
text and whose ``__main__`` block calls ``experiments.main("<its name>")``.
"""

import dataclasses
import importlib

from trainers.harness import cli


@dataclasses.dataclass(frozen=True)
class Program:
    """A training program. `package` is its experiment's, under `trainers/`; `config`, `train`
    and `resolve` name that package's config class, training function (read after the flags
    are checked: it imports Keras) and resolve (the refusals that need no data; it returns the
    config the run takes). `tensorflow_only` says why the program runs on TensorFlow alone
    (None: on every Keras backend)."""

    name: str
    package: str
    config: str
    train: str
    resolve: str = "resolve"
    tensorflow_only: str | None = None


PROGRAMS = {
    program.name: program
    for program in (
        Program("train_retrieval", "retrieval", "RetrievalConfig", "train_retrieval", "check"),
        Program("train_two_head", "two_head", "TwoHeadConfig", "train_two_head"),
        Program(
            "train_contrastive",
            "contrastive",
            "ContrastiveConfig",
            "train_contrastive",
            tensorflow_only="its ContrastiveModel train step, momentum encoder and queue are "
            "TensorFlow's",
        ),
        Program(
            "train_gan_mog",
            "gan_mog",
            "GanConfig",
            "train_gan_mog",
            tensorflow_only="the unrolled GAN's functional Adam and its train step are written "
            "with TensorFlow's tapes",
        ),
        Program(
            "pretrain_glyphs",
            "pretraining",
            "PretrainConfig",
            "pretrain",
            tensorflow_only="its batches come from a tf.data pipeline, not yet from the "
            "trainers' runtime",
        ),
    )
}


def main(name, argv=None):
    """Runs the program `name` (a key of `PROGRAMS`) on `argv` (`trainers.harness.cli.main`:
    its flags from the config class, the config resolved once, then the training function on
    it); exits with the shared codes."""
    program = PROGRAMS[name]
    package = importlib.import_module(f"trainers.{program.package}")
    cli.main(
        getattr(package, program.config),
        lambda config: getattr(package, program.train)(config),  # the training code, read now
        program.name,
        argv,
        check=getattr(package, program.resolve),  # refusals that need no data: before Keras
        tensorflow_only=program.tensorflow_only,
    )
