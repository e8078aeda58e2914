"""A Keras model for MoCo-style contrastive pre-training with several query views per image
(LORAC seed `003`, Algorithm 1; MoCo-M; MoCo, He et al. 2020), trained by ``fit``.

    model = ContrastiveModel(
        encoder,                                   # images -> [b, C] embeddings
        views=4,                                   # M: M - 1 queries and one key per image
        loss_fn=losses.LORACLoss(beta=math.inf),   # MoCo-M
        prior_loss_fn=losses.LORACLoss(beta=2.0),  # LORAC, from step `prior_start` on
        prior_start=500,
        key_momentum=0.99,
        queue_size=4096,
    )
    model.compile(keras.optimizers.SGD(0.03, momentum=0.9))
    model.fit(view_batches, steps_per_epoch=1000)  # batches of [N, M, H, W, C] views
"""

import keras
import tensorflow as tf

from tf_svmax import checks
from tf_svmax.ops.spectral import batched_nuclear_norm
from tf_svmax.training.momentum import MomentumEncoder, NegativeQueue

# What `train_step` returns (and the trackers' names), in this order.
METRIC_NAMES = ("loss", "prior_active", "nuclear_norm", "positive_similarity")


class ContrastiveModel(keras.Model):
    """The query encoder (trained by the optimizer given to `compile`), its momentum key encoder
    and the negative queue, with the multi-query contrastive train step.

    Each batch is `[N, M, H, W, C]`: M augmented views of N images. The first M - 1 views go
    through the (trainable) encoder as queries, the last through the key encoder
    (`MomentumEncoder`, in training mode: the key batch is normalised by its own statistics, as
    in MoCo); the negatives are the `NegativeQueue`'s keys. The loss is
    ``loss_fn(None, {"queries": [N, M-1, C], "positive_keys": [N, C], "negative_keys": [K, C]})``
    (`tf_svmax.losses.LORACLoss`'s input), or ``prior_loss_fn``'s once the optimizer has taken
    `prior_start` steps. After the optimizer's step the key encoder moves one EMA step towards the
    encoder and the batch's keys are enqueued.

    `train_step` reports ``loss`` (NaN where a gradient is non-finite, so that a finite loss
    never hides non-finite weights; under a `keras.optimizers.LossScaleOptimizer`, which skips
    such steps, the loss itself), ``prior_active`` (1 on the steps trained with
    `prior_loss_fn`), ``nuclear_norm`` (the mean ``||Q_i||_*`` of each image's M x C stacked
    queries and key) and ``positive_similarity`` (the mean query-key cosine).

    Mixed precision (``keras.mixed_precision.set_global_policy("mixed_float16")`` or
    ``"mixed_bfloat16"`` before building the encoder): the loss is scaled by the optimizer as
    in Keras' own train step (`compile` wraps the optimizer in a `LossScaleOptimizer` under
    float16), and the nuclear norm's SVD runs in float32.

    The key encoder and the queue are training state: checkpoint them with the model
    (``tf.train.Checkpoint(model=..., key_encoder=model.key_encoder, queue=model.queue)``).

    Args:
      encoder: The query encoder, a built `keras.Model` from images to `[b, C]` embeddings
        (L2-normalised, as MoCo's; LORAC's loss normalises again).
      views: M >= 2, the views per image in every batch (M - 1 queries and one key).
      loss_fn: The loss, called as ``loss_fn(None, y_pred)``; a scalar.
      prior_loss_fn: The loss from step `prior_start` on (LORAC's prior switched on), or None:
        `loss_fn` throughout.
      prior_start: The optimizer step from which `prior_loss_fn` is used (an int >= 0; only
        with `prior_loss_fn`).
      key_momentum: m of the key encoder's EMA, in [0, 1] (MoCo: 0.999).
      queue_size: K, the number of negative keys (>= the batch size N: each step enqueues N).
      seed: Seed of the queue's initial random keys (an int >= 0).
      **kwargs: `keras.Model`'s (``name``, ...).
    """

    def __init__(
        self,
        encoder,
        *,
        views,
        loss_fn,
        prior_loss_fn=None,
        prior_start=0,
        key_momentum=0.999,
        queue_size=65536,
        seed=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.encoder = _check_encoder(encoder)
        self.views = checks.check_positive_int(views, "views")
        if self.views < 2:
            raise ValueError(checks.invalid("views", "an int >= 2 (a query and the key)", views))
        for arg, fn in (("loss_fn", loss_fn), ("prior_loss_fn", prior_loss_fn)):
            if not callable(fn) and not (arg == "prior_loss_fn" and fn is None):
                optional = " or None" if arg == "prior_loss_fn" else ""
                raise ValueError(
                    checks.invalid(arg, f"a callable loss(y_true, y_pred){optional}", fn)
                )
        self.loss_fn, self.prior_loss_fn = loss_fn, prior_loss_fn
        self.prior_start = checks.check_non_negative_int(prior_start, "prior_start")
        if prior_loss_fn is None and self.prior_start:
            raise ValueError(
                checks.invalid("prior_start", "0 when `prior_loss_fn` is None", prior_start)
            )
        momentum = checks.check_fraction(key_momentum, "key_momentum")
        self.key_encoder = MomentumEncoder(encoder, momentum=momentum)
        self.queue = NegativeQueue(
            checks.check_positive_int(queue_size, "queue_size"),
            int(_output_shape(encoder)[-1]),
            seed=checks.check_non_negative_int(seed, "seed"),
        )
        self.trackers = [keras.metrics.Mean(name=name) for name in METRIC_NAMES]

    @property
    def metrics(self):
        return self.trackers

    def call(self, images, training=False):
        return self.encoder(images, training=training)

    def train_step(self, batch):
        views = tf.convert_to_tensor(batch)  # [N, M, H, W, C]
        if views.shape.rank is not None and (
            views.shape.rank < 3 or views.shape[1] not in (None, self.views)
        ):
            raise ValueError(
                checks.invalid(
                    "batch",
                    f"a [N, {self.views}, ...] tensor of {self.views} views per image",
                    f"<tensor of shape {views.shape}>",
                )
            )
        shape = tf.shape(views)
        n, image_shape = shape[0], shape[2:]
        queries_in = tf.reshape(views[:, :-1], tf.concat([[-1], image_shape], 0))
        # The key batch's own BN statistics (MoCo's key encoder runs in training mode).
        keys = self.key_encoder(views[:, -1], training=True)
        negatives = self.queue(None)
        active = self.optimizer.iterations >= self.prior_start
        with tf.GradientTape() as tape:
            queries = tf.reshape(self.encoder(queries_in, training=True), [n, self.views - 1, -1])
            y_pred = {"queries": queries, "positive_keys": keys, "negative_keys": negatives}
            if self.prior_loss_fn is None:
                loss = self.loss_fn(None, y_pred)
            else:
                loss = tf.cond(
                    active,
                    lambda: self.prior_loss_fn(None, y_pred),
                    lambda: self.loss_fn(None, y_pred),
                )
            # As Keras' own train step: the optimizer's loss scale (a LossScaleOptimizer under
            # "mixed_float16", which `compile` wraps the optimizer in, or `loss_scale_factor`);
            # its `apply` divides the gradients by it again. Without it float16 gradients would
            # be 2**15 times too small.
            scaled_loss = self.optimizer.scale_loss(loss)
        variables = self.encoder.trainable_variables
        grads = tape.gradient(scaled_loss, variables)
        self.optimizer.apply(grads, variables)
        self.key_encoder.update(self.encoder)
        self.queue.enqueue(keys)
        if not isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            # A LossScaleOptimizer skips the steps whose (scaled) gradients are not finite and
            # lowers its scale: no non-finite weight can hide behind a finite loss there.
            loss = tf.where(tf.math.is_finite(tf.linalg.global_norm(grads)), loss, float("nan"))
        stacked = tf.concat([queries, keys[:, tf.newaxis]], axis=1)
        values = (
            loss,
            tf.cast(active, tf.float32) if self.prior_loss_fn is not None else 0.0,
            tf.reduce_mean(batched_nuclear_norm(tf.stop_gradient(stacked))),
            tf.reduce_mean(tf.einsum("nvc,nc->nv", queries, keys)),
        )
        for tracker, value in zip(self.trackers, values, strict=True):
            tracker.update_state(value)
        return {t.name: t.result() for t in self.trackers}


def _output_shape(encoder):
    """The shape of a `keras.Model`'s one symbolic output tensor, or None (not a Model, several
    outputs or a structure of them, or none: a subclassed or unbuilt model).

    A `keras.Sequential` built from an `Input` has no `output` until it is called (Keras 3.15):
    its output is then derived from its symbolic inputs by `compute_output_spec` (which adds
    no node to the model)."""
    if not isinstance(encoder, keras.Model):
        return None
    try:
        output = encoder.output
    except (AttributeError, ValueError):  # never called: no inbound node
        try:
            inputs = encoder.inputs
            output = encoder.compute_output_spec(inputs[0] if len(inputs) == 1 else inputs)
        except (AttributeError, ValueError, TypeError):  # a subclassed or unbuilt model
            return None
    return output.shape if isinstance(output, keras.KerasTensor) else None


def _check_encoder(encoder):
    """`encoder`, raising ValueError unless it is a built `keras.Model` with one `[b, C]`
    output."""
    shape = _output_shape(encoder)
    if shape is None or len(shape) != 2 or shape[-1] is None:
        raise ValueError(
            checks.invalid(
                "encoder", "a built keras.Model with one [batch, C] output (C known)", encoder
            )
        )
    return encoder
