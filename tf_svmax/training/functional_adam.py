"""Adam whose update is a pure function of tensors, for training steps that differentiate
through an optimizer step (an unrolled GAN discriminator, Metz et al. 2017) and then continue
from the same state.

`keras.optimizers.Adam` updates its variables in place, so a step cannot be backpropagated
through; `adam_update` is the same step as a function of ``(params, grads, m, v, t)``, and
`FunctionalAdam` keeps that state in (checkpointable) variables.
"""

import tensorflow as tf

from tf_svmax import checks


def adam_update(params, grads, m, v, t, *, learning_rate, beta_1, beta_2, epsilon):
    """One Adam step as tensors, returning ``(params, m, v, t)``; differentiable in `params`
    and `grads`.

    Keras' form of the step: ``lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) +
    epsilon)`` with ``t`` counted from 1 (PyTorch's Adam rounds the same values through another
    order of operations).

    Args:
      params, grads, m, v: Lists of tensors of matching shapes (the first moments `m` and the
        second moments `v` start at zeros).
      t: Scalar float tensor, the steps taken so far (0 before the first).
      learning_rate, beta_1, beta_2, epsilon: Adam's hyperparameters.
    """
    t = t + 1.0
    step = learning_rate * tf.sqrt(1.0 - beta_2**t) / (1.0 - beta_1**t)
    m = [beta_1 * a + (1.0 - beta_1) * g for a, g in zip(m, grads, strict=True)]
    v = [beta_2 * a + (1.0 - beta_2) * tf.square(g) for a, g in zip(v, grads, strict=True)]
    params = [p - step * a / (_sqrt(b) + epsilon) for p, a, b in zip(params, m, v, strict=True)]
    return params, m, v, t


def _sqrt(x):
    """sqrt with a zero gradient at 0. A weight whose gradients were all exactly 0 so far (a dead
    ReLU unit) has v = 0, where sqrt's derivative is infinite; differentiating an unrolled update
    through it would give 0 * inf = NaN. The value is sqrt's own."""
    positive = x > 0
    return tf.where(positive, tf.sqrt(tf.where(positive, x, tf.ones_like(x))), tf.zeros_like(x))


class FunctionalAdam(tf.Module):
    """Adam for a list of variables, its state (moments, step count) in variables so that it is
    checkpointed with the model, and its update the pure function `adam_update`, so a step taken
    on copies (an unroll) starts from the optimizer's true state and can be adopted
    (`assign_state`) or discarded.

    Example:
      >>> adam = FunctionalAdam(model.trainable_variables, learning_rate=1e-3)
      >>> adam.apply(grads, model.trainable_variables)              # an ordinary step
      >>> params, m, v, t = adam.update(params, grads, *adam.state())  # a step on copies
    """

    def __init__(self, variables, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-7, name=None):
        super().__init__(name=name or "functional_adam")
        self.hyper = dict(
            learning_rate=checks.check_positive_number(learning_rate, "learning_rate"),
            beta_1=_unit_interval(beta_1, "beta_1"),
            beta_2=_unit_interval(beta_2, "beta_2"),
            epsilon=checks.check_positive_number(epsilon, "epsilon"),
        )
        variables = list(variables)
        # Which variable each moment belongs to: `apply` refuses any other list (the same
        # shapes in another order would silently swap the moments). Python ids and labels, not
        # the variables themselves, so that the checkpoint holds only the optimizer's state.
        self._variable_ids = tuple(id(v) for v in variables)
        self._variable_labels = tuple(_label(v) for v in variables)
        self.m = [tf.Variable(tf.zeros(v.shape), trainable=False) for v in variables]
        self.v = [tf.Variable(tf.zeros(v.shape), trainable=False) for v in variables]
        self.t = tf.Variable(0.0, trainable=False)

    def state(self):
        """``(m, v, t)``: copies of the moments and the step count."""
        return (
            [tf.identity(a) for a in self.m],
            [tf.identity(a) for a in self.v],
            tf.identity(self.t),
        )

    def update(self, params, grads, m, v, t):
        """`adam_update` with this optimizer's hyperparameters; changes no variable."""
        return adam_update(params, grads, m, v, t, **self.hyper)

    def assign_state(self, m, v, t):
        """Sets the moments and step count (values only: no gradient flows into the state)."""
        for target, value in zip([*self.m, *self.v], [*m, *v], strict=True):
            target.assign(tf.stop_gradient(value))
        self.t.assign(tf.stop_gradient(t))

    def apply(self, grads, variables):
        """One step on `variables`, the very variables the optimizer was built for, in that
        order (anything else is refused: its moments would belong to other variables).

        A variable whose gradient is None is skipped, as Keras' optimizers skip it: its value
        and moments stay as they are, while the step count (shared, as Keras' ``iterations``)
        advances.

        Raises:
          ValueError: `variables` are not the built ones in their order, `grads` has not one
            entry per variable, or every gradient is None.
        """
        variables, grads = list(variables), list(grads)
        self._check_variables(variables)
        if len(grads) != len(variables):
            raise ValueError(
                checks.invalid(
                    "grads",
                    f"one gradient (or None) per variable ({len(variables)})",
                    f"<{len(grads)} gradients>",
                )
            )
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            raise ValueError(
                checks.invalid("grads", "a gradient for at least one variable", "<all None>")
            )
        m, v, t = self.state()
        params, m, v, t = self.update(
            [tf.convert_to_tensor(variables[i]) for i in present],
            [grads[i] for i in present],
            [m[i] for i in present],
            [v[i] for i in present],
            t,
        )
        for i, param, first, second in zip(present, params, m, v, strict=True):
            variables[i].assign(param)
            self.m[i].assign(first)
            self.v[i].assign(second)
        self.t.assign(t)

    def _check_variables(self, variables):
        """A ValueError naming `variables` unless they are the built ones, in their order."""
        if tuple(id(v) for v in variables) == self._variable_ids:
            return
        built = list(self._variable_labels)
        received = [_label(v) for v in variables]
        if len(received) == len(built):
            # The first position that differs, so a long list's message stays readable.
            i = next(i for i, v in enumerate(variables) if id(v) != self._variable_ids[i])
            built = f"position {i}: {built[i]}"
            received = f"<position {i}: {received[i]}, another variable>"
        else:
            received = f"<{len(received)} variables: {received}>"
        raise ValueError(
            checks.invalid(
                "variables",
                f"the variables this optimizer was built for, in their order ({built})",
                received,
            )
        )


def _label(variable):
    """A variable's name (a Keras variable's path) and shape, for messages."""
    name = getattr(variable, "path", None) or variable.name
    return f"{name!r} of shape {tuple(variable.shape)}"


def _unit_interval(value, arg):
    """A float in [0, 1) (an exponential decay rate)."""
    value = checks.check_finite_number(value, arg)
    if not 0.0 <= value < 1.0:
        raise ValueError(checks.invalid(arg, "a float in [0, 1)", value))
    return value
