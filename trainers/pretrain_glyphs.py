"""Pretrains a small backbone by classification on the glyph pretraining source (over a
thousand character classes disjoint from the retrieval glyphs), the stand-in for ImageNet
pretraining in the fine-tuning regime of SVMax Table 1.

    python -m trainers.pretrain_glyphs --output_dir=runs/pretrain_small_cnn_bn
    python -m trainers.train_retrieval --backbone=small_cnn_bn \\
        --weights=runs/pretrain_small_cnn_bn/backbone.weights.h5

Re-running the same command resumes from the last checkpoint in --output_dir. Exit status: 0
completed, 1 diverged (non-finite loss), 2 refused (a flag combination, or an --output_dir in use
by another run or holding another configuration), 130 interrupted (the same command resumes).
"""

from trainers import experiments

if __name__ == "__main__":
    experiments.main("pretrain_glyphs")
