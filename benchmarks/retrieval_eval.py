"""Wall time and peak memory of `tf_svmax.metrics.evaluate_retrieval` at Stanford Online
Products scale (test split: 60,502 embeddings of d = 128 in 11,316 classes), on synthetic data.

    python -m benchmarks.retrieval_eval --output benchmarks/results/retrieval_eval_sop.json

The synthetic embedding has SOP's shape: 11,316 classes of 2 to 12 images, each image a unit
vector at its class centre plus Gaussian noise (`--noise` sets the difficulty; 0.12 gives
Recall@1 around 0.6, in the range of published SOP results). Writes the metrics, the timing of each
stage, the process's peak resident memory, a spot check of Recall@K against float64 brute force
on random queries and, with `--reference_kmeans`, how far the NMI is from scikit-learn's own
converged `KMeans(init="k-means++")` on the same data.

Where pytorch-metric-learning is installed (with faiss-cpu, its default k-NN and k-means), the
same embedding also goes through its `AccuracyCalculator` (``precision_at_1`` = Recall@1,
``mean_average_precision_at_r``, ``NMI``; defaults otherwise, k = the largest class): its k-NN
stage and its clustering stage each in a fresh process (`benchmarks/pml_stage.py`), so that
each records its own wall time and peak resident memory (`--compare_pml`, on by default).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import importlib.util  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402
from trainers.harness.lazy import library_args  # noqa: E402  (the library's tables, no Keras)

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_embeddings", 60502, "Test embeddings (SOP test split: 60,502).")
flags.DEFINE_integer("num_classes", 11316, "Test classes (SOP test split: 11,316).")
flags.DEFINE_integer("dim", 128, "Embedding dimension.")
flags.DEFINE_float("noise", 0.12, "Per-coordinate noise around the class centre.")
flags.DEFINE_list("ks", ["1", "10", "100", "1000"], "K of Recall@K (SOP protocol).")
flags.DEFINE_enum(
    "kmeans_init",
    "k-means++",
    list(library_args.KMEANS_INITS),
    "k-means seeding for NMI (library default: k-means++, greedy with pooled draws; "
    "k-means++-sklearn: scikit-learn's draws, one data pass per centre).",
)
flags.DEFINE_integer("kmeans_max_iter", 300, "Lloyd iterations for NMI (library default).")
flags.DEFINE_bool(
    "reference_kmeans",
    False,
    "Also run scikit-learn's own KMeans (k-means++, n_init=1, up to 300 iterations, same seed) "
    "and record its NMI, time and the difference.",
)
flags.DEFINE_bool(
    "compare_pml",
    True,
    "Also run pytorch-metric-learning's AccuracyCalculator on the same data when it is installed "
    "(each stage in a fresh process).",
)
flags.DEFINE_integer("spot_check_queries", 200, "Queries checked against float64 brute force.")
flags.DEFINE_integer("block_size", 1024, "Queries per block.")
flags.DEFINE_integer(
    "neighbor_list_size",
    512,
    "Neighbours per point the scan lists for its own counts and the k-means++ seeding "
    "(library default 512; 0: none, the evaluation as before the lists, for a same-run "
    "before/after).",
    lower_bound=0,
)
flags.DEFINE_integer("seed", 0, "Data and k-means seed.")
flags.DEFINE_string("output", "benchmarks/results/retrieval_eval_sop.json", "JSON result file.")

PROGRAM = "retrieval_eval"


def synthetic_embedding(num_embeddings, num_classes, dim, noise, seed):
    """SOP-shaped unit-norm embedding: every class has >= 2 members, the rest spread at random."""
    if num_embeddings < 2 * num_classes:
        raise ValueError(
            f"Invalid value for flag `num_embeddings`. Expected at least 2 * num_classes "
            f"({2 * num_classes}). Received: {num_embeddings}"
        )
    rng = np.random.default_rng(seed)
    extra = rng.multinomial(num_embeddings - 2 * num_classes, np.full(num_classes, 1 / num_classes))
    labels = np.repeat(np.arange(num_classes), 2 + extra)
    centres = rng.standard_normal((num_classes, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[labels] + noise * rng.standard_normal((num_embeddings, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, labels


# AccuracyCalculator metrics per stage: the k-NN ones, then the clustering one.
PML_STAGES = {
    "neighbors": ("precision_at_1", "mean_average_precision_at_r"),
    "nmi": ("NMI",),
}


def compare_pml(x, labels, ours):
    """PML's values, time and memory per stage next to ours (None where PML is missing)."""
    missing = [m for m in ("pytorch_metric_learning", "faiss") if not importlib.util.find_spec(m)]
    if missing:
        _common.progress(PROGRAM, f"PML comparison skipped: {', '.join(missing)} not installed")
        return None
    import pytorch_metric_learning

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "embedding.npz")
        np.savez(path, x=x, labels=labels)
        stages = {}
        for stage, include in PML_STAGES.items():
            _common.progress(PROGRAM, f"PML AccuracyCalculator, {stage}: {', '.join(include)}")
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.pml_stage", path, ",".join(include)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode:
                raise RuntimeError(f"PML stage {stage} failed:\n{done.stderr[-3000:]}")
            stages[stage] = json.loads(done.stdout.strip().splitlines()[-1])
    pml_values = {k: v for stage in stages.values() for k, v in stage["values"].items()}
    ours_values = {
        "precision_at_1": ours["recall_at_1"],
        "mean_average_precision_at_r": ours["map_at_r"],
        "NMI": ours["nmi"],
    }
    return {
        "implementation": f"pytorch-metric-learning {pytorch_metric_learning.__version__} "
        "AccuracyCalculator(k='max_bin_count'), faiss k-NN and k-means (its defaults)",
        "stages": stages,
        "values": pml_values,
        "differences": {k: ours_values[k] - pml_values[k] for k in ours_values},
        "seconds": sum(stage["seconds"] for stage in stages.values()),
        "peak_rss_mb": max(stage["peak_rss_mb"] for stage in stages.values()),
    }


def main(argv):
    del argv
    try:
        ks = _common.parse_ints(FLAGS.ks, "ks")
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from None
    # Imported after the flags are checked: tf_svmax loads Keras and its backend (seconds).
    from tf_svmax.metrics import retrieval

    _common.progress(PROGRAM, f"synthetic embedding {FLAGS.num_embeddings} x {FLAGS.dim}")
    x, labels = synthetic_embedding(
        FLAGS.num_embeddings, FLAGS.num_classes, FLAGS.dim, FLAGS.noise, FLAGS.seed
    )
    rss_before_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    results = retrieval.evaluate_retrieval(
        x,
        labels,
        ks=ks,
        seed=FLAGS.seed,
        kmeans_init=FLAGS.kmeans_init,
        kmeans_max_iter=FLAGS.kmeans_max_iter,
        block_size=FLAGS.block_size,
        neighbor_list_size=FLAGS.neighbor_list_size,
        verbose=1,
    )
    total = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    _common.progress(PROGRAM, f"evaluation took {total:.1f} s, peak RSS {peak_mb:.0f} MB")

    check = retrieval.first_positive_ranks(x, labels, block_size=FLAGS.block_size)
    rng = np.random.default_rng(FLAGS.seed + 1)
    has_positive = check >= 0
    queries = rng.choice(
        np.flatnonzero(has_positive),
        size=min(FLAGS.spot_check_queries, int(has_positive.sum())),
        replace=False,
    )
    x64 = x.astype(np.float64)
    mismatches = 0
    for q in queries:
        d = ((x64 - x64[q]) ** 2).sum(axis=1)
        d[q] = np.inf
        order = np.lexsort((np.arange(len(x)), d))
        brute_rank = int(np.flatnonzero(labels[order] == labels[q])[0])
        mismatches += int(brute_rank != check[q])
    _common.progress(PROGRAM, f"spot check: {mismatches} of {len(queries)} ranks differ")

    reference = None
    if FLAGS.reference_kmeans:
        from sklearn.cluster import KMeans  # noqa: PLC0415
        from sklearn.metrics import normalized_mutual_info_score  # noqa: PLC0415

        _common.progress(PROGRAM, "reference: scikit-learn KMeans(k-means++), up to 300 iterations")
        ref_start = time.perf_counter()
        model = KMeans(
            n_clusters=len(np.unique(labels)),
            init="k-means++",
            n_init=1,
            max_iter=300,
            random_state=FLAGS.seed,
        ).fit(x)
        ref_nmi = float(
            normalized_mutual_info_score(labels, model.labels_, average_method="geometric")
        )
        reference = {
            "implementation": "sklearn.cluster.KMeans(init='k-means++', n_init=1, max_iter=300)",
            "nmi": ref_nmi,
            "kmeans_iterations": int(model.n_iter_),
            "kmeans_converged": bool(model.n_iter_ < 300),
            "seconds": time.perf_counter() - ref_start,
            "nmi_difference": results["nmi"] - ref_nmi,
        }
        _common.progress(
            PROGRAM,
            f"reference NMI {ref_nmi:.4f} in {reference['seconds']:.1f} s "
            f"(ours {results['nmi']:.4f} in {results['seconds_nmi']:.1f} s)",
        )
    pml = compare_pml(x, labels, results) if FLAGS.compare_pml else None
    if pml is not None:
        # Same run, same machine: the ratios are what a loaded machine leaves comparable.
        pml["ours_over_pml_seconds"] = total / pml["seconds"]
        pml["ours_over_pml_seconds_by_stage"] = {
            "neighbors": results["seconds_neighbors"] / pml["stages"]["neighbors"]["seconds"],
            "nmi": results["seconds_nmi"] / pml["stages"]["nmi"]["seconds"],
        }
        _common.progress(
            PROGRAM,
            f"PML: {pml['seconds']:.1f} s, peak RSS {pml['peak_rss_mb']:.0f} MB, values "
            f"{pml['values']} (ours minus PML: {pml['differences']}); ours / PML time "
            f"{pml['ours_over_pml_seconds']:.2f} ({pml['ours_over_pml_seconds_by_stage']})",
        )
    payload = {
        "program": PROGRAM,
        "config": {
            "num_embeddings": FLAGS.num_embeddings,
            "num_classes": FLAGS.num_classes,
            "dim": FLAGS.dim,
            "noise": FLAGS.noise,
            "ks": ks,
            "kmeans_init": FLAGS.kmeans_init,
            "kmeans_max_iter": FLAGS.kmeans_max_iter,
            "block_size": FLAGS.block_size,
            "neighbor_list_size": FLAGS.neighbor_list_size,
            "seed": FLAGS.seed,
        },
        "results": results,
        "wall_seconds": total,
        "peak_rss_mb": peak_mb,
        "rss_before_evaluation_mb": rss_before_mb,
        "spot_check": {"queries": len(queries), "rank_mismatches": mismatches},
        "reference_kmeans": reference,
        "pytorch_metric_learning": pml,
        **_common.environment(),
    }
    _common.write_json(FLAGS.output, payload)
    _common.progress(PROGRAM, f"wrote {FLAGS.output}")


if __name__ == "__main__":
    _common.run(main)
