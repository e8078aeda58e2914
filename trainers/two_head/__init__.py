"""The two-head classification experiment behind `trainers/train_two_head.py`, callable
without flags.

Evaluated on held-out images of the training classes: top-1 (micro) and macro accuracy,
per-class accuracy, Recall@K / NMI / MAP@R of the embedding head (of the pooled features for
the single-head modes), and the share of misclassified test images whose nearest training
image in that embedding has the predicted label.

- `config`: `TwoHeadConfig` (the flags), the datasets (one `trainers.harness.datasets.Dataset`
  record each) and `resolve`;
- `modes`: the --mode records (the papers' settings per mode, each mode's loss term);
- `inputs`: the split, its long-tail and scarce-data subsets and the class checks;
- `model`: the one- or two-head model and its losses;
- `evaluate`: the held-out evaluation;
- `train`: `train_two_head` (config → data → model → losses → the harness's loop);
- `plots`: the run's description and figures.

    config = TwoHeadConfig(output_dir="/tmp/run", mode="hard")   # glyphs, two-head (hard)
    results = train_two_head(config)                            # also in results.json

Its training code (Keras) is imported when one of its names is first read (`harness.lazy`).
"""

from trainers.harness import lazy

__getattr__, __all__ = lazy.exports(
    __name__,
    {
        "config": (
            "DATASETS",
            "MODES",
            "TWO_HEAD_MODES",
            "ConfigError",
            "TwoHeadConfig",
            "has_embedding_head",
            "resolve",
        ),
        "evaluate": ("evaluate", "retrieval_features"),
        "inputs": ("check_classes", "load_split"),
        "model": ("build_losses", "build_model"),
        "plots": ("describe", "plot_run", "run_title"),
        "train": ("setup", "train_two_head"),
    },
)
