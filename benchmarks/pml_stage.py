"""One stage of pytorch-metric-learning's `AccuracyCalculator` in a process of its own (no
TensorFlow imported), for `benchmarks/retrieval_eval.py`'s side-by-side comparison:

    python -m benchmarks.pml_stage EMBEDDING.npz precision_at_1,mean_average_precision_at_r

reads ``x`` and ``labels`` from the .npz, evaluates query = reference (PML's own convention for
one set; k = the largest class) and prints one JSON line: the values, the wall seconds and the
process's peak resident memory before and after.
"""

import json
import resource
import sys
import time

import numpy as np


def main(path, include):
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    saved = np.load(path)
    x, labels = torch.from_numpy(saved["x"]), torch.from_numpy(saved["labels"])
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    calculator = AccuracyCalculator(include=include, k="max_bin_count", device=torch.device("cpu"))
    values = calculator.get_accuracy(x, labels, x, labels, ref_includes_query=True)
    return {
        "values": {k: float(v) for k, v in values.items()},
        "seconds": time.perf_counter() - start,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_mb": rss_before,
    }


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m benchmarks.pml_stage EMBEDDING.npz METRIC[,METRIC...]")
    print(json.dumps(main(sys.argv[1], tuple(sys.argv[2].split(",")))))
