"""The retrieval trainer's ranking losses, one record each: everything the trainer knows about a
loss (its `tf_svmax.losses` class, the papers' P x K, SVMax lambda and margin, the batch it needs,
whether SVMax Table 1 has it), read by the config's flags and checks
(`trainers.retrieval.config`), the model (`trainers.retrieval.model`) and the Table 1 grid
(`trainers.reproduce_table1`). Adding a loss to the trainer is one `RankingLoss` here plus its
library code.

The records name their class instead of holding it, so that reading them (flags, help, checks)
imports no Keras. What the class declares of itself (the only K it accepts, whether the
cross-batch memory applies) is not restated here: the records read it from the library's
source (`tf_svmax.losses._declared`, through `trainers.harness.lazy.library_declared`).
"""

import dataclasses

from trainers.harness.lazy import library_declared  # the losses' declared capabilities, no Keras


@dataclasses.dataclass(frozen=True)
class RankingLoss:
    """One --loss value of the retrieval trainer.

    Attributes:
      name: the --loss value.
      label: its name in the papers, for help text (several losses may share one).
      constructor: the `tf_svmax.losses` class that computes it.
      batch_p, batch_k: the papers' P x K (classes per batch, images per class).
      svmax_lambda: the papers' SVMax weight with this loss.
      margin: the papers' margin (the --margin default), or None for a loss without one.
      margin_argument: the constructor's argument that --margin sets (None: no margin).
      arguments: the constructor's other arguments, fixed: ``(name, value)`` pairs.
      pairs_classes: the loss pairs the batch's classes two by two (P must be even).
      on_proxies: the loss scores the embeddings against one learnable proxy per training class
        (a `CosineProxies` head) instead of against each other.
      in_table1: the loss is one of SVMax Table 1's (`trainers.reproduce_table1`).
      table1_svmax_lambdas: Table 1's SVMax rows for this loss when the paper gives it more
        than one lambda (the triplet losses: 1 and 0.1); empty: one SVMax row at the loss's
        lambda.
      help: what --loss's help says of it (empty: nothing).
      margin_help: what its margin is, where that needs saying (empty: nothing).

    Properties, read from the declarations of the `constructor` class (`Loss`' capabilities):
      required_k: the only K the loss accepts (it pairs the rows of each class as its original
        does), or None for any K >= 2: the class' ``class_block_rows``.
      cross_batch_memory: the loss mines anchors against a separate reference set, so
        --xbm_size (`losses.CrossBatchMemory`) applies to it: the class'
        ``accepts_reference_rows``.
    """

    name: str
    label: str
    constructor: str
    batch_p: int
    batch_k: int
    svmax_lambda: float
    margin: float | None = None
    margin_argument: str | None = None
    arguments: tuple[tuple[str, object], ...] = ()
    pairs_classes: bool = False
    on_proxies: bool = False
    in_table1: bool = False
    table1_svmax_lambdas: tuple[float, ...] = ()
    help: str = ""
    margin_help: str = ""

    def __post_init__(self):
        if (self.margin is None) != (self.margin_argument is None):
            raise ValueError(
                f"RankingLoss {self.name!r}: margin and margin_argument are both set or both "
                f"None; received margin={self.margin!r}, margin_argument="
                f"{self.margin_argument!r}."
            )

    @property
    def required_k(self):
        return library_declared.declared(self.constructor, "class_block_rows")

    @property
    def cross_batch_memory(self):
        return library_declared.declared(self.constructor, "accepts_reference_rows")


PROXY_ANCHOR_ALPHA = 32.0

# The SVMax paper's settings (Sec. 4.1; b = 144), unless a comment says where they come from.
RANKING_LOSSES = (
    RankingLoss(
        "contrastive",
        label="contrastive",
        constructor="PKContrastiveLoss",
        batch_p=36,
        batch_k=4,
        svmax_lambda=1.0,
        margin=1.0,
        margin_argument="margin",
        pairs_classes=True,
        in_table1=True,
    ),
    RankingLoss(
        "triplet_hard",
        label="triplet",
        constructor="BatchHardTripletLoss",
        batch_p=24,
        batch_k=6,
        svmax_lambda=0.1,
        margin=0.2,
        margin_argument="margin",
        in_table1=True,
        table1_svmax_lambdas=(1.0, 0.1),
    ),
    RankingLoss(
        "triplet_semihard",
        label="triplet",
        constructor="TripletSemiHardLoss",
        batch_p=24,
        batch_k=6,
        svmax_lambda=0.1,
        margin=0.2,
        margin_argument="margin",
        in_table1=True,
        table1_svmax_lambdas=(1.0, 0.1),
    ),
    RankingLoss(
        "npair",
        label="N-pair",
        constructor="PKNpairLoss",
        batch_p=72,
        batch_k=2,
        svmax_lambda=1.0,
        in_table1=True,
    ),
    RankingLoss(
        "angular",
        label="angular",
        constructor="PKAngularLoss",
        batch_p=72,
        batch_k=2,
        svmax_lambda=2.0,
        in_table1=True,
    ),
    RankingLoss(
        "lifted",
        label="lifted",
        constructor="LiftedStructLoss",
        batch_p=24,
        batch_k=6,
        svmax_lambda=1.0,
        margin=1.0,
        margin_argument="margin",
        in_table1=True,
    ),
    # Not in the SVMax paper: the all-pairs contrastive loss of the XBM paper (cosine,
    # positives 1 - s, negatives past its margin 0.5), which pairs with --xbm_size; b = 144 and
    # the contrastive loss's lambda.
    RankingLoss(
        "contrastive_pairs",
        label="contrastive_pairs",
        constructor="AllPairsContrastiveLoss",
        batch_p=24,
        batch_k=6,
        svmax_lambda=1.0,
        margin=0.5,
        margin_argument="neg_margin",
        margin_help="the negatives' cosine margin, as in the XBM paper",
    ),
    # Dissertation Table 3.3 (ResNet50): b = 256 (the Proxy-Anchor original samples batches at
    # random; any P x K batch serves the same loss), and Sec. 3.4.1's "a single lambda = 1e-4".
    # Its margin is its delta; its scale alpha stays at the original's 32.
    RankingLoss(
        "proxy_anchor",
        label="Proxy-Anchor",
        constructor="ProxyAnchorLoss",
        batch_p=64,
        batch_k=4,
        svmax_lambda=1e-4,
        margin=0.1,
        margin_argument="delta",
        arguments=(("alpha", PROXY_ANCHOR_ALPHA),),
        on_proxies=True,
        help="proxy_anchor adds one learnable proxy per training class (alpha 32); it trains "
        "with this trainer's SGD schedule, not the Proxy-Anchor original's AdamW recipe.",
        margin_help="its delta",
    ),
)

RANKING = {loss.name: loss for loss in RANKING_LOSSES}
if len(RANKING) != len(RANKING_LOSSES):
    raise ValueError(f"RANKING_LOSSES names a loss twice: {[x.name for x in RANKING_LOSSES]}.")


def per_loss(field, number=str):
    """`RankingLoss.field` of every loss as help text: the values in order, each with the labels
    of the losses that have it (``"36 contrastive; 24 triplet, lifted"``), `number` writing the
    value; losses whose value is None are left out."""
    groups = {}
    for loss in RANKING_LOSSES:
        value = getattr(loss, field)
        if value is not None and loss.label not in groups.setdefault(value, []):
            groups[value].append(loss.label)
    return "; ".join(f"{number(value)} {', '.join(labels)}" for value, labels in groups.items())


def number(value):
    """A float as help text: ``1``, ``0.2``, ``1e-4``."""
    if 0 < abs(value) < 1e-3:  # '%g' writes 1e-4 as 0.0001, 2.5e-5 as 2.5e-05
        mantissa, exponent = f"{value:e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    return f"{value:g}"
