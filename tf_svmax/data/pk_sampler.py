"""P x K mini-batches from memory on any backend: NumPy indices and a `keras.utils.PyDataset`.

The same sampling as `tf_svmax.data.pk_index_batches` (the originals' `sample_k_fids_for_pid`):
every pass shuffles the classes and uses the first ``floor(C / P) * P`` of them, so each batch
holds P distinct classes, K consecutive rows each; a class with fewer than K samples repeats
them, every sample equally often (its indices tiled to the next multiple of its size >= K,
shuffled, the first K taken). The draws are NumPy's, not tf.data's: a seed gives the same
batches on every run and backend here, other batches than `pk_index_batches` gives.

Batch ``n`` is a function of the seed and ``n`` alone (its pass's class order from
``(seed, pass)``, its samples from ``(seed, n)``), so a run resumed at step n reads the batches
an uninterrupted run would, without replaying the ones before.
"""

import keras
import numpy as np

from tf_svmax import checks

# The second word of a batch's seed: keeps its sample draws apart from the pass's class order.
_SAMPLES, _CLASSES = 1, 0


class PKIndexSampler:
    """Batch ``n`` of `[P * K]` indices into `labels`: ``sampler(n)``.

    Args:
      labels: `[N]` integer class labels (a NumPy array or list).
      batch_p: Classes per batch (P); at most the number of classes.
      batch_k: Samples per class (K).
      seed: Int seed (>= 0) for reproducible batches, or None (a fresh one per sampler).

    Raises:
      ValueError: bad P, K or seed, or fewer than P classes.
    """

    def __init__(self, labels, *, batch_p, batch_k, seed=None):
        self.batch_p = checks.check_positive_int(batch_p, "batch_p")
        self.batch_k = checks.check_positive_int(batch_k, "batch_k")
        labels = np.asarray(labels).reshape(-1)
        classes, inverse = np.unique(labels, return_inverse=True)
        if len(classes) < self.batch_p:
            raise ValueError(
                checks.invalid(
                    "batch_p", f"at most the number of classes ({len(classes)})", batch_p
                )
            )
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0
        ):
            raise ValueError(checks.invalid("seed", "an int >= 0 or None", seed))
        # Members of each class as a ragged table: class c owns
        # order[starts[c] : starts[c] + counts[c]].
        self._order = np.argsort(inverse, kind="stable")
        self._counts = np.bincount(inverse)
        self._starts = np.concatenate([[0], np.cumsum(self._counts)[:-1]])
        self._seed = int(seed) if seed is not None else int(np.random.default_rng().integers(2**31))
        self.batches_per_pass = len(classes) // self.batch_p

    def __call__(self, batch):
        """The indices of batch number `batch` (>= 0), `[P * K]` int64."""
        pass_number, within = divmod(int(batch), self.batches_per_pass)
        order = np.random.default_rng([self._seed, _CLASSES, pass_number]).permutation(
            len(self._counts)
        )
        chosen_classes = order[within * self.batch_p : (within + 1) * self.batch_p]
        rng = np.random.default_rng([self._seed, _SAMPLES, int(batch)])
        blocks = []
        for c in chosen_classes:
            count = self._counts[c]
            # Tile to the next multiple of the class size >= K, so repeats are equally likely.
            padded = -(-self.batch_k // count) * count
            chosen = (rng.permutation(padded) % count)[: self.batch_k]
            blocks.append(self._order[self._starts[c] + chosen])
        return np.concatenate(blocks).astype(np.int64)


class PKBatches(keras.utils.PyDataset):
    """An endless `keras.utils.PyDataset` of P x K ``(features, labels)`` batches from memory,
    for `fit` on any backend (no tf.data): item ``i`` is batch ``start_batch + i`` of a
    `PKIndexSampler`.

    Args:
      features: `[N, ...]` array of samples.
      labels: `[N]` integer labels.
      batch_p, batch_k, seed: See `PKIndexSampler`.
      start_batch: The first batch's number (a run resumed at step n starts at batch n).
      outputs: None, or the output names of a model with several: each batch's labels are
        given to every one of them (Keras matches targets to outputs by key).

    Example:

        >>> import numpy as np
        >>> from tf_svmax.data import PKBatches
        >>> batches = PKBatches(np.eye(6), np.arange(6) // 2, batch_p=2, batch_k=2, seed=0)
        >>> x, y = batches[0]
        >>> x.shape, bool(y[0] == y[1] and y[2] == y[3] and y[0] != y[2])
        ((4, 6), True)
    """

    def __init__(
        self, features, labels, *, batch_p, batch_k, seed=None, start_batch=0, outputs=None
    ):
        super().__init__()
        self._features = np.asarray(features)
        self._labels = np.asarray(labels).reshape(-1)
        if len(self._features) != len(self._labels):
            raise ValueError(
                checks.invalid(
                    "labels", f"one label per sample ({len(self._features)})", len(self._labels)
                )
            )
        self._sampler = PKIndexSampler(self._labels, batch_p=batch_p, batch_k=batch_k, seed=seed)
        if start_batch != 0:
            start_batch = checks.check_positive_int(start_batch, "start_batch")
        self._start = start_batch
        self._outputs = tuple(outputs) if outputs else ()

    @property
    def num_batches(self):
        return None  # endless: `fit` takes steps_per_epoch batches per epoch

    def __getitem__(self, index):
        rows = self._sampler(self._start + index)
        labels = self._labels[rows]
        if self._outputs:
            labels = {name: labels for name in self._outputs}
        return self._features[rows], labels
