"""Training pieces: learning-rate schedules (installed with the package, so a `.keras` file
loads without this repository), the contrastive pre-training model `ContrastiveModel` and its
state (momentum key encoder, negative queue), and Adam as a pure function for unrolled updates."""

# Not backend-neutral yet: on JAX/PyTorch a one-sentence refusal instead of a failure in fit.
from tf_svmax import _backend

_backend.require_tensorflow_backend("tf_svmax.training")

from tf_svmax.training.contrastive_model import ContrastiveModel
from tf_svmax.training.functional_adam import FunctionalAdam, adam_update
from tf_svmax.training.momentum import MomentumEncoder, NegativeQueue
from tf_svmax.training.schedules import ConstantThenPolynomialDecay

__all__ = [
    "ConstantThenPolynomialDecay",
    "ContrastiveModel",
    "FunctionalAdam",
    "MomentumEncoder",
    "NegativeQueue",
    "adam_update",
]
