"""Training pieces: learning-rate schedules (installed with the package, so a `.keras` file
loads without this repository), the contrastive pre-training model `ContrastiveModel` and its
state (momentum key encoder, negative queue), and Adam as a pure function for unrolled updates.

The schedules run on every Keras backend (`keras.ops`). The others are TensorFlow by nature and
refuse by name on JAX and PyTorch, each in one sentence saying why (`REFUSALS`).
"""

from tf_svmax import _backend
from tf_svmax.training.schedules import ConstantThenPolynomialDecay

# Why each TensorFlow-only name is: the refusal's sentence on JAX and PyTorch.
_CONTRASTIVE_STEP = (
    "ContrastiveModel's train step takes its gradient with tf.GradientTape and moves this state "
    "in place after the optimizer's step, which Keras' functional JAX train step and its PyTorch "
    "step do not carry"
)
_UNROLLED_ADAM = (
    "the unrolled GAN's Adam keeps its state in a tf.Module and differentiates through the "
    "update inside TensorFlow's train step"
)
REFUSALS = {
    "ContrastiveModel": _CONTRASTIVE_STEP,
    "MomentumEncoder": _CONTRASTIVE_STEP,
    "NegativeQueue": _CONTRASTIVE_STEP,
    "FunctionalAdam": _UNROLLED_ADAM,
    "adam_update": _UNROLLED_ADAM,
}

if _backend.BACKEND == "tensorflow":
    from tf_svmax.training.contrastive_model import ContrastiveModel
    from tf_svmax.training.functional_adam import FunctionalAdam, adam_update
    from tf_svmax.training.momentum import MomentumEncoder, NegativeQueue

    __all__ = [
        "ConstantThenPolynomialDecay",
        "ContrastiveModel",
        "FunctionalAdam",
        "MomentumEncoder",
        "NegativeQueue",
        "adam_update",
    ]
else:
    __all__ = ["ConstantThenPolynomialDecay"]
    __getattr__ = _backend.refusing_getattr("tf_svmax.training", REFUSALS)
