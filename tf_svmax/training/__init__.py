"""What a saved model or a user's own `fit` may reference from training: learning-rate
schedules (installed with the package, so a `.keras` file loads without this repository)."""

from tf_svmax.training.schedules import ConstantThenPolynomialDecay

__all__ = ["ConstantThenPolynomialDecay"]
