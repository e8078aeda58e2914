"""Retrieval training with a ranking loss and SVMax (SVMax paper Sec. 4.1, Table 1).

    python -m trainers.train_retrieval                       # glyphs, contrastive + SVMax
    python -m trainers.train_retrieval --dataset=cub200 --data_dir=/data/CUB_200_2011 \\
        --backbone=resnet50 --weights=imagenet --loss=triplet_hard --learning_rate=0.001

Flags left unset take the paper's value for the chosen loss (P x K, SVMax lambda, margin) or the
dataset's (train_steps). Re-running the same command resumes from the last checkpoint in
--output_dir. `--flagfile=FILE` reads flags from a file; command-line flags after it override it.
Exit status: 0 completed, 1 diverged (non-finite loss), 2 refused flag combination.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sys  # noqa: E402

from absl import app, flags, logging  # noqa: E402

from trainers import retrieval  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum(
    "dataset",
    "glyphs",
    list(retrieval.DATASETS),
    "glyphs: embedded rendered characters, 285 classes (first half train, second half test; "
    "no download). digits: scikit-learn's 8 x 8 digits, train 0-4 / test 5-9 (tiny, fast). "
    "cub200, cars196, sop, folder read --data_dir in the official layout.",
)
flags.DEFINE_string("data_dir", None, "Dataset folder (not for the embedded glyphs, digits).")
flags.DEFINE_enum(
    "backbone",
    "small_cnn",
    list(retrieval.models.BACKBONES),
    "Embedding network; the papers use GoogLeNet and ResNet50 (ImageNet weights).",
)
flags.DEFINE_string(
    "weights",
    None,
    "Backbone weights: unset (random), 'imagenet' (needs the "
    "network or Keras' cache) or a .weights.h5 file.",
)
flags.DEFINE_integer(
    "input_size",
    None,
    "Image side fed to the backbone (default: the "
    "backbone's, 224 or 299; resize is 256/224 of it).",
)
flags.DEFINE_integer("embedding_dim", 128, "Embedding size, L2-normalised (paper: 128).")
flags.DEFINE_enum(
    "loss",
    "contrastive",
    list(retrieval.LOSSES),
    "Ranking loss. proxy_anchor adds one learnable proxy per training class (alpha 32); it "
    "trains with this trainer's SGD schedule, not the Proxy-Anchor original's AdamW recipe.",
)
flags.DEFINE_enum(
    "regularizer",
    "svmax",
    list(retrieval.REGULARIZERS),
    "svmax: bounded Eq. 4; svmax_unbounded: -lambda s_mu; spread_out: the "
    "paper's baseline (alpha = --spread_out_alpha).",
)
flags.DEFINE_float(
    "svmax_lambda",
    None,
    "SVMax weight (paper: 1 contrastive and N-pair, 0.1 triplet, 2 angular, 1e-4 "
    "Proxy-Anchor; 1 lifted).",
)
flags.DEFINE_float("spread_out_alpha", 1.0, "Spread-out weight (paper: 1).")
flags.DEFINE_float(
    "margin",
    None,
    "Margin (paper: 1.0 contrastive, 0.2 triplet, delta 0.1 Proxy-Anchor; 1.0 lifted).",
)
flags.DEFINE_float(
    "learning_rate",
    0.01,
    "SGD learning rate, fixed for train_steps/2 then "
    "decayed polynomially to 1e-7 (paper: 0.01, 0.001, 0.0001).",
)
flags.DEFINE_integer(
    "train_steps",
    None,
    "Training steps K (paper: 5000 CUB/CARS, 20000 SOP; default glyphs: 3000, digits: 2000).",
)
flags.DEFINE_integer(
    "batch_p",
    None,
    "Classes per batch P (paper: 36 contrastive, 24 triplet, 72 N-pair/angular, "
    "64 Proxy-Anchor; capped at the training classes when unset).",
)
flags.DEFINE_integer(
    "batch_k",
    None,
    "Images per class K (paper: 4 contrastive and Proxy-Anchor, 6 triplet, 2 N-pair/angular).",
)
flags.DEFINE_integer(
    "eval_every", None, "Steps between evaluations and checkpoints (default: train_steps / 4)."
)
flags.DEFINE_integer(
    "trace_every",
    None,
    "Steps per point of the loss / s_mu / learning-rate trace in results.json and "
    "training.png (default: eval_every / 20).",
)
flags.DEFINE_bool(
    "evaluate_untrained",
    True,
    "Also evaluate before the first step (step 0: the starting point the curves and tables "
    "compare against).",
)
flags.DEFINE_list("recall_ks", ["1", "2", "4", "8"], "K of Recall@K (SOP papers: 1,10,100,1000).")
flags.DEFINE_enum("kmeans_init", "k-means++", ["k-means++", "random"], "NMI k-means seeding.")
flags.DEFINE_integer(
    "kmeans_max_iter",
    300,
    "NMI k-means iterations (SOP: 6 with --kmeans_init="
    "random keeps an evaluation under a minute on 2 cores).",
)
flags.DEFINE_integer("eval_batch_size", 128, "Batch size for embedding the test split.")
flags.DEFINE_string("output_dir", "runs/retrieval", "Results, checkpoints, TensorBoard, plots.")
flags.DEFINE_integer("seed", 0, "Seed for weights, batches and k-means.")
flags.DEFINE_bool(
    "jit_compile",
    False,
    "XLA-compile the train step (SVMax then uses its "
    "Newton-Schulz path, ~1.8x its non-XLA cost on CPU).",
)
flags.DEFINE_integer("verbose", 1, "0 silent, 1 progress bar, 2 one line per interval.")


def config_from_flags():
    return retrieval.RetrievalConfig(
        output_dir=FLAGS.output_dir,
        dataset=FLAGS.dataset,
        data_dir=FLAGS.data_dir,
        backbone=FLAGS.backbone,
        weights=FLAGS.weights,
        input_size=FLAGS.input_size,
        embedding_dim=FLAGS.embedding_dim,
        loss=FLAGS.loss,
        regularizer=FLAGS.regularizer,
        svmax_lambda=FLAGS.svmax_lambda,
        spread_out_alpha=FLAGS.spread_out_alpha,
        margin=FLAGS.margin,
        learning_rate=FLAGS.learning_rate,
        train_steps=FLAGS.train_steps,
        batch_p=FLAGS.batch_p,
        batch_k=FLAGS.batch_k,
        eval_every=FLAGS.eval_every,
        trace_every=FLAGS.trace_every,
        evaluate_untrained=FLAGS.evaluate_untrained,
        recall_ks=tuple(int(k) for k in FLAGS.recall_ks),
        kmeans_init=FLAGS.kmeans_init,
        kmeans_max_iter=FLAGS.kmeans_max_iter,
        eval_batch_size=FLAGS.eval_batch_size,
        seed=FLAGS.seed,
        jit_compile=FLAGS.jit_compile,
        verbose=FLAGS.verbose,
    )


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        # TensorFlow's checkpoint saver logs one INFO line per save through absl, which would
        # interleave with the progress lines; --verbosity=0 brings them back.
        logging.set_verbosity(logging.WARNING)
    try:
        results = retrieval.train_retrieval(config_from_flags())
    except retrieval.ConfigError as error:
        print(f"train_retrieval: refused: {error}", file=sys.stderr)
        return 2
    return 0 if results["status"] == "completed" else 1


if __name__ == "__main__":
    app.run(main)
