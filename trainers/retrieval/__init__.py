"""The retrieval experiment behind `trainers/train_retrieval.py`, callable without flags.

- `ranking`: the ranking losses, one `RankingLoss` record each (class, the papers' settings);
- `config`: `RetrievalConfig` (the flags), `resolve` (or apart, as a run takes it:
  `resolve_before_data`, then `with_training_classes` once the split is read) and `check`;
- `inputs`: the split and what the P x K sampler draws from;
- `model`: the training model, the loss and the optimizer;
- `train`: `train_retrieval` (config → data → model → loss → the harness's loop);
- `plots`: the figures.

    config = RetrievalConfig(output_dir="/tmp/run")      # glyphs, contrastive + SVMax
    results = train_retrieval(config)                     # also written to results.json
"""

from trainers.harness.config import ConfigError
from trainers.retrieval.config import (
    DATASETS,
    EMBEDDED,
    LOSSES,
    REGULARIZERS,
    XBM_LOSSES,
    RetrievalConfig,
    check,
    resolve,
    resolve_before_data,
    with_training_classes,
)
from trainers.retrieval.inputs import load_split, read_split, train_features, with_loaders
from trainers.retrieval.model import (
    build_loss,
    build_optimizer,
    build_training_model,
    head_output,
)
from trainers.retrieval.plots import plot_run, run_title
from trainers.retrieval.ranking import RANKING, RANKING_LOSSES, RankingLoss
from trainers.retrieval.train import evaluate_untrained, setup, train_retrieval

__all__ = [
    "DATASETS",
    "EMBEDDED",
    "LOSSES",
    "RANKING",
    "RANKING_LOSSES",
    "REGULARIZERS",
    "XBM_LOSSES",
    "ConfigError",
    "RankingLoss",
    "RetrievalConfig",
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
