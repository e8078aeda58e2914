"""The two-head run's held-out evaluation: classification accuracy, the retrieval metrics of
its embedding, and how often a misclassified image's nearest training image agrees with the
prediction."""

import numpy as np

from tf_svmax import data, metrics


def _predict(model, images, loader, batch_size, input_size):
    if loader is None:
        outputs = model.predict(images, batch_size=batch_size, verbose=0)
    else:
        dataset = data.image_dataset(
            images, np.zeros(len(images), np.int64), input_size=input_size, batch_size=batch_size
        ).map(lambda x, y: x)
        outputs = model.predict(dataset, verbose=0)
    return {k: np.asarray(v) for k, v in outputs.items()}


def retrieval_features(outputs):
    """The embedding evaluated for retrieval: the embedding head, or for a single-head network
    the L2-normalised pooled features."""
    if "embedding" in outputs:
        return outputs["embedding"]
    from sklearn.preprocessing import normalize

    # Rows of exact zeros (a dead ReLU map) stay zero rather than dividing by 0.
    return normalize(outputs["features"].astype(np.float64))


def evaluate(config, model, split):
    """The held-out evaluation: ``{"metrics": test accuracy, macro accuracy and the retrieval
    metrics of the retrieval features, "info": per-class accuracy, the error neighbours' agreement
    and the retrieval bookkeeping}``."""
    loaders = split["loaders"]
    loader = None if loaders is None else loaders[1]
    size = split["input_shape"][0]
    test = _predict(model, split["test"][0], loader, config.eval_batch_size, size)
    train = _predict(model, split["train"][0], loader, config.eval_batch_size, size)
    labels = split["test"][1]
    predictions = np.argmax(test["logits"], axis=1)
    accuracies = metrics.classification_accuracies(labels, predictions)
    test_embedding, train_embedding = retrieval_features(test), retrieval_features(train)
    retrieval = metrics.split_retrieval_results(
        metrics.evaluate_retrieval(
            test_embedding,
            labels,
            ks=config.recall_ks,
            kmeans_init=config.kmeans_init,
            kmeans_max_iter=config.kmeans_max_iter,
            seed=config.seed,
        )
    )
    share, errors = metrics.neighbour_agreement_of_errors(
        train_embedding, split["train"][1], test_embedding, labels, predictions
    )
    per_class = {str(k): v for k, v in accuracies["per_class_accuracy"].items()}
    return {
        "metrics": {
            "accuracy": accuracies["accuracy"],
            "macro_accuracy": accuracies["macro_accuracy"],
            **retrieval["metrics"],
        },
        "info": {
            "per_class_accuracy": per_class,
            **retrieval["info"],
            # None (JSON null) when there is no error to explain.
            "error_neighbour_agreement": None if errors == 0 else share,
            "test_errors": errors,
        },
    }
