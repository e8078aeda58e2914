"""Keras 3 losses: SVMax, OLE and the `RegularizedLoss` combinator."""

from tf_svmax.losses.composite import FunctionLoss, RegularizedLoss
from tf_svmax.losses.spectral import OLELoss, SVMaxLoss

__all__ = ["FunctionLoss", "OLELoss", "RegularizedLoss", "SVMaxLoss"]
