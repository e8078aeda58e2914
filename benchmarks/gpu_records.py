"""What `benchmarks/gpu.py` makes of its workers' rows: ratios to the peers, issue 58's goals,
the printed table and the figure. No absl flags here (the tests import it)."""

import os

from benchmarks.gpu_worker import PML_PEER_OF

GRAD_TOLERANCE = 1e-5  # issue 58's goal for the float32 spectral gradients


def add_ratios(rows):
    """``ratio_to_peer`` (time) and ``memory_ratio_to_peer`` on every measured row: the spectral
    rows against ``torch.linalg.svdvals`` at the same shape (the issue's reference, from the
    PyTorch worker), the mining rows against pytorch-metric-learning's counterpart."""
    ok = [r for r in rows if r["status"] == "ok"]
    torch_peer = {
        (r["section"], r["b"], r["d"]): r
        for r in ok
        if r["backend"] == "torch" and r["implementation"] == "peer" and r["section"] != "mining"
    }
    pml = {(r["measurement"], r["b"]): r for r in ok if r["section"] == "mining"}
    for row in ok:
        if row["implementation"] == "peer" and row["backend"] == "torch":
            continue
        if row["section"] in ("svmax", "ole"):
            peer = torch_peer.get((row["section"], row["b"], row["d"]))
        elif row["section"] == "mining" and row["implementation"] == "tf_svmax":
            peer = pml.get((PML_PEER_OF[row["measurement"]], row["b"]))
        else:
            peer = None
        if peer is None:
            continue
        row["peer"] = f"{peer['backend']}: {peer['measurement']}"
        row["ratio_to_peer"] = row["median_ms"] / peer["median_ms"]
        if row.get("peak_memory_mb") and peer.get("peak_memory_mb"):
            row["memory_ratio_to_peer"] = row["peak_memory_mb"] / peer["peak_memory_mb"]
    return rows


def goals(rows):
    """Issue 58's goals, one entry per (goal, backend, case): the measured number, its bound
    and whether it held (None where this run did not measure it)."""
    out = []

    def check(goal, row, measured, bound):
        out.append(
            {
                "goal": goal,
                "backend": row["backend"],
                "measurement": row["measurement"],
                "case": f"b={row['b']}, d={row['d']}"
                + (f", classes={row['classes']}" if row.get("classes") else ""),
                "measured": measured,
                "bound": bound,
                "held": None if measured is None else bool(measured <= bound),
            }
        )

    ours = [r for r in rows if r["implementation"] == "tf_svmax"]
    for r in ours:
        if r["section"] == "svmax" and r["measurement"] == "auto":
            check("SVMax auto time / torch.linalg.svdvals <= 0.5", r, r.get("ratio_to_peer"), 0.5)
        if r["section"] == "ole":
            check("OLE time / batched svdvals <= 0.5", r, r.get("ratio_to_peer"), 0.5)
        if r["section"] in ("svmax", "ole"):
            check(
                "float32 gradient relative error vs float64 <= 1e-5",
                r,
                r.get("grad_rel_error"),
                GRAD_TOLERANCE,
            )
        if r["section"] != "mining":
            continue
        if r["measurement"] == "semihard" and r["b"] == 4096:
            check("semi-hard time / PML <= 0.1 at b=4096", r, r.get("ratio_to_peer"), 0.1)
            check(
                "semi-hard memory / PML <= 0.25 at b=4096", r, r.get("memory_ratio_to_peer"), 0.25
            )
        if r["measurement"] == "lifted" and r["b"] == 8192:
            check("lifted peak memory MB <= 4096 at b=8192", r, r.get("peak_memory_mb"), 4096.0)
        if r["measurement"] == "batch_hard":
            check("batch-hard time / PML <= 1.0", r, r.get("ratio_to_peer"), 1.0)
    return out


def format_table(rows):
    lines = [
        "| backend | section | measurement | b | d | status | median ms | peak MB "
        "| x peer | grad rel. err. |",
        "|---|---|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["status"] != "ok":
            cells = [r["status"] + (f": {r['reason']}" if r.get("reason") else ""), "", "", "", ""]
        else:
            cells = [
                "ok",
                f"{r['median_ms']:.3f}",
                _number(r.get("peak_memory_mb"), ".0f"),
                _number(r.get("ratio_to_peer"), ".2f", "x"),
                _number(r.get("grad_rel_error"), ".1e"),
            ]
        head = [r["backend"], r["section"], r["measurement"], str(r["b"]), str(r["d"])]
        lines.append("| " + " | ".join(head + cells) + " |")
    return "\n".join(lines)


def _number(value, spec, suffix=""):
    return "-" if value is None else f"{value:{spec}}{suffix}"


def plot(path, rows):
    """gpu.png: SVMax time against b (d = 128), the mining losses' time and peak memory against
    b; False where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    ok = [r for r in rows if r["status"] == "ok"]
    panels = (
        (axes[0], "svmax", "median_ms", "mean singular value fwd+bwd, ms (d = 128)"),
        (axes[1], "mining", "median_ms", "mining loss fwd+bwd, ms (d = 128)"),
        (axes[2], "mining", "peak_memory_mb", "mining loss peak device memory, MB"),
    )
    for ax, section, field, title in panels:
        series = {}
        for r in ok:
            if r["section"] == section and r.get(field) and (section != "svmax" or r["d"] == 128):
                series.setdefault(f"{r['backend']}: {r['measurement']}", []).append(
                    (r["b"], r[field])
                )
        for label, points in sorted(series.items()):
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size b")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if series:
            ax.legend(fontsize=6)
    device = {r["device"] for r in ok} or {"no device"}
    fig.suptitle(f"tf_svmax on {', '.join(sorted(device))}")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
