"""Pretraining a small backbone by classification on the glyph pretraining source, the
stand-in here for the ImageNet weights the SVMax paper fine-tunes (Sec. 4.1); behind
`trainers/pretrain_glyphs.py`, callable without flags.

The source (`tf_svmax.data.load_glyph_pretraining`) has over a thousand character classes from
Unicode blocks the retrieval glyphs do not use, disjoint from every retrieval class by the glyph
set's own look-alike rule. The backbone (global-average-pooled features) gets a softmax head
and is trained with cross-entropy, SGD with momentum 0.9, the learning rate constant for half
of the steps then decayed linearly to 1e-7, on uniformly shuffled batches (every training
image once per epoch); the held-out images (the last instances of every class) give the top-1
and top-5 accuracy at every evaluation. The finished backbone is written as
``backbone.weights.h5``, the file ``train_retrieval --weights=<path>`` (and ``train_two_head``)
loads into the same backbone.

    config = PretrainConfig(output_dir="/tmp/pretrain")      # small_cnn_bn
    results = pretrain(config)                                # also written to results.json

Its training code (Keras) is imported when one of its names is first read (`harness.lazy`).
"""

from trainers.harness import lazy

__getattr__, __all__ = lazy.exports(
    __name__,
    {
        "config": ("ConfigError", "PretrainConfig", "resolve"),
        "train": ("BACKBONE_FILE", "batch_indices", "pretrain", "top_k_accuracies"),
    },
)
