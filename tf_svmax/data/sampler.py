"""P x K mini-batches on tf.data: P classes, K samples each, as the retrieval experiments use.

Semantics of the originals (ahmdtaha/tf_retrieval_baseline `sample_k_fids_for_pid`): every pass
shuffles the classes and uses the first ``floor(C / P) * P`` of them, so each batch holds P
distinct classes; a class with fewer than K samples repeats them, every sample equally often
(its indices are tiled to the next multiple of its size >= K, shuffled, and the first K taken).
All randomness is stateless and derived from `seed`, so a seed gives the same batches on every
run; without a seed the batches differ from run to run.
"""

import numpy as np
import tensorflow as tf

from tf_svmax import checks


def pk_index_batches(labels, *, batch_p, batch_k, seed=None):
    """An infinite dataset of `[P * K]` int64 index batches into `labels`.

    Args:
      labels: `[N]` integer class labels (a NumPy array or list).
      batch_p: Classes per batch (P); at most the number of classes.
      batch_k: Samples per class (K).
      seed: Int seed for reproducible batches, or None.

    Raises:
      ValueError: bad P or K, or fewer than P classes.
    """
    batch_p, batch_k = (
        checks.check_positive_int(batch_p, "batch_p"),
        checks.check_positive_int(batch_k, "batch_k"),
    )
    labels = np.asarray(labels).reshape(-1)
    classes, inverse = np.unique(labels, return_inverse=True)
    if len(classes) < batch_p:
        raise ValueError(
            checks.invalid("batch_p", f"at most the number of classes ({len(classes)})", batch_p)
        )
    # Members of each class as a ragged table: class c owns order[starts[c]:starts[c]+counts[c]].
    order = np.argsort(inverse, kind="stable")
    counts = np.bincount(inverse)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    order_t, counts_t, starts_t = (
        tf.constant(order, tf.int64),
        tf.constant(counts, tf.int64),
        tf.constant(starts, tf.int64),
    )
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise ValueError(checks.invalid("seed", "an int or None", seed))
    # tf.data needs concrete seeds; without one, draw a fresh seed per call (run-to-run random).
    base_seed = int(seed) if seed is not None else int(np.random.default_rng().integers(2**31))

    def sample_k(class_id, element_seed):
        count = counts_t[class_id]
        # Tile to the next multiple of the class size >= K, so repeats are equally likely.
        padded = (batch_k + count - 1) // count * count
        candidates = tf.math.floormod(tf.range(padded), count)
        noise = tf.random.stateless_uniform(tf.shape(candidates), seed=element_seed)
        chosen = tf.gather(candidates, tf.argsort(noise))[:batch_k]
        return tf.gather(order_t, starts_t[class_id] + chosen)

    passes = tf.data.Dataset.range(len(classes)).shuffle(
        len(classes), seed=base_seed, reshuffle_each_iteration=True
    )
    passes = passes.take(len(classes) // batch_p * batch_p).repeat()
    element_seeds = tf.data.Dataset.random(seed=base_seed + 1).batch(2)
    indices = tf.data.Dataset.zip(passes, element_seeds).map(
        lambda c, s: sample_k(c, tf.cast(s, tf.int64) % (2**31)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return indices.batch(batch_p).map(lambda block: tf.reshape(block, [-1]))


def pk_batches(
    features,
    labels,
    *,
    batch_p,
    batch_k,
    seed=None,
    map_fn=None,
    start_batch=0,
    num_parallel_calls=tf.data.AUTOTUNE,
):
    """An infinite, prefetched dataset of P x K `(features, labels)` batches.

    Rows of one class are consecutive (the layout the P x K losses check).

    Args:
      features: `[N, ...]` array (or `tf.Tensor`, used as is: no copy of a large
        `decoded_image_cache`) of samples, or `[N]` file paths when `map_fn` decodes them.
      labels: `[N]` integer labels.
      batch_p, batch_k, seed: See `pk_index_batches`.
      map_fn: Optional per-sample function `feature -> tensor` (decode, preprocess), run in
        parallel in a deterministic order.
      start_batch: Skip this many batches first (cheaply: before any decoding), so that a run
        resumed at step n sees the batches an uninterrupted run would.
      num_parallel_calls: Parallel calls of `map_fn` (tf.data's; the default lets tf.data
        choose); the order of the samples does not depend on it.
    """
    features_t = features if isinstance(features, tf.Tensor) else tf.constant(np.asarray(features))
    labels = np.asarray(labels).reshape(-1)
    if features_t.shape[0] != len(labels):
        raise ValueError(
            f"Invalid value for argument `labels`. Expected one label per sample "
            f"({features_t.shape[0]}). Received: {len(labels)} labels."
        )
    labels_t = tf.constant(labels)
    batches = pk_index_batches(labels, batch_p=batch_p, batch_k=batch_k, seed=seed)
    if start_batch:
        batches = batches.skip(checks.check_positive_int(start_batch, "start_batch"))
    if map_fn is None:
        batches = batches.map(
            lambda idx: (tf.gather(features_t, idx), tf.gather(labels_t, idx)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    else:
        batches = (
            batches.unbatch()
            .map(
                lambda i: (map_fn(tf.gather(features_t, i)), tf.gather(labels_t, i)),
                num_parallel_calls=num_parallel_calls,
                deterministic=True,
            )
            .batch(batch_p * batch_k)
        )
    return batches.prefetch(tf.data.AUTOTUNE)
