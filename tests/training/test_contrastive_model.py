"""ContrastiveModel's train step against a NumPy reference of the same step: multi-query
InfoNCE (and LORAC's Laplace prior) on the encoder's queries, the key encoder's key and the
queue's negatives, a gradient by central differences, SGD, the EMA and the queue's FIFO."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_svmax import losses, training

N, M, SIDE, C, K = 3, 3, 2, 4, 8  # images, views, image side, embedding size, queue size
TAU, BETA, LR, MOMENTUM = 0.5, 2.0, 0.1, 0.9


def _encoder(seed=3):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((SIDE, SIDE, 1))
    x = keras.layers.Dense(C, use_bias=False)(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.UnitNormalization()(x))


def _model(encoder, **kwargs):
    settings = dict(
        views=M,
        loss_fn=losses.LORACLoss(temperature=TAU, beta=math.inf),
        key_momentum=MOMENTUM,
        queue_size=K,
        seed=1,
    )
    model = training.ContrastiveModel(encoder, **{**settings, **kwargs})
    model.compile(keras.optimizers.SGD(LR), jit_compile=False)
    return model


def _embed(w, images):
    z = images.reshape(len(images), -1) @ w
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def _reference_loss(w, key_w, negatives, views, beta=math.inf):
    """Eq. 12-13 in NumPy (float64): the mean over images of the mean over queries of
    -log softmax of the positive logit (plus log h, the Laplace prior) against the queue."""
    queries = np.stack([_embed(w, views[:, v]) for v in range(M - 1)], axis=1)  # [N, M-1, C]
    keys = _embed(key_w, views[:, -1])
    negatives = negatives / np.linalg.norm(negatives, axis=1, keepdims=True)
    total = 0.0
    for i in range(N):
        stacked = np.concatenate([queries[i], keys[i][None]], axis=0)
        log_h = -np.linalg.svd(stacked, compute_uv=False).sum() / (M * beta * TAU)
        for q in queries[i]:
            positive = q @ keys[i] / TAU + log_h
            logits = np.concatenate([[positive], negatives @ q / TAU])
            total += -(positive - np.log(np.exp(logits).sum())) / (M - 1)
    return total / N


def _numeric_gradient(fn, w, eps=1e-6):
    grad = np.zeros_like(w)
    for index in np.ndindex(w.shape):
        step = np.zeros_like(w)
        step[index] = eps
        grad[index] = (fn(w + step) - fn(w - step)) / (2 * eps)
    return grad


def _views(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, M, SIDE, SIDE, 1)).astype(np.float32)


def test_a_train_step_matches_the_reference_step():
    model = _model(_encoder())
    w = model.encoder.get_weights()[0].astype(np.float64)
    negatives = model.queue.keys.numpy().astype(np.float64)
    views = _views(0)
    x = views.astype(np.float64)
    expected_loss = _reference_loss(w, w, negatives, x)
    grad = _numeric_gradient(lambda v: _reference_loss(v, w, negatives, x), w)

    logs = model.train_step(tf.constant(views))

    new_w = w - LR * grad
    np.testing.assert_allclose(float(logs["loss"]), expected_loss, rtol=1e-5)
    np.testing.assert_allclose(model.encoder.get_weights()[0], new_w, rtol=1e-4, atol=1e-6)
    # The key encoder: one EMA step from the initial weights towards the updated ones.
    np.testing.assert_allclose(
        model.key_encoder.key_encoder.get_weights()[0],
        MOMENTUM * w + (1 - MOMENTUM) * new_w,
        rtol=1e-4,
        atol=1e-6,
    )
    # The queue: the batch's keys (from the key encoder before its update) over the oldest.
    keys = _embed(w, x[:, -1])
    np.testing.assert_allclose(model.queue.keys.numpy()[:N], keys, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(model.queue.keys.numpy()[N:], negatives[N:].astype(np.float32))
    queries = np.stack([_embed(w, x[:, v]) for v in range(M - 1)], axis=1)
    stacked = np.concatenate([queries, keys[:, None]], axis=1)
    np.testing.assert_allclose(
        float(logs["nuclear_norm"]),
        np.linalg.svd(stacked, compute_uv=False).sum(axis=1).mean(),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        float(logs["positive_similarity"]),
        np.einsum("nvc,nc->nv", queries, keys).mean(),
        rtol=1e-5,
    )
    assert float(logs["prior_active"]) == 0.0


def test_the_prior_loss_takes_over_at_prior_start():
    model = _model(
        _encoder(),
        prior_loss_fn=losses.LORACLoss(temperature=TAU, beta=BETA, prior="laplace"),
        prior_start=1,
    )
    first = model.train_step(tf.constant(_views(1)))
    assert float(first["prior_active"]) == 0.0
    # The second step's loss, from the state the first left (averaged with the first's by
    # the tracker), is the loss with the prior.
    first_loss = float(first["loss"])
    w = model.encoder.get_weights()[0].astype(np.float64)
    key_w = model.key_encoder.key_encoder.get_weights()[0].astype(np.float64)
    negatives = model.queue.keys.numpy().astype(np.float64)
    views = _views(2)
    with_prior = _reference_loss(w, key_w, negatives, views.astype(np.float64), beta=BETA)
    without = _reference_loss(w, key_w, negatives, views.astype(np.float64))
    second = model.train_step(tf.constant(views))
    np.testing.assert_allclose(float(second["loss"]), (first_loss + with_prior) / 2, rtol=1e-5)
    assert abs(with_prior - without) > 1e-3
    np.testing.assert_allclose(float(second["prior_active"]), 0.5)


@pytest.fixture
def restore_dtype_policy():
    policy = keras.mixed_precision.global_policy()
    yield
    keras.mixed_precision.set_global_policy(policy)


@pytest.mark.parametrize("policy, rtol", [("mixed_float16", 1e-2), ("mixed_bfloat16", 5e-2)])
def test_fit_under_mixed_precision_takes_the_reference_step(restore_dtype_policy, policy, rtol):
    # The Laplace prior from the first step: the nuclear norm's SVD in the loss and the logs.
    keras.mixed_precision.set_global_policy(policy)
    model = _model(_encoder(), loss_fn=losses.LORACLoss(temperature=TAU, beta=BETA))
    w = model.encoder.get_weights()[0].astype(np.float64)
    negatives = model.queue.keys.numpy().astype(np.float64)
    views = _views(4)
    x = views.astype(np.float64)
    expected_loss = _reference_loss(w, w, negatives, x, beta=BETA)
    grad = _numeric_gradient(lambda v: _reference_loss(v, w, negatives, x, beta=BETA), w)

    history = model.fit(tf.data.Dataset.from_tensors(views), epochs=1, verbose=0).history

    # The loss and the step within the half dtype's rounding of the embeddings (the float32
    # reference's SGD step; under float16 the loss scale must not shrink it by 2**15).
    np.testing.assert_allclose(history["loss"][0], expected_loss, rtol=rtol)
    step = model.encoder.get_weights()[0] - w
    np.testing.assert_allclose(step, -LR * grad, atol=rtol * np.abs(LR * grad).max())
    queries = np.stack([_embed(w, x[:, v]) for v in range(M - 1)], axis=1)
    stacked = np.concatenate([queries, _embed(w, x[:, -1])[:, None]], axis=1)
    want = np.linalg.svd(stacked, compute_uv=False).sum(axis=1).mean()
    np.testing.assert_allclose(history["nuclear_norm"][0], want, rtol=rtol)


def test_a_batch_with_another_view_count_is_refused():
    model = _model(_encoder())
    views = np.zeros((N, M + 1, SIDE, SIDE, 1), np.float32)
    with pytest.raises(ValueError, match="Invalid value for argument `batch`"):
        model.train_step(tf.constant(views))


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        (dict(views=1), "views"),
        (dict(views=2.5), "views"),
        (dict(loss_fn="lorac"), "loss_fn"),
        (dict(prior_loss_fn=3), "prior_loss_fn"),
        (dict(prior_start=-1), "prior_start"),
        (dict(prior_start=5), "prior_start"),  # no prior_loss_fn: the step would be unused
        (dict(key_momentum=1.5), "key_momentum"),
        (dict(key_momentum=-0.1), "key_momentum"),
        (dict(queue_size=0), "queue_size"),
        (dict(seed=-1), "seed"),
    ],
)
def test_invalid_arguments_are_refused_by_name(kwargs, arg):
    with pytest.raises(ValueError, match=f"Invalid value for argument `{arg}`.*Received: {arg}="):
        _model(_encoder(), **kwargs)


def test_an_encoder_without_one_embedding_output_is_refused():
    with pytest.raises(ValueError, match="Invalid value for argument `encoder`"):
        _model(keras.layers.Dense(4))
    inputs = keras.Input((SIDE, SIDE, 1))
    with pytest.raises(ValueError, match="Invalid value for argument `encoder`"):
        _model(keras.Model(inputs, keras.layers.Dense(C)(inputs)))  # [b, H, W, C] output


def test_a_sequential_encoder_is_accepted_and_trains_like_its_functional_twin():
    # keras.Sequential built from an Input has no `.output` until it is called (Keras 3.15).
    keras.utils.set_random_seed(3)
    sequential = keras.Sequential(
        [
            keras.Input((SIDE, SIDE, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(C, use_bias=False),
            keras.layers.UnitNormalization(),
        ]
    )
    model = _model(sequential)
    assert model.queue.keys.shape == (K, C)
    # The reference step of the functional encoder's test, on the Sequential's weights.
    w = sequential.get_weights()[0].astype(np.float64)
    negatives = model.queue.keys.numpy().astype(np.float64)
    x = _views(0).astype(np.float64)
    grad = _numeric_gradient(lambda v: _reference_loss(v, w, negatives, x), w)
    logs = model.train_step(tf.constant(_views(0)))
    np.testing.assert_allclose(float(logs["loss"]), _reference_loss(w, w, negatives, x), rtol=1e-5)
    np.testing.assert_allclose(sequential.get_weights()[0], w - LR * grad, rtol=1e-4, atol=1e-6)
    # Several outputs or an unbuilt Sequential stay refused.
    with pytest.raises(ValueError, match="Invalid value for argument `encoder`"):
        _model(keras.Sequential([keras.layers.Dense(C)]))
    inputs = keras.Input((SIDE, SIDE, 1))
    flat = keras.layers.Flatten()(inputs)
    with pytest.raises(ValueError, match="Invalid value for argument `encoder`"):
        _model(keras.Model(inputs, [keras.layers.Dense(C)(flat), keras.layers.Dense(C)(flat)]))
    with pytest.raises(ValueError, match="Invalid value for argument `encoder`"):
        _model(keras.Model(inputs, {"embeddings": keras.layers.Dense(C)(flat)}))
