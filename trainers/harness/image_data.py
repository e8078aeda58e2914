"""The loaders of image files that the image experiments (retrieval, two-head) share (their
P x K batches: `trainers.harness.runtime.pk_batches`). A run of theirs starts with
`trainers.harness.runtime.start` (distribution, seed), then reads its data and builds its model
in `trainers.harness.config.model_scope`, in that order."""

from tf_svmax import data


def file_loaders(input_size):
    """``(training, evaluation)`` `path -> image` loaders of image files at `input_size` (the
    resolved config's): random crop and flip for training, center crop for evaluation (tf.data:
    TensorFlow installed, `runtime.start` checks)."""
    return (
        data.image_loader(training=True, input_size=input_size),
        data.image_loader(training=False, input_size=input_size),
    )
