"""The two-head model and its losses, from a resolved config."""

import keras

from tf_svmax import losses, models
from trainers.two_head.config import has_embedding_head


def build_model(config, split):
    """The backbone with its softmax head (``logits``, on the pooled features ``features``)
    and, for the two-head modes or with SVMax, the L2-normalised ``embedding`` head."""
    return models.build_two_head_model(
        config.backbone,
        input_shape=split["input_shape"],
        num_classes=split["num_classes"],
        embedding_dim=config.embedding_dim,
        embedding_head=has_embedding_head(config),
        weights=config.weights,
    )


def build_losses(config, num_classes):
    """``(losses, loss_weights, state)``: a loss per trained output of `build_model`, their
    weights, and the non-trainable state to checkpoint beside the model (the center loss's
    centers on TensorFlow; on JAX and PyTorch they are a layer of the model:
    `with_state_layers`)."""
    lam = config.regularizer_lambda
    out = {"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
    weights = {"logits": 1.0}
    state = {}
    embedding_terms, weight = [], 1.0
    if config.mode == "center":
        center = losses.CenterLoss(
            num_classes,
            config.embedding_dim,
            lambda_=lam,
            alpha=config.center_alpha,
            seed=config.seed,
        )
        embedding_terms.append(center)
        if center.centers_layer is None:  # TensorFlow: the loss' own variable, checkpointed
            state["center_loss"] = center.centers
    elif config.mode in ("semi_hard", "hard") and lam > 0:
        # The squared Euclidean distance (Sec. 5.3.2), as the TF1 contrib losses the original
        # used; batch-hard with the softplus (soft) margin, semi-hard with margin m.
        if config.mode == "semi_hard":
            triplet = losses.TripletSemiHardLoss(margin=config.margin, distance_metric="squared-L2")
        else:
            triplet = losses.TripletHardLoss(soft=True, distance_metric="squared-L2")
        embedding_terms.append(triplet)
        weight = lam  # the output's weight; the center and OLÉ losses carry their λ themselves
    elif config.mode == "ole":
        out["features"] = losses.OLELoss(lambda_=lam, delta=1.0)
        weights["features"] = 1.0
    if config.svmax_lambda > 0:
        # Scaled by 1 / weight: the output's weight multiplies every term on it.
        embedding_terms.append(losses.SVMaxLoss(lambda_=config.svmax_lambda / weight))
    if embedding_terms:
        first, *rest = embedding_terms
        out["embedding"] = losses.RegularizedLoss(first, rest) if rest else first
        weights["embedding"] = weight
    return out, weights, state


def with_state_layers(model, losses_by_output):
    """`model` with the state layers of its losses after their outputs (on JAX and PyTorch the
    center loss's `ClassCenters`, an identity holding the centers: in the model they are
    carried out of each JAX train step, checkpointed and restored with its weights); `model`
    itself when its losses have none (TensorFlow)."""
    outputs = dict(zip(model.output_names, model.outputs, strict=True))
    wrapped = False
    for name, loss in losses_by_output.items():
        terms = [loss, getattr(loss, "loss", None), *getattr(loss, "regularizers", ())]
        for term in terms:
            layer = getattr(term, "centers_layer", None)
            if layer is not None:
                outputs[name], wrapped = layer(outputs[name]), True
    if not wrapped:
        return model
    # Its outputs keep their keys (the losses' and the labels'), not the new layers' names.
    return keras.Model(model.input, outputs, name=model.name)
