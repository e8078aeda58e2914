"""What a saved model or a user's own `fit` may reference from training: learning-rate
schedules (installed with the package, so a `.keras` file loads without this repository) and
the contrastive pre-training state (momentum key encoder, negative queue)."""

from tf_svmax.training.functional_adam import FunctionalAdam, adam_update
from tf_svmax.training.momentum import MomentumEncoder, NegativeQueue
from tf_svmax.training.schedules import ConstantThenPolynomialDecay

__all__ = [
    "ConstantThenPolynomialDecay",
    "FunctionalAdam",
    "MomentumEncoder",
    "NegativeQueue",
    "adam_update",
]
