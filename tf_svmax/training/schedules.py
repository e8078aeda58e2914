"""Learning-rate schedules of the papers' training protocols (`keras.ops`: every backend)."""

import keras
from keras import ops

from tf_svmax import checks

# SVMax paper Sec. 4.1: the rate decays to 1e-7 at the last step.
END_LEARNING_RATE = 1e-7


@keras.saving.register_keras_serializable(package="tf_svmax")
class ConstantThenPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """`learning_rate` for the first half of `total_steps`, then linear (power-1 polynomial)
    decay to `end_learning_rate` at `total_steps` (SVMax paper Sec. 4.1).

        lr(t) = lr                                          t <= K/2
        lr(t) = end + (lr - end) * (1 - (t - K/2) / (K - K/2))   K/2 < t <= K, then end

    Args:
      learning_rate: The initial rate (> 0).
      total_steps: K, the number of training steps (>= 1).
      end_learning_rate: The rate at and after step K (>= 0).
    """

    def __init__(self, learning_rate, total_steps, end_learning_rate=END_LEARNING_RATE):
        self.learning_rate = checks.check_non_negative_number(learning_rate, "learning_rate")
        if self.learning_rate == 0:
            raise ValueError(checks.invalid("learning_rate", "a float > 0", learning_rate))
        self.total_steps = checks.check_positive_int(total_steps, "total_steps")
        self.end_learning_rate = checks.check_non_negative_number(
            end_learning_rate, "end_learning_rate"
        )

    def __call__(self, step):
        # The optimizer's int64 iteration count, as float32 for the rate's arithmetic.
        step = ops.cast(step, "float32")
        half = self.total_steps // 2
        # Progress through the decaying half, clipped to [0, 1]: constant before, end after.
        progress = ops.clip((step - half) / max(self.total_steps - half, 1), 0.0, 1.0)
        decayed = (self.learning_rate - self.end_learning_rate) * (1.0 - progress)
        return decayed + self.end_learning_rate

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "total_steps": self.total_steps,
            "end_learning_rate": self.end_learning_rate,
        }


# Models saved before the schedule moved into the package name it by its old registration;
# they keep loading.
keras.saving.get_custom_objects()["tf_svmax_trainers>ConstantThenPolynomialDecay"] = (
    ConstantThenPolynomialDecay
)
