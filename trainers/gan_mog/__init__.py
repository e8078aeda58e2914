"""The GAN on the 2-D ring of 8 Gaussians behind `trainers/train_gan_mog.py`, callable without
flags (SVMax paper, seed `000`, Sec. 4.2, Fig. 3; dissertation `001`, Sec. 3.5).

The setup is the public PyTorch unrolled-GAN code the paper modified (andrewliao11/unrolled-gans):
noise 256-d N(0, 1); generator and discriminator MLPs with two hidden layers of 128 (generator
tanh, discriminator ReLU and a sigmoid output), PyTorch's default `nn.Linear` initialisation,
batch 512, Adam with betas (0.5, 0.999) for both, binary cross-entropy with the non-saturating
generator loss, 3,000 iterations, mixture radius 2 and std 0.02, one discriminator step per
generator step. The paper's single change: learning rate 0.025 for both networks. SVMax acts on
the generator's `b x 2` fake batch in its unbounded form, ``L_G - lambda * s_mu`` (paper:
lambda = 0.01); the fake points are not normalised, so the bounds recorded are those of rows
of norm = the ring's radius (``L = r sqrt(b) / d``, ``U = r sqrt(b / d)``).

`variant="unrolled"` (Metz et al. 2017): the generator's loss is taken at the discriminator
after `unroll_steps` Adam updates. The defaults are what the PyTorch code does:
``unroll_gradient="surrogate"`` treats those updates as constants (its Adam step is not
differentiable), so the gradient only sees the unrolled weights; ``"through"`` (Metz)
differentiates through them. ``unroll_real="fresh"`` draws a new real batch for every unrolled
update (``"reused"``: the discriminator step's batch each time). ``unroll_adam_state="advance"``
keeps the unrolled updates' Adam moments and step count, restoring only the weights (the
original's ``D.load(backup)`` copies weights, not the optimizer), so the discriminator's Adam
advances 1 + K steps per iteration; ``"copy"`` starts each unroll from a copy of the state and
discards it (Metz et al.'s unroll).

The mixture's modes are equally weighted (`mixture="uniform"`, the paper's figure) or weighted
as the notebook's active default draws them (`"random"`: `data.random_mode_weights`, seeded by
`mixture_seed`; the notebook never seeds it).

Evaluation: `num_samples` points from fixed noise, VEEGAN's mode coverage
(`tf_svmax.metrics.mode_coverage`), the points' s_mu; every evaluation's points are kept in
``samples/step_<N>.npy`` and the final ones as ``samples.npy``.

    config = GanConfig(output_dir="/tmp/gan", svmax_lambda=0.01)
    results = train_gan_mog(config)                # also in results.json

Its training code (Keras) is imported when one of its names is first read (`harness.lazy`).
"""

from trainers.harness import lazy

__getattr__, __all__ = lazy.exports(
    __name__,
    {
        "config": (
            "NOTEBOOK_UNROLL_STEPS",
            "PAPER_SVMAX_LAMBDA",
            "PAPER_UNROLL_STEPS",
            "UNROLL_ADAM_STATE",
            "UNROLL_GRADIENTS",
            "UNROLL_REAL",
            "ConfigError",
            "GanConfig",
            "resolve",
            "svmax_bounds",
        ),
        "evaluate": ("sample_path",),
        "model": ("build_gan", "discriminator_loss", "generator_loss"),
        "plots": ("draw_density",),
        "train": ("batches", "train_gan_mog"),
    },
)
