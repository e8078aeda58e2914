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

Its training code (Keras) is imported when one of its names is first read (`harness.lazy`).
"""

from trainers.harness import lazy

__getattr__, __all__ = lazy.exports(
    __name__,
    {
        "config": (
            "DATASETS",
            "LOSSES",
            "XBM_LOSSES",
            "ConfigError",
            "RetrievalConfig",
            "check",
            "resolve",
            "resolve_before_data",
            "with_training_classes",
        ),
        "inputs": ("load_split", "read_split", "train_features", "with_loaders"),
        "model": ("build_loss", "build_optimizer", "build_training_model", "head_output"),
        "options": ("LR_SCHEDULES", "REGULARIZERS", "Regularizer", "Schedule"),
        "plots": ("plot_run", "run_title"),
        "ranking": ("RANKING", "RANKING_LOSSES", "RankingLoss"),
        "train": ("evaluate_untrained", "setup", "train_retrieval"),
    },
)
