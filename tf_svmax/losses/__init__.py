"""Keras 3 losses: SVMax, OLE, LORAC, XML, `RegularizedLoss`, and drop-in replacements for the
tensorflow-addons metric-learning losses (same names, signatures, values and gradients).

On Keras' JAX and PyTorch backends the package imports without TensorFlow, with every stateless
loss class and function on `keras.ops`: SVMax, OLE, `RegularizedLoss`, `FunctionLoss`, the
tensorflow-addons losses, batch-hard, all-pairs contrastive, Proxy-Anchor, the P x K pair losses,
the spread-out functions, LORAC and XML. `SpreadOutLoss` draws fresh negatives from the seed
state of its `SpreadOutDraws` layer, which on JAX must be in the model (a JAX train step carries
out only the model's variables). `XMLLoss` splits the batch by the labels' values into
halves of data-dependent sizes: on JAX it runs when called eagerly only (Keras traces every JAX
loss in `fit`), and says so when traced. `CrossBatchMemory` and its
`CrossBatchMemoryBank` run on every backend without XLA (eagerly, in a TensorFlow graph, in an
uncompiled JAX train step, on PyTorch; the bank layer opts the model out of XLA, and a jit trace
is refused by name, since the memory's filled rows are a data-dependent number). `CenterLoss`
runs on every backend; on JAX its `ClassCenters` layer must be in the model (a JAX train step
carries out only the model's variables).

String names (``"tf_svmax>TripletSemiHardLoss"`` in `compile`, `get`) work on every backend
for every loss class constructible with its defaults and every loss function
(`tf_svmax.losses._registry` says how). Every public name here is registered where it is
defined; adding a loss is its module, its import line below and its reference test
(docs/guide/adding-a-loss.md).
"""

from tf_svmax.losses import _registry
from tf_svmax.losses._base import BatchPenaltyLoss, LabelLoss, Loss, PerSampleLabelLoss
from tf_svmax.losses._common import LossPart
from tf_svmax.losses.batch_hard import BatchHardTripletLoss, batch_hard_triplet_loss
from tf_svmax.losses.center import CenterLoss, ClassCenters
from tf_svmax.losses.composite import FunctionLoss, RegularizedLoss
from tf_svmax.losses.contrastive import ContrastiveLoss, contrastive_loss
from tf_svmax.losses.lifted import LiftedStructLoss, lifted_struct_loss
from tf_svmax.losses.lorac import LORACLoss, lorac_loss
from tf_svmax.losses.npairs import (
    NpairsLoss,
    NpairsMultilabelLoss,
    npairs_loss,
    npairs_multilabel_loss,
)
from tf_svmax.losses.pair_contrastive import AllPairsContrastiveLoss, all_pairs_contrastive_loss
from tf_svmax.losses.pk_pairs import (
    PKAngularLoss,
    PKContrastiveLoss,
    PKNpairLoss,
    pk_angular_loss,
    pk_contrastive_loss,
    pk_contrastive_pairs,
    pk_npair_loss,
)
from tf_svmax.losses.proxy_anchor import ProxyAnchorLoss, proxy_anchor_loss
from tf_svmax.losses.spectral import OLELoss, SVMaxLoss, ole_loss, svmax_loss
from tf_svmax.losses.spread_out import (
    SpreadOutDraws,
    SpreadOutLoss,
    random_negatives,
    spread_out_loss,
)
from tf_svmax.losses.triplet import (
    TripletHardLoss,
    TripletSemiHardLoss,
    triplet_hard_loss,
    triplet_semihard_loss,
)
from tf_svmax.losses.xbm import CrossBatchMemory, CrossBatchMemoryBank
from tf_svmax.losses.xml import XMLLoss

# Every public name is registered where it is defined (`_registry.register`): the imports
# above fill the registry, from which the exports and the string names come.
__all__ = ["get", *_registry.public_names()]

_registry.install_registered()


def get(identifier):
    """A loss from ``"tf_svmax>ClassName"`` (an instance with default arguments; a loss whose
    constructor needs arguments is refused by name), ``"tf_svmax>function_name"`` (the function)
    or any Keras loss identifier."""
    return _registry.get(identifier)
