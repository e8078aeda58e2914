"""Training-step cost of LORAC's prior (seed 003) over MoCo-M and of XML's cross-batch term
(seed 004) over its base ranking loss, on the trainers' own models and steps.

* LORAC: one step of `tf_svmax.training.ContrastiveModel` as `trainers.contrastive` builds it
  (the small BN backbone on 32 x 32 grey images, M views, N instances, queue K, C = 128) with
  the Laplace prior switched on (``lorac``) against the same step without it (``moco_m``); the
  ratio of median step times is the prior's overhead (one batched SVD of N M x C matrices and
  its gradient). Also the loss alone (`losses.lorac_loss` forward and backward) at the paper's
  N = 256, K = 65,536.
* XML: one `train_on_batch` of the retrieval trainer's model (small_cnn, P x K = 36 x 4,
  contrastive loss, no regularizer) with ``--xml_lambda=0.01`` (m = 64 prototype histograms,
  two closed-form ridge fits, the loss on both predicted halves) against ``--xml_lambda=0``.

XLA off (the SVD on CPU). Medians over --repeats steps after 3 warm-up steps.

    python -m benchmarks.lorac_xml_overhead --output_dir benchmarks/results/lorac_xml_overhead
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import math  # noqa: E402

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402
from trainers import contrastive, retrieval  # noqa: E402  (light: their code loads when used)

# TensorFlow, Keras and tf_svmax are imported where they are used: a refused flag (exit 2) does
# not wait seconds for them.

FLAGS = flags.FLAGS
flags.DEFINE_list("batch_sizes", ["64", "256"], "N instances per contrastive step.")
flags.DEFINE_integer("views", 4, "M views per instance.", lower_bound=2)
flags.DEFINE_integer("queue_size", 2048, "K negatives of the timed steps.", lower_bound=1)
flags.DEFINE_integer("loss_queue_size", 65536, "K of the loss-alone timing (paper).", lower_bound=1)
flags.DEFINE_integer("batch_p", 36, "XML: classes per batch P (multiple of 4).", lower_bound=4)
flags.DEFINE_integer("repeats", 20, "Timed steps per point (after 3 warm-up steps).", lower_bound=1)
flags.DEFINE_string("output_dir", "benchmarks/results/lorac_xml_overhead", "Where results go.")

PROGRAM = "lorac_xml_overhead"
IMAGE = (32, 32, 1)


def time_contrastive_step(method, batch_size, views, queue_size, repeats):
    import tensorflow as tf

    config = contrastive.resolve(
        contrastive.ContrastiveConfig(
            output_dir="unused",
            method=method,
            views=views,
            batch_size=batch_size,
            queue_size=max(queue_size, batch_size),
            prior_start=0.0,  # the prior from the first step
        )
    )
    model, _ = contrastive.build_model(config, IMAGE)
    x = np.random.default_rng(0).uniform(size=(batch_size, views, *IMAGE)).astype(np.float32)
    x = tf.constant(x)
    step = tf.function(model.train_step)
    timing = _common.time_calls(lambda: _common.materialize(step(x)), repeats, warmup=3)
    return {"part": "contrastive step", "method": method, "batch": batch_size, **timing}


def time_lorac_loss(beta, batch_size, views, queue_size, repeats):
    import tensorflow as tf

    from tf_svmax import losses

    rng = np.random.default_rng(0)
    q = tf.constant(rng.standard_normal((batch_size, views - 1, 128)).astype(np.float32))
    k = tf.constant(rng.standard_normal((batch_size, 128)).astype(np.float32))
    negatives = tf.constant(rng.standard_normal((queue_size, 128)).astype(np.float32))

    @tf.function
    def forward_backward():
        with tf.GradientTape() as tape:
            tape.watch(q)
            loss = tf.reduce_mean(losses.lorac_loss(q, k, negatives, beta=beta))
        return loss, tape.gradient(loss, q)

    timing = _common.time_calls(lambda: _common.materialize(forward_backward()), repeats, 3)
    method = "moco_m" if math.isinf(beta) else "lorac"
    return {"part": "lorac_loss alone", "method": method, "batch": batch_size, **timing}


def time_xml_step(xml_lambda, batch_p, repeats):
    import keras

    from tf_svmax import models

    config = retrieval.resolve(
        retrieval.RetrievalConfig(
            output_dir="unused", regularizer="none", xml_lambda=xml_lambda, batch_p=batch_p
        )
    )
    keras.utils.set_random_seed(0)
    embedding_model = models.build_embedding_model(
        config.backbone, input_shape=IMAGE, embedding_dim=config.embedding_dim
    )
    model = retrieval.build_training_model(config, embedding_model, batch_p)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
        loss=retrieval.build_loss(config),
        jit_compile=False,
    )
    rng = np.random.default_rng(0)
    batch = config.batch_p * config.batch_k
    x = rng.uniform(size=(batch, *IMAGE)).astype(np.float32)
    labels = np.repeat(np.arange(config.batch_p), config.batch_k)
    head = retrieval.head_output(config)
    y = {"embedding": labels, head: labels} if head else labels
    timing = _common.time_calls(lambda: model.train_on_batch(x, y), repeats, warmup=3)
    method = f"contrastive + XML (λ {xml_lambda:g}, m {config.xml_prototypes})"
    return {
        "part": "retrieval step",
        "method": method if xml_lambda else "contrastive",
        "batch": batch,
        **timing,
    }


def main(argv):
    del argv
    try:
        sizes = _common.parse_ints(FLAGS.batch_sizes, "--batch_sizes")
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from None
    if FLAGS.batch_p % 4:
        raise app.UsageError(
            "Invalid value for flag `--batch_p`. Expected a multiple of 4 (XML's halves of the "
            f"contrastive loss). Received: {FLAGS.batch_p}",
            exitcode=2,
        )
    rows = []
    for n in sizes:
        pair = []
        for method in ("moco_m", "lorac"):
            _common.progress(PROGRAM, f"contrastive step {method} N={n}")
            pair.append(
                time_contrastive_step(method, n, FLAGS.views, FLAGS.queue_size, FLAGS.repeats)
            )
        for beta in (math.inf, 2.0):
            _common.progress(PROGRAM, f"lorac_loss beta={beta} N={n}")
            pair.append(time_lorac_loss(beta, n, FLAGS.views, FLAGS.loss_queue_size, FLAGS.repeats))
        rows += pair
    for lam in (0.0, 0.01):
        _common.progress(PROGRAM, f"retrieval step xml_lambda={lam}")
        rows.append(time_xml_step(lam, FLAGS.batch_p, FLAGS.repeats))
    base = {}
    for r in rows:
        if r["method"] in ("moco_m", "contrastive"):
            base[(r["part"], r["batch"])] = r["median_ms"]
    for r in rows:
        r["overhead_ratio"] = r["median_ms"] / base[(r["part"], r["batch"])]
    config = {
        "batch_sizes": sizes,
        "views": FLAGS.views,
        "queue_size": FLAGS.queue_size,
        "loss_queue_size": FLAGS.loss_queue_size,
        "batch_p": FLAGS.batch_p,
        "repeats": FLAGS.repeats,
    }
    _common.write_records(FLAGS.output_dir, PROGRAM, config, rows)
    print("| part | method | batch | step ms (median) | p10–p90 ms | ÷ base |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['part']} | {r['method']} | {r['batch']} | {r['median_ms']:.1f} | "
            f"{r['p10_ms']:.1f}–{r['p90_ms']:.1f} | {r['overhead_ratio']:.3f} |"
        )
    print(f"wrote {FLAGS.output_dir}/{PROGRAM}.csv and {PROGRAM}.json")


if __name__ == "__main__":
    _common.run(main)
