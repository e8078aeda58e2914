"""The retrieval run's model, loss and optimizer, from a resolved config: the embedding model
with the head its loss needs (Proxy-Anchor's proxies, XML's histograms, the cross-batch memory),
the ranking loss composed with the regularizer, and SGD at the --lr_schedule rate (the
regularizers' and the schedules' records: `trainers.retrieval.options`)."""

import keras

from tf_svmax import losses, models
from trainers.retrieval.options import LR_SCHEDULES, REGULARIZERS
from trainers.retrieval.ranking import RANKING


def build_optimizer(config):
    """`(optimizer, schedule)` of a resolved config: SGD with --momentum at the --lr_schedule
    rate, and that rate as a function of the step (the trace's learning rate)."""
    rate = LR_SCHEDULES[config.lr_schedule].rate(config)
    schedule = rate if callable(rate) else lambda step: rate
    return keras.optimizers.SGD(rate, momentum=config.momentum), schedule


def head_output(config):
    """The output `build_training_model` adds beside ``"embedding"``: ``"xml"`` (XML's
    histograms appended to the embeddings), ``"proxies"`` (Proxy-Anchor's similarities) or None
    (the embedding model alone)."""
    if config.xml_lambda:
        return "xml"
    return "proxies" if RANKING[config.loss].on_proxies else None


def build_loss(config, memory=None, draws=None):
    """The ranking loss, composed with the regularizer through `RegularizedLoss`; with
    --xbm_size, the ranking loss in a `CrossBatchMemory` whose state is `memory` (the
    `CrossBatchMemoryBank` of `build_training_model`); with --regularizer=spread_out and
    `draws` (the `SpreadOutDraws` of `build_training_model`), its negatives drawn there.

    With a `head_output` a dict for the two outputs of `build_training_model`: the loss on the
    head (Proxy-Anchor on the proxy similarities, or XML around the ranking loss) and the
    regularizer (if any) on the embeddings alone.
    """
    regularizers = REGULARIZERS[config.regularizer].build(config, draws)
    head = head_output(config)
    if head is None:
        ranking = _ranking_loss(config)
        if config.xbm_size:
            ranking = losses.CrossBatchMemory(
                ranking, config.xbm_size, start_step=config.xbm_start_step, memory=memory
            )
        return losses.RegularizedLoss(ranking, regularizers) if regularizers else ranking
    if head == "xml":
        head_loss = losses.XMLLoss(
            _ranking_loss(config), config.xml_prototypes, lambda_=config.xml_lambda
        )
    else:
        head_loss = _ranking_loss(config)
    out = {head: head_loss}
    if regularizers:
        (out["embedding"],) = regularizers  # one regularizer per run
    return out


def _ranking_loss(config):
    """The --loss's `tf_svmax.losses` class (its `ranking.RankingLoss` record) with --margin."""
    loss = RANKING[config.loss]
    margin = {} if loss.margin_argument is None else {loss.margin_argument: config.margin}
    return getattr(losses, loss.constructor)(**dict(loss.arguments), **margin)


def spread_out_draws(config):
    """The `SpreadOutDraws` layer (the seed state of --regularizer=spread_out's negatives) that
    `build_training_model` puts in the model on JAX and PyTorch, where state that must be
    carried out of a train step and survive a restart lives in the model; None elsewhere (on
    TensorFlow the loss keeps it, as before)."""
    if config.regularizer != "spread_out" or keras.backend.backend() == "tensorflow":
        return None
    return losses.SpreadOutDraws(config.seed, name="spread_out_draws")


def build_training_model(config, embedding_model, num_classes, memory=None, draws=None):
    """The model `fit` trains: the embedding model itself; for a loss on proxies
    (``proxy_anchor``) the embedding model with a `CosineProxies` head (outputs
    ``{"embedding", "proxies"}``); with XML, ``{"embedding", "xml"}``, the latter the
    embeddings with the `PrototypeHistograms` of the backbone's last convolutional map
    appended; with --xbm_size, the embedding model followed by the cross-batch memory layer
    `memory` (an identity that holds the memory's state, checkpointed with the run); with
    `draws` (`spread_out_draws`), that identity layer after the embeddings."""
    if draws is not None:
        embedding_model = keras.Model(
            embedding_model.input, draws(embedding_model.output), name=embedding_model.name
        )
    if config.xbm_size:
        return keras.Model(
            embedding_model.input, memory(embedding_model.output), name="xbm_training_model"
        )
    if config.xml_lambda:
        histograms = models.PrototypeHistograms(config.xml_prototypes, name="xml_prototypes")(
            models.pooled_feature_map(embedding_model)
        )
        joined = keras.layers.Concatenate(name="xml")([embedding_model.output, histograms])
        return keras.Model(
            embedding_model.input,
            {"embedding": embedding_model.output, "xml": joined},
            name="xml_training_model",
        )
    if not RANKING[config.loss].on_proxies:
        return embedding_model
    embeddings = embedding_model.output
    similarities = models.CosineProxies(num_classes, name="proxies")(embeddings)
    return keras.Model(
        embedding_model.input,
        {"embedding": embeddings, "proxies": similarities},
        name="proxy_anchor_training_model",
    )
