"""Writes pytorch-metric-learning's reference values for tests/losses/test_pair_contrastive.py.

CI installs no torch (`pip install .[test]`), and a test skipped where a package is absent is no
test; so pytorch-metric-learning (PML) runs here, by hand, where torch and PML are installed:

    python -m tests.losses.make_pml_golden           # (re)writes golden/pml_contrastive.npz
    python -m tests.losses.make_pml_golden --check   # recomputes; fails unless it equals the file

and the test suite compares tf_svmax with the stored values on the stored inputs. This file
imports only numpy, torch and pytorch_metric_learning, never tensorflow or tf_svmax.

What it stores (inputs are float32 values kept as float64; labels int64):

- ``values/x``, ``values/y``: a 24 x 8 batch with 5 classes; for each distance setting
  (`SETTINGS`) and dtype (float32 / float64: the batch cast to it), PML's ContrastiveLoss value
  ``values/<setting>/<dtype>/value`` and its autograd gradient ``.../grad``.
- ``single_pair/x``, ``single_pair/y``: one anchor, one positive and one negative reference;
  ``single_pair/pml_value``: PML's value there (0: PML needs more than one pair of each kind).
- ``xbm/<setting>/x``, ``.../y`` [step, b, ...]: the batches fed, in order, to PML's
  CrossBatchMemory (memory_size M + b) around that setting's loss; per step its value
  ``value`` and gradient ``xbm_grad``; PML's ContrastiveLoss of the batch's anchors against
  batch U the previous M rows (self-pairs out) with the batch's reference copy live
  (``live_value``, ``live_grad``) and detached (``detached_grad``).
- ``__meta__``: JSON of the torch / PML / numpy versions and every setting above.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytorch_metric_learning
import torch
from pytorch_metric_learning import distances
from pytorch_metric_learning import losses as pml_losses

GOLDEN = Path(__file__).resolve().parent / "golden" / "pml_contrastive.npz"

SEED = 1234  # numpy.random.default_rng, one generator per section, as the tests' `rng` fixture
VALUES = {"n": 24, "dim": 8, "classes": 5, "dtypes": ["float32", "float64"]}
XBM = {"b": 8, "memory_size": 20, "dim": 6, "classes": 4, "steps": 7}
XBM["settings"] = ["cosine", "lp_raw"]

# PML's ContrastiveLoss arguments of each setting (margins first; the distance's name and
# arguments), and what tf_svmax's AllPairsContrastiveLoss is given to match it.
SETTINGS = {
    # PML's defaults: margins 0 and 1, LpDistance normalizing the embeddings.
    "lp_default": {"pos_margin": 0.0, "neg_margin": 1.0, "distance": ["LpDistance", {}]},
    "lp_raw": {
        "pos_margin": 2.0,
        "neg_margin": 3.5,
        "distance": ["LpDistance", {"normalize_embeddings": False}],
    },
    # The XBM paper's setting (tf_svmax's defaults).
    "cosine": {"pos_margin": 1.0, "neg_margin": 0.5, "distance": ["CosineSimilarity", {}]},
    "dot": {
        "pos_margin": 1.0,
        "neg_margin": 0.0,
        "distance": ["DotProductSimilarity", {"normalize_embeddings": False}],
    },
}


def pml_loss(setting):
    spec = SETTINGS[setting]
    name, kwargs = spec["distance"]
    distance = getattr(distances, name)(**kwargs)
    return pml_losses.ContrastiveLoss(
        pos_margin=spec["pos_margin"], neg_margin=spec["neg_margin"], distance=distance
    )


def data(rng, n, dim, classes):
    """The tests' `_data`: Gaussian float32 rows, labels in range(classes), rows 0, 1 labelled
    0, 1."""
    x = rng.standard_normal((n, dim)).astype(np.float32)
    y = rng.integers(0, classes, n)
    y[:2] = [0, 1]
    return x, y


def _pml_on_reference_set(loss, x, y, memory_x, memory_y, live):
    """PML's ContrastiveLoss of the batch's anchors against batch U memory (self-pairs out);
    the batch's reference copy keeps its gradient where `live`."""
    labels = torch.tensor(y)
    ref_labels = torch.cat([labels, torch.tensor(memory_y, dtype=labels.dtype)])
    ref = torch.cat([x if live else x.detach(), torch.tensor(memory_x)])
    same = labels[:, None] == ref_labels[None, :]
    itself = torch.zeros_like(same)
    itself[:, : len(y)] = torch.eye(len(y), dtype=torch.bool)
    a1, p = torch.where(same & ~itself)
    a2, n = torch.where(~same)
    return loss(x, labels, (a1, p, a2, n), ref, ref_labels)


def _f64(t):
    return np.asarray(t.detach().numpy() if isinstance(t, torch.Tensor) else t, np.float64)


def compute():
    torch.set_num_threads(1)
    out = {}

    # ContrastiveLoss values and gradients, every setting and dtype, one batch.
    x, y = data(np.random.default_rng(SEED), VALUES["n"], VALUES["dim"], VALUES["classes"])
    out["values/x"], out["values/y"] = _f64(x), y.astype(np.int64)
    for setting in SETTINGS:
        for dtype in VALUES["dtypes"]:
            xt = torch.tensor(x.astype(dtype), requires_grad=True)
            value = pml_loss(setting)(xt, torch.tensor(y))
            value.backward()
            assert xt.grad.dtype == getattr(torch, dtype)
            out[f"values/{setting}/{dtype}/value"] = _f64(value)
            out[f"values/{setting}/{dtype}/grad"] = _f64(xt.grad)

    # One anchor against one positive and one negative reference.
    x = np.array([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6]], np.float32)
    y = np.array([0, 0, 1], np.int64)
    xt, yt = torch.tensor(x), torch.tensor(y)
    value = pml_loss("cosine")(xt[:1], yt[:1], ref_emb=xt[1:], ref_labels=yt[1:])
    out["single_pair/x"], out["single_pair/y"] = _f64(x), y
    out["single_pair/pml_value"] = _f64(value)

    # PML's CrossBatchMemory, step by step through its wrap-around.
    b, size, dim = XBM["b"], XBM["memory_size"], XBM["dim"]
    for setting in XBM["settings"]:
        rng = np.random.default_rng(SEED)
        loss = pml_loss(setting)
        xbm = pml_losses.CrossBatchMemory(loss, dim, memory_size=size + b)
        memory_x, memory_y = np.zeros((0, dim), np.float32), np.zeros(0, np.int64)
        rows = {k: [] for k in ("x", "y", "value", "xbm_grad", "live_value", "live_grad")}
        rows["detached_grad"] = []
        for _ in range(XBM["steps"]):
            x, y = data(rng, b, dim, XBM["classes"])
            xt = torch.tensor(x, requires_grad=True)
            value = xbm(xt, torch.tensor(y))
            (xbm_grad,) = torch.autograd.grad(value, xt)
            live = _pml_on_reference_set(loss, xt, y, memory_x, memory_y, live=True)
            (live_grad,) = torch.autograd.grad(live, xt)
            detached = _pml_on_reference_set(loss, xt, y, memory_x, memory_y, live=False)
            (detached_grad,) = torch.autograd.grad(detached, xt)
            for key, v in (
                ("x", x),
                ("value", value),
                ("xbm_grad", xbm_grad),
                ("live_value", live),
                ("live_grad", live_grad),
                ("detached_grad", detached_grad),
            ):
                rows[key].append(_f64(v))
            rows["y"].append(y.astype(np.int64))
            memory_x = np.concatenate([memory_x, x])[-size:]
            memory_y = np.concatenate([memory_y, y])[-size:]
        for key, v in rows.items():
            out[f"xbm/{setting}/{key}"] = np.stack(v)

    meta = {
        "torch": torch.__version__,
        "pytorch_metric_learning": pytorch_metric_learning.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "values": VALUES,
        "xbm": {**XBM, "pml_memory_size": size + b},
        "settings": SETTINGS,
    }
    out["__meta__"] = np.array(json.dumps(meta, sort_keys=True))
    return out


# Tolerances of --check: the float32 computations may move by an ulp between torch builds.
_CHECK_TOL = {"float32": 1e-6, "float64": 1e-12}
_VERSION_KEYS = ("torch", "pytorch_metric_learning", "numpy")


def check(new, path=GOLDEN):
    """Fails unless `new` equals the committed file: same keys, inputs and settings exactly,
    values within `_CHECK_TOL` (versions may differ; they are printed)."""
    with np.load(path) as f:
        old = {k: f[k] for k in f.files}
    problems = []
    if sorted(old) != sorted(new):
        problems.append(f"keys differ: {sorted(set(old) ^ set(new))}")
    old_meta, new_meta = json.loads(str(old["__meta__"])), json.loads(str(new["__meta__"]))
    for key in _VERSION_KEYS:
        print(f"{key}: file {old_meta.pop(key, None)}, here {new_meta.pop(key, None)}")
    if old_meta != new_meta:
        problems.append(f"settings differ: {old_meta} != {new_meta}")
    exact = True
    for key in sorted(set(old) & set(new) - {"__meta__"}):
        a, b = old[key], new[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{key}: {a.dtype}{a.shape} != {b.dtype}{b.shape}")
            continue
        if np.array_equal(a, b):
            continue
        exact = False
        # Inputs exactly; only the values/<setting>/float64 ones are computed in float64.
        tol = _CHECK_TOL["float64" if "/float64/" in key else "float32"]
        if key.endswith(("/x", "/y")):
            tol = 0.0
        diff = float(np.max(np.abs(a - b)))
        if diff > tol * max(1.0, float(np.max(np.abs(a)))):
            problems.append(f"{key}: max |difference| {diff:.3g} > {tol:g}")
    if problems:
        raise AssertionError(f"{path} is not what PML computes here:\n  " + "\n  ".join(problems))
    print(f"{path}: {'identical' if exact else 'equal within tolerance'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the file, write none")
    parser.add_argument("--out", type=Path, default=GOLDEN, help="file to write or check")
    args = parser.parse_args(argv)
    new = compute()
    if args.check:
        check(new, args.out)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **new)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
