"""Contrastive pre-training with the low-rank prior (LORAC, seed 003) and its baselines MoCo-M
(multi-query, no prior) and MoCo (one query), then a linear probe and k-NN on held-out images.

    python -m trainers.train_contrastive                        # LORAC on the glyphs (M = 4)
    python -m trainers.train_contrastive --method=moco_m        # the same without the prior
    python -m trainers.train_contrastive --method=moco          # one query, one key
    python -m trainers.train_contrastive --dataset=digits       # tiny and fast

Every evaluation writes the linear-probe and k-NN accuracies, the mean nuclear norm of 32
augmented views of each held-out image and open-set Recall@1 / MAP@R to results.json; the
finished query encoder is encoder.keras. Re-running the same command resumes from the last
checkpoint in --output_dir (encoder, key encoder, queue and optimizer).
`--flagfile=FILE` reads flags from a file; command-line flags after it override it.
Exit status: 0 completed, 1 diverged (non-finite loss), 2 refused (flag combination, or an
--output_dir in use by another run or holding another configuration), 130 interrupted (Ctrl-C;
the same command resumes).
"""

from trainers import experiments

if __name__ == "__main__":
    experiments.main("train_contrastive")
