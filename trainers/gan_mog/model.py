"""The GAN: PyTorch-initialised MLPs, the losses, and `RingGAN`'s alternating train step
(vanilla, or with the discriminator unrolled through `tf_svmax.training.FunctionalAdam`)."""

import math

import keras
import tensorflow as tf

from tf_svmax import ops
from tf_svmax.training import FunctionalAdam

ADAM_BETAS = (0.5, 0.999)  # the unrolled-GAN code's optim_betas
ADAM_EPSILON = 1e-8  # PyTorch's Adam default, which the original ran with


def _torch_linear(units, fan_in, activation, seed, name):
    """A Dense layer initialised as PyTorch's `nn.Linear`: weights and bias U(-1/sqrt(fan_in),
    1/sqrt(fan_in)) (the original code keeps that default)."""
    limit = 1.0 / math.sqrt(fan_in)
    return keras.layers.Dense(
        units,
        activation=activation,
        kernel_initializer=keras.initializers.RandomUniform(-limit, limit, seed=seed),
        bias_initializer=keras.initializers.RandomUniform(-limit, limit, seed=seed + 1),
        name=name,
    )


def mlp(input_dim, hidden_units, output_dim, activation, seed, name):
    """Two hidden layers of `hidden_units` with `activation`, then a linear output."""
    inputs = keras.Input((input_dim,))
    x = _torch_linear(hidden_units, input_dim, activation, seed, "hidden_1")(inputs)
    x = _torch_linear(hidden_units, hidden_units, activation, seed + 2, "hidden_2")(x)
    outputs = _torch_linear(output_dim, hidden_units, None, seed + 4, "output")(x)
    return keras.Model(inputs, outputs, name=name)


def discriminator_loss(real_logits, fake_logits):
    """BCE(D(real), 1) + BCE(D(fake), 0), each a batch mean (`nn.BCELoss` on the sigmoid)."""
    return tf.reduce_mean(tf.nn.softplus(-real_logits)) + tf.reduce_mean(
        tf.nn.softplus(fake_logits)
    )


def generator_loss(fake_logits):
    """The non-saturating loss BCE(D(G(z)), 1)."""
    return tf.reduce_mean(tf.nn.softplus(-fake_logits))


class RingGAN(keras.Model):
    """Generator and discriminator with the alternating train step; the Keras optimizer given to
    `compile` trains the generator, `d_optimizer` the discriminator.

    A batch is ``(real, discriminator noise, generator noise, unroll reals)``: the last is
    `[unroll_steps, b, 2]` (a real batch per unrolled update) or `[0, b, 2]` (every unrolled
    update reuses `real`)."""

    def __init__(
        self,
        generator,
        discriminator,
        d_optimizer,
        *,
        svmax_lambda,
        unroll_steps,
        unroll_gradient,
        unroll_adam_state="advance",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.generator, self.discriminator, self.d_optimizer = generator, discriminator, d_optimizer
        self.svmax_lambda, self.unroll_steps = svmax_lambda, unroll_steps or 0
        self.unroll_gradient, self.unroll_adam_state = unroll_gradient, unroll_adam_state
        self.trackers = [
            keras.metrics.Mean(name=name) for name in ("loss", "d_loss", "g_loss", "s_mu")
        ]

    @property
    def metrics(self):
        return self.trackers

    def call(self, noise, training=False):
        return self.generator(noise, training=training)

    def _unrolled_logits(self, reals, fake):
        """``(logits, adam_state)``: the discriminator's logits of `fake` after `unroll_steps`
        Adam updates from its current weights and optimizer state, update j on real batch
        ``reals[j]`` and on `fake` (held fixed for ``surrogate``), and the Adam ``(m, v, t)``
        those updates end with. The discriminator's variables are left untouched."""
        d = self.discriminator
        unroll_fake = tf.stop_gradient(fake) if self.unroll_gradient == "surrogate" else fake
        params = [x.value for x in d.trainable_variables]
        m, v, t = self.d_optimizer.state()
        for j in range(self.unroll_steps):
            with tf.GradientTape() as inner:
                inner.watch(params)
                loss = discriminator_loss(
                    d.stateless_call(params, [], reals[j])[0],
                    d.stateless_call(params, [], unroll_fake)[0],
                )
            grads = inner.gradient(loss, params)
            params, m, v, t = self.d_optimizer.update(params, grads, m, v, t)
        return d.stateless_call(params, [], fake)[0], (m, v, t)

    def train_step(self, batch):
        real, noise_d, noise_g, unroll_reals = batch
        d, g = self.discriminator, self.generator
        with tf.GradientTape() as tape:
            fake = tf.stop_gradient(g(noise_d, training=True))
            d_loss = discriminator_loss(d(real, training=True), d(fake, training=True))
        self.d_optimizer.apply(tape.gradient(d_loss, d.trainable_variables), d.trainable_variables)
        with tf.GradientTape() as tape:
            fake = g(noise_g, training=True)
            if self.unroll_steps:
                # A static shape: fresh batches, or the D step's batch for every update.
                reals = unroll_reals if unroll_reals.shape[0] else [real] * self.unroll_steps
                logits, unrolled_adam = self._unrolled_logits(reals, fake)
            else:
                logits = d(fake, training=True)
            g_loss = generator_loss(logits)
            s_mu = ops.mean_singular_value(fake)
            # A Python branch: lambda = 0 leaves the loss (and its gradient) untouched.
            total = g_loss - self.svmax_lambda * s_mu if self.svmax_lambda else g_loss
        grads = tape.gradient(total, g.trainable_variables)
        self.optimizer.apply(grads, g.trainable_variables)
        if self.unroll_steps and self.unroll_adam_state == "advance":
            self.d_optimizer.assign_state(*unrolled_adam)
        # The harness stops on a non-finite loss; a non-finite gradient (which would leave
        # non-finite weights behind a finite loss) is reported as one.
        loss = tf.where(
            tf.math.is_finite(tf.linalg.global_norm(grads)), d_loss + total, float("nan")
        )
        for tracker, value in zip(self.trackers, (loss, d_loss, g_loss, s_mu), strict=False):
            tracker.update_state(value)
        return {t.name: t.result() for t in self.trackers}


def build_gan(config):
    """The compiled `RingGAN` of a resolved config (weights seeded by ``config.seed``)."""
    keras.utils.set_random_seed(config.seed)
    # 16 seeds per run; modulo 2**32 (the + 12 of the last layer still fits): Keras' JAX seed
    # state is uint32, and config.seed may be up to 2**32 - 1 (unchanged below 2**28).
    seed = config.seed * 16 % 2**32
    generator = mlp(
        config.noise_dim, config.hidden_units, 2, config.generator_activation, seed, "generator"
    )
    discriminator = mlp(2, config.hidden_units, 1, "relu", seed + 8, "discriminator")
    # Adam for the discriminator with a functional update, so that unrolled updates start from
    # its true state (and, with unroll_adam_state="advance", are adopted).
    d_optimizer = FunctionalAdam(
        discriminator.trainable_variables,
        config.learning_rate,
        beta_1=ADAM_BETAS[0],
        beta_2=ADAM_BETAS[1],
        epsilon=ADAM_EPSILON,
        name="discriminator_adam",
    )
    gan = RingGAN(
        generator,
        discriminator,
        d_optimizer,
        svmax_lambda=config.svmax_lambda,
        unroll_steps=config.unroll_steps,
        unroll_gradient=config.unroll_gradient,
        unroll_adam_state=config.unroll_adam_state,
    )
    gan.compile(
        optimizer=keras.optimizers.Adam(
            config.learning_rate,
            beta_1=ADAM_BETAS[0],
            beta_2=ADAM_BETAS[1],
            epsilon=ADAM_EPSILON,
        ),
        jit_compile=False,  # nested tapes; and XLA gains nothing for these small products
    )
    return gan
