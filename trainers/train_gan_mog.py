"""GAN on the 2-D ring of 8 Gaussians, with SVMax on the generator's fake batch (SVMax paper
Sec. 4.2, Fig. 3).

    python -m trainers.train_gan_mog                                   # vanilla, lr 0.025
    python -m trainers.train_gan_mog --svmax_lambda=0.01               # + SVMax (paper)
    python -m trainers.train_gan_mog --variant=unrolled --svmax_lambda=0.01
    python -m trainers.reproduce_gan_mog                               # Fig. 3 rows x seeds

Every evaluation writes the generated points (samples/step_<N>.npy) and VEEGAN's mode coverage
(modes_covered, high_quality_fraction, mode_kl) to results.json; the final points are
samples.npy. Re-running the same command resumes from the last checkpoint in --output_dir.
`--flagfile=FILE` reads flags from a file; command-line flags after it override it.
Exit status: 0 completed, 1 diverged (non-finite loss), 2 refused (flag combination, or an
--output_dir in use by another run or holding another configuration), 130 interrupted (Ctrl-C;
the same command resumes).
"""

from trainers import experiments

if __name__ == "__main__":
    experiments.main("train_gan_mog")
