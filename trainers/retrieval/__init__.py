"""The retrieval experiment behind `trainers/train_retrieval.py`, callable without flags.

- `ranking`: the ranking losses, one `RankingLoss` record each (class, the papers' settings);
- `options`: the regularizers and the learning-rate schedules, one `Regularizer` or `Schedule`
  record each (help, constructor);
- `config`: `RetrievalConfig` (the flags), the datasets (one `trainers.harness.datasets.Dataset`
  record each), `resolve` (or apart, as a run takes it:
  `resolve_before_data`, then `with_training_classes` once the split is read) and `check`;
- `inputs`: the split and what the P x K sampler draws from;
- `model`: the training model, the loss and the optimizer;
- `train`: `train_retrieval` (config → data → model → loss → the harness's loop);
- `plots`: the figures.

    config = RetrievalConfig(output_dir="/tmp/run")      # glyphs, contrastive + SVMax
    results = train_retrieval(config)                     # also written to results.json

The config's names are imported with the package; the others (the training code: Keras,
TensorFlow) when first read (`trainers.harness.lazy`), so that the program's flags are
defined and checked without them.
"""

from trainers.harness import lazy
from trainers.harness.config import ConfigError
from trainers.retrieval.config import (
    DATASETS,
    LOSSES,
    XBM_LOSSES,
    RetrievalConfig,
    check,
    resolve,
    resolve_before_data,
    with_training_classes,
)
from trainers.retrieval.options import LR_SCHEDULES, REGULARIZERS, Regularizer, Schedule
from trainers.retrieval.ranking import RANKING, RANKING_LOSSES, RankingLoss

__getattr__ = lazy.attributes(
    __name__,
    {
        "inputs": ("load_split", "read_split", "train_features", "with_loaders"),
        "model": ("build_loss", "build_optimizer", "build_training_model", "head_output"),
        "plots": ("plot_run", "run_title"),
        "train": ("evaluate_untrained", "setup", "train_retrieval"),
    },
)

__all__ = [
    "DATASETS",
    "LOSSES",
    "LR_SCHEDULES",
    "RANKING",
    "RANKING_LOSSES",
    "REGULARIZERS",
    "XBM_LOSSES",
    "ConfigError",
    "RankingLoss",
    "Regularizer",
    "RetrievalConfig",
    "Schedule",
    "build_loss",
    "build_optimizer",
    "build_training_model",
    "check",
    "evaluate_untrained",
    "head_output",
    "load_split",
    "plot_run",
    "read_split",
    "resolve",
    "resolve_before_data",
    "run_title",
    "setup",
    "train_features",
    "train_retrieval",
    "with_loaders",
    "with_training_classes",
]
