"""The two-head model and its losses, from a resolved config."""

import keras

from tf_svmax import losses, models
from trainers.two_head.config import has_embedding_head
from trainers.two_head.modes import RECORDS


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
    `with_state_layers`). The --mode's term is its record's (`trainers.two_head.modes`)."""
    out = {"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
    weights = {"logits": 1.0}
    embedding_terms, weight = [], 1.0
    term = RECORDS[config.mode].term(config, num_classes)  # the --mode's record
    state = dict(term.state) if term else {}
    if term and term.output == "embedding":
        embedding_terms.append(term.loss)
        weight = term.weight  # the output's weight
    elif term:
        out[term.output], weights[term.output] = term.loss, term.weight
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
