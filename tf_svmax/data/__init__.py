"""tf.data input: P x K sampling and the embedded digits split (dataset readers come next)."""

from tf_svmax.data.digits import load_digits_open_set
from tf_svmax.data.sampler import pk_batches, pk_index_batches

__all__ = ["load_digits_open_set", "pk_batches", "pk_index_batches"]
