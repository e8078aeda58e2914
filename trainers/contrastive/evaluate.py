"""The held-out evaluation of a contrastive encoder: linear probe and k-NN accuracy of the
pooled features, the nuclear norm of augmented views' embeddings, open-set retrieval."""

import math

import numpy as np
import tensorflow as tf

from tf_svmax import data, metrics

# Seed of the evaluation's augmented views: the same views for every run and method.
EVAL_VIEW_SEED = 2**20


def augmented_nuclear_norms(encoder, images, *, views, batch_size):
    """``||Q_hat||_*`` per image: the nuclear norm of the `[views, C]` embeddings of `views`
    augmented views of it (seed 003 Fig. 4c; the same views for every run)."""
    embeddings = [
        encoder.predict(
            data.random_view(images, tf.constant([EVAL_VIEW_SEED, v], tf.int64)).numpy(),
            batch_size=batch_size,
            verbose=0,
        )
        for v in range(views)
    ]
    stacked = np.stack(embeddings, axis=1).astype(np.float64)  # [n, views, C]
    return np.linalg.svd(stacked, compute_uv=False).sum(axis=1)


def evaluate(config, model, features, split):
    """The held-out evaluation, ``{"metrics": ..., "info": ...}``; `features` is the encoder's
    `feature_extractor`."""
    from sklearn.preprocessing import normalize

    def predict(x):
        return features.predict(x, batch_size=config.eval_batch_size, verbose=0)

    (train_x, train_y), (test_x, test_y) = split["pretrain"], split["heldout"]
    train_f, test_f = predict(train_x), predict(test_x)
    norms = augmented_nuclear_norms(
        model.encoder, test_x, views=config.test_views, batch_size=config.eval_batch_size
    )
    open_x, open_y = split["open_set"]
    # Rows of exact zeros (a dead ReLU map) stay zero rather than dividing by 0.
    open_f = normalize(predict(open_x).astype(np.float64))
    retrieval = metrics.split_retrieval_results(
        metrics.evaluate_retrieval(open_f, open_y, ks=(1,), compute_nmi=False)
    )
    return {
        "metrics": {
            "linear_probe_accuracy": metrics.linear_probe_accuracy(
                train_f, train_y, test_f, test_y, seed=config.seed
            ),
            "knn_accuracy": metrics.knn_accuracy(train_f, train_y, test_f, test_y, k=config.knn_k),
            "test_nuclear_norm": float(norms.mean()),
            **{f"open_set_{k}": v for k, v in retrieval["metrics"].items()},
        },
        "info": {
            "test_nuclear_norm_std": float(norms.std()),
            # ||Q_hat||_* of `test_views` unit rows lies in [sqrt(views), views].
            "test_nuclear_norm_bounds": [math.sqrt(config.test_views), float(config.test_views)],
            **{f"open_set_{k}": v for k, v in retrieval["info"].items()},
        },
    }
