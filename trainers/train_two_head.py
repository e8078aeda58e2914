"""Two-head classification: softmax plus a ranking-loss (or center, or OLÉ) regularizer
(dissertation Ch. 5; OLÉ paper).

    python -m trainers.train_two_head                          # glyphs, two-head (hard)
    python -m trainers.train_two_head --mode=softmax           # the single-head baseline
    python -m trainers.train_two_head --mode=ole --train_images_per_class=8
    python -m trainers.train_two_head --dataset=fgvr --data_dir=/data/flowers102 \\
        --image_dir=jpg --backbone=resnet50 --weights=imagenet --mode=semi_hard

Flags left unset take the paper's value for the chosen mode (λ) or the dataset's (train_steps).
Re-running the same command resumes from the last checkpoint in --output_dir.
`--flagfile=FILE` reads flags from a file; command-line flags after it override it.
Exit status: 0 completed, 1 diverged (non-finite loss) or failed (a named cause such as a
corrupt image), 2 refused (flag combination, or an
--output_dir in use by another run or holding another configuration), 130 interrupted
(Ctrl-C; the same command resumes).
"""

from trainers import experiments

if __name__ == "__main__":
    experiments.main("train_two_head")
