"""Keras 3 losses: SVMax, OLE, `RegularizedLoss`, and drop-in replacements for the
tensorflow-addons metric-learning losses (same names, signatures, values and gradients)."""

from tf_svmax.losses import _registry
from tf_svmax.losses.composite import FunctionLoss, RegularizedLoss
from tf_svmax.losses.contrastive import ContrastiveLoss, contrastive_loss
from tf_svmax.losses.lifted import LiftedStructLoss, lifted_struct_loss
from tf_svmax.losses.npairs import (
    NpairsLoss,
    NpairsMultilabelLoss,
    npairs_loss,
    npairs_multilabel_loss,
)
from tf_svmax.losses.spectral import OLELoss, SVMaxLoss
from tf_svmax.losses.triplet import (
    TripletHardLoss,
    TripletSemiHardLoss,
    triplet_hard_loss,
    triplet_semihard_loss,
)

# Losses constructible without arguments, hence nameable by a string in `compile`.
_CLASSES = (
    ContrastiveLoss,
    LiftedStructLoss,
    NpairsLoss,
    NpairsMultilabelLoss,
    OLELoss,
    SVMaxLoss,
    TripletHardLoss,
    TripletSemiHardLoss,
)
_registry.install(_CLASSES)


def get(identifier):
    """A loss from ``"tf_svmax>ClassName"`` (default arguments) or any Keras loss identifier."""
    return _registry.get(identifier, _CLASSES)


__all__ = [
    "get",
    "ContrastiveLoss",
    "FunctionLoss",
    "LiftedStructLoss",
    "NpairsLoss",
    "NpairsMultilabelLoss",
    "OLELoss",
    "RegularizedLoss",
    "SVMaxLoss",
    "TripletHardLoss",
    "TripletSemiHardLoss",
    "contrastive_loss",
    "lifted_struct_loss",
    "npairs_loss",
    "npairs_multilabel_loss",
    "triplet_hard_loss",
    "triplet_semihard_loss",
]
