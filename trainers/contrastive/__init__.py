"""Contrastive pre-training (LORAC seed `003`, Algorithm 1; MoCo-M; MoCo) behind
`trainers/train_contrastive.py`, callable without flags; the model and its train step are
`tf_svmax.training.ContrastiveModel`.

Each step draws N training images and M augmented views of each (`data.random_view`): M - 1
query views through the trainable encoder, one key view through the momentum (EMA) key encoder,
and K negatives from a FIFO queue of earlier keys (`training.MomentumEncoder`,
`training.NegativeQueue`). The loss is `losses.lorac_loss`: LORAC with its prior from
``prior_start`` of the steps on (beta = inf before: the paper anneals, Sec. 6.2), MoCo-M
(beta = inf throughout) or MoCo (M = 2, beta = inf). SGD with momentum 0.9, weight decay 1e-4
and a cosine learning-rate decay; tau = 0.2 (Sec. 6, App. A); key momentum 0.99 (the paper's
0.999 is for runs 50 times longer).

The encoder is the small convolutional backbone, global average pooling ("features", what the
linear probe sees, as the paper's layers before ResNet-18's pooling) and a two-layer projection
head (with batch normalization) to C L2-normalised dimensions. Queries and keys are normalised
by their own batch's statistics, as in MoCo; MoCo's shuffled BN (which keeps a query and its key
out of the same normalisation group across GPUs) has no counterpart on one device. Without BN in
the head, runs here collapsed (every embedding one vector: positive similarity 0.97, loss at
ln(K + 1)) both with the BN backbone and keys through the EMA encoder's running statistics and
with no BN at all; with it (keys in training mode) they learn.

Evaluated on held-out images of the pre-training classes (the set's per-class split): a linear
probe (logistic regression on the frozen, standardised features; scikit-learn) and k-NN accuracy
(cosine, the training images' features); the nuclear norm of the C-d embeddings of 32 augmented
views of each held-out image (seed 003 Fig. 4c); and open-set retrieval (Recall@1, MAP@R) of the
features on the set's disjoint test classes.

    config = ContrastiveConfig(output_dir="/tmp/run", method="lorac")
    results = train_contrastive(config)                   # also in results.json

Its training code (Keras) is imported when one of its names is first read (`harness.lazy`).
"""

from trainers.harness import lazy

__getattr__, __all__ = lazy.exports(
    __name__,
    {
        "config": ("METHODS", "ConfigError", "ContrastiveConfig", "prior_start_step", "resolve"),
        "evaluate": ("augmented_nuclear_norms",),
        "train": ("build_model", "load_split", "train_contrastive", "view_batches"),
    },
)
