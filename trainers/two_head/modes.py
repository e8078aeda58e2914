"""The two-head trainer's modes, one record each (as the retrieval trainer's ranking losses,
`trainers.retrieval.ranking`): everything the trainer knows about a --mode (the paper's weight
of its term, whether it trains the embedding head, the flags that belong to it, what it refuses,
and its term's constructor), read by the config's flags and checks (`trainers.two_head.config`)
and the losses (`trainers.two_head.model`). Adding a mode is one `Mode` in `RECORDS` plus its
library code.

The constructors import `tf_svmax.losses` when called, so that reading the records (flags,
help, checks) imports no Keras.
"""

import dataclasses
from collections.abc import Callable

PAPER_MARGIN, PAPER_CENTER_ALPHA = 0.2, 0.5  # semi-hard margin; center loss update rate


@dataclasses.dataclass(frozen=True)
class Term:
    """A mode's loss term: `loss` on the model's output `output` (``"embedding"`` or
    ``"features"``) at the output's weight `weight`; `state` (name -> trackable) is checkpointed
    beside the model."""

    output: str
    loss: object
    weight: float = 1.0
    state: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Mode:
    """One --mode value of the two-head trainer.

    Attributes:
      name: the --mode value.
      paper_lambda: the weight of its term in the papers (the --regularizer_lambda default);
        None for a mode without a term (softmax alone).
      embedding_head: its term acts on the embedding head (a two-head model).
      flags: the mode's own flags and their papers' defaults, ``(flag, default)`` pairs (set
        with another mode they are refused: they would be ignored).
      needs_negatives: its term mines negatives: --batch_p >= 2.
      not_compiled: why XLA cannot compile it (--jit_compile refused), or "" when it can.
      term: ``(config, num_classes) -> Term or None``: its term, from the resolved config
        (None: nothing to add, e.g. a weight of 0).
    """

    name: str
    paper_lambda: float | None
    embedding_head: bool = False
    flags: tuple[tuple[str, float], ...] = ()
    needs_negatives: bool = False
    not_compiled: str = ""
    term: Callable[[object, int], Term | None] = lambda config, num_classes: None


def _losses():
    from tf_svmax import losses  # when a run builds its losses: the flags import no Keras

    return losses


def _center(config, num_classes):
    center = _losses().CenterLoss(
        num_classes,
        config.embedding_dim,
        lambda_=config.regularizer_lambda,
        alpha=config.center_alpha,
        seed=config.seed,
    )
    # TensorFlow: the loss' own variable, checkpointed; elsewhere a layer of the model.
    state = {"center_loss": center.centers} if center.centers_layer is None else {}
    return Term("embedding", center, state=state)


def _triplet(config, num_classes):
    """The squared Euclidean distance (Sec. 5.3.2), as the TF1 contrib losses the original
    used; batch-hard with the softplus (soft) margin, semi-hard with margin m. The weight is the
    output's (the center and OLÉ losses carry their λ themselves)."""
    del num_classes
    if config.regularizer_lambda <= 0:
        return None
    if config.mode == "semi_hard":
        triplet = _losses().TripletSemiHardLoss(margin=config.margin, distance_metric="squared-L2")
    else:
        triplet = _losses().TripletHardLoss(soft=True, distance_metric="squared-L2")
    return Term("embedding", triplet, weight=config.regularizer_lambda)


def _ole(config, num_classes):
    del num_classes
    return Term("features", _losses().OLELoss(lambda_=config.regularizer_lambda, delta=1.0))


# The weight of each mode's term: dissertation Sec. 5.4.1; OLÉ paper Fig. 4 / Table 2: 0.25.
# The triplet modes' kind: a term on the embedding head that mines negatives.
TRIPLET = {"embedding_head": True, "needs_negatives": True, "term": _triplet}
RECORDS = {
    m.name: m
    for m in (
        Mode("softmax", None),
        Mode("center", 0.003, True, (("center_alpha", PAPER_CENTER_ALPHA),), term=_center),
        Mode("semi_hard", 1.0, flags=(("margin", PAPER_MARGIN),), **TRIPLET),
        Mode("hard", 1.0, **TRIPLET),
        Mode(
            "ole",
            0.25,
            not_compiled="the number of classes in a batch decides the shapes of its SVDs",
            term=_ole,
        ),
    )
}
