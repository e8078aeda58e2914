"""Retrieval training with a ranking loss and SVMax (SVMax paper Sec. 4.1, Table 1).

    python -m trainers.train_retrieval                       # glyphs, contrastive + SVMax
    python -m trainers.train_retrieval --dataset=cub200 --data_dir=/data/CUB_200_2011 \\
        --backbone=resnet50 --weights=imagenet --loss=triplet_hard --learning_rate=0.001

Flags left unset take the paper's value for the chosen loss (P x K, SVMax lambda, margin) or the
dataset's (train_steps). Re-running the same command resumes from the last checkpoint in
--output_dir. `--flagfile=FILE` reads flags from a file; command-line flags after it override it.
Exit status: 0 completed, 1 diverged (non-finite loss) or failed (a named cause such as a
corrupt image), 2 refused (flag combination, or
an --output_dir in use by another run or holding another configuration), 130 interrupted
(Ctrl-C; the same command resumes).
"""

from trainers import experiments

if __name__ == "__main__":
    experiments.main("train_retrieval")
