"""Spread-out (global orthogonal) regularizer, Zhang et al. 2017, as the SVMax paper's baseline.

``L = M1^2 + max(0, M2 - 1/d)`` with ``M1``, ``M2`` the first and second moments of the inner
products of anchor/negative pairs of L2-normalized descriptors. To apply it to any ranking
loss, the SVMax paper (seed `000`, Sec. 4.1) pairs "every anchor with a random negative sample
from the training mini-batch" (alpha = 1): here every row is an anchor and its negative is drawn
uniformly among the rows of other classes.
"""

import keras
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common, _state_layers
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.losses._registry import register


@register(helper=True)
def random_negatives(labels, uniform):
    """Index of a uniformly random other-class row for every row (-1 where there is none).

    Args:
      labels: `[B]` labels.
      uniform: `[B, B]` uniform(0, 1) draws (the caller owns the randomness, e.g.
        ``keras.random.uniform([B, B], seed=seed_generator)``: the same draws give the same
        negatives on every backend).

    Returns:
      `[B]` int32 row indices.
    """
    labels = ops.reshape(ops.convert_to_tensor(labels), [-1])
    other_class = ops.not_equal(labels[:, None], labels[None, :])
    # The argmax of iid uniforms restricted to a set is uniform over that set. A column of -1
    # keeps argmax defined for an empty batch (an uneven last batch under tf.distribute).
    scores = ops.concatenate(
        [
            ops.where(other_class, ops.cast(uniform, "float32"), -1.0),
            -ops.ones_like(labels[:, None], "float32"),
        ],
        axis=1,
    )
    choice = ops.cast(ops.argmax(scores, axis=1), "int32")
    return ops.where(ops.any(other_class, axis=1), choice, -1)


@register
def spread_out_loss(labels, embeddings, negatives):
    """Global orthogonal regularization of anchor/negative pairs.

    Args:
      labels: `[B]` labels (used to validate the batch).
      embeddings: `[B, D]` L2-normalized embeddings.
      negatives: `[B]` int index of each row's negative, -1 for rows without one (see
        `random_negatives`).

    Returns:
      A scalar: ``M1^2 + max(0, M2 - 1/D)`` over the rows that have a negative; 0 if none does.
    """
    x, dtype = _common.embeddings_matrix(embeddings, arg="embeddings")
    _common.flat_labels(labels, x, "labels", "embeddings")  # checked only: one label per row
    negatives = ops.reshape(ops.convert_to_tensor(negatives), [-1])
    valid = negatives >= 0
    rows = _backend.take(x, ops.where(valid, negatives, ops.zeros_like(negatives)), axis=0)
    products = ops.sum(x * rows, axis=1)
    count = ops.sum(ops.cast(valid, x.dtype))
    zero = ops.zeros_like(products)
    first = _common.safe_mean_over(ops.sum(ops.where(valid, products, zero)), count)
    second = _common.safe_mean_over(ops.sum(ops.where(valid, products**2, zero)), count)
    dim = ops.cast(ops.shape(x)[1], x.dtype)
    # `ops.where`, not `ops.maximum`: Keras promotes float64 to float32 there on JAX/PyTorch.
    excess = second - 1.0 / dim
    penalty = ops.square(first) + ops.where(excess < 0.0, ops.zeros_like(excess), excess)
    return ops.cast(ops.where(count > 0, penalty, ops.zeros_like(penalty)), dtype)


@register
class SpreadOutDraws(_state_layers.StateLayer):
    """The seed state of `SpreadOutLoss`' negative sampling, as a layer of the model.

    An identity on its input. Its `keras.random.SeedGenerator` state is a non-trainable variable
    of the layer, so that in the model it is saved, checkpointed and restored with the model,
    and carried out of a JAX train step (which carries out only the model's variables: a seed
    state outside the model would give the same negatives at every step). Put it in the model
    after the embeddings: ``keras.Sequential([..., loss.draws])``.

    Args:
      seed: Seed of the negative sampling (None: nondeterministic).
    """

    def __init__(self, seed=None, **kwargs):
        super().__init__("the seed state is not trained", **kwargs)
        self.seed = seed
        self.generator = keras.random.SeedGenerator(seed)
        # Python-side, read by the loss: whether a model's forward pass has called the layer.
        self.in_model = False

    def call(self, inputs):
        self.in_model = True
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    # Keras saves a layer's own variables, not its seed generators' states: the state is saved
    # here too, so that a loaded model continues the same stream of negatives.
    def save_own_variables(self, store):
        store["0"] = self.generator.state

    def load_own_variables(self, store):
        _state_layers.weights_loaded(self)
        self.generator.state.assign(store["0"])

    def get_config(self):
        return {**super().get_config(), "seed": self.seed}


@register
class SpreadOutLoss(BatchPenaltyLoss):
    """``alpha * spread_out_loss`` with a fresh random negative per row at every call.

    Label-aware, so it composes with any ranking loss:
    ``RegularizedLoss(PKContrastiveLoss(), [SpreadOutLoss(alpha=1.0)])``.

    The draws come from ``loss.draws``, a `SpreadOutDraws` layer holding the seed state. Put it
    in the model after the embeddings (``keras.Sequential([..., loss.draws])``): the state is
    then saved and checkpointed with the model. On JAX this is required, and a call in a model
    that has not run the layer is refused: a JAX train step carries out only the model's
    variables, so a state outside the model would give the same negatives at every step. On
    TensorFlow and PyTorch the loss also works with the layer outside the model (its state then
    advances but is not saved with the model).

    Args:
      alpha: Weight (paper: 1).
      seed: Seed of the negative sampling (None: nondeterministic).
      draws: Optional `SpreadOutDraws` layer to draw from (e.g. the one of a model loaded from a
        ``.keras`` file: ``draws=model.get_layer(name)``); by default a new one with `seed`.
    """

    ranks_embeddings = False  # a regularizer on the embeddings
    # `get_config` records the draws layer's name, by which a loaded model's loss finds it.
    state_layer_arguments = {"draws": "draws_name"}

    def __init__(self, alpha=1.0, seed=None, draws=None, name="spread_out", **kwargs):
        alpha = checks.check_non_negative_number(alpha, "alpha")
        if draws is None:
            draws = SpreadOutDraws(seed)
        elif not isinstance(draws, SpreadOutDraws) or (seed is not None and seed != draws.seed):
            raise ValueError(
                checks.invalid("draws", f"a SpreadOutDraws layer (with seed {seed})", draws)
            )
        self.draws = draws
        # Its own `call` (the draws are state); `Loss` saves these two and the layer's name.
        fn_kwargs = dict(alpha=alpha, seed=draws.seed)
        super().__init__(fn_kwargs=fn_kwargs, name=name, **kwargs)

    def call(self, y_true, y_pred):
        if _backend.STATE_ONLY_IN_MODEL and not self.draws.in_model:
            raise ValueError(
                "SpreadOutLoss on Keras' JAX backend needs its draws layer in the model: "
                "keras.Sequential([..., loss.draws]) (for a loaded model, "
                "SpreadOutLoss(alpha, draws=model.get_layer(<its name>))). A JAX train step "
                "carries out only the model's variables, so a seed state outside the model "
                "would give the same negatives at every step. Or call spread_out_loss with "
                "negatives from random_negatives and your own draws."
            )
        labels = ops.reshape(ops.convert_to_tensor(y_true), [-1])
        size = ops.shape(labels)[0]
        uniform = keras.random.uniform((size, size), seed=self.draws.generator)
        negatives = random_negatives(labels, ops.cast(uniform, "float32"))
        return self.alpha * spread_out_loss(labels, y_pred, negatives)

    @property
    def state_layers(self):
        """The layers holding this loss' state, which belong in the model (after its outputs,
        e.g. ``keras.Sequential([..., *loss.state_layers])``): its `SpreadOutDraws` layer
        (which JAX needs in the model)."""
        return [self.draws]

    @classmethod
    def state_layer_from_config(cls, argument, name, config):
        seed = config.get("seed")
        restored = _state_layers.restored_layer(
            name, lambda layer: isinstance(layer, SpreadOutDraws) and layer.seed == seed
        )
        return restored or SpreadOutDraws(seed, name=name)  # not loading a model: a new layer
