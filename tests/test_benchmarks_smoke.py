"""The benchmark programs run end to end on tiny grids (no timing is asserted).

Each runs as `python -m benchmarks.<program>` in a subprocess: absl flags are process-global.
"""

import importlib.util
import json
from pathlib import Path

import pytest

from tests.benchmarks import run_program, run_python

ROOT = Path(__file__).resolve().parents[1]


def _run(program, *flags):
    done = run_program(program, *flags, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_spectral_speed(tmp_path):
    output = tmp_path / "out.json"
    stdout = _run(
        "spectral_speed",
        "--batch_size=12",
        "--embedding_dim=8",
        "--classes_per_batch=3",
        "--repeats=2",
        "--noxla",
        "--notorch",
        f"--output={output}",
    )
    results = json.loads(output.read_text())
    assert set(results["versions"]) >= {"tensorflow", "keras", "tf_svmax"}
    assert "tf_svmax.svmax[gram]" in results["svmax_forward_backward"]
    assert "tf_svmax.ole_loss" in results["ole_forward_backward"]
    assert "scipy" in stdout and "in-graph" in stdout


def test_svd_cost(tmp_path):
    _run(
        "svd_cost",
        "--batch_sizes=8,16",
        # One d: the b sweep the exponent below reads (a d sweep added a third point, a third
        # of the program's compilations, for an exponent in d nothing here checks).
        "--dims=4",
        "--sweep_batch=8",
        "--sweep_dim=4",
        "--dtypes=float32",
        "--modes=function,xla",
        "--repeats=2",
        "--seconds_per_point=0.01",
        f"--output_dir={tmp_path}",
    )
    results = json.loads((tmp_path / "svd_cost.json").read_text())
    paths = {r["path"] for r in results["results"]}
    assert {"tf:gram", "tf:svd", "tf:newton_schulz", "tf:naive", "tf:auto"} <= paths
    assert any(e["exponent_in_b"] is not None for e in results["growth_exponents"])
    assert (tmp_path / "svd_cost.csv").exists()
    assert (tmp_path / "svmax_cost_vs_b_float32.png").stat().st_size > 0


def test_ole_cost(tmp_path):
    _run(
        "ole_cost",
        "--batch_sizes=8,16",
        "--dims=4",
        "--rows_per_class=2",
        "--base_batch=8",
        "--base_dim=4",
        "--base_rows_per_class=2",
        "--repeats=2",
        "--rounds=2",
        "--threads=1",
        f"--output_dir={tmp_path}",
    )
    results = json.loads((tmp_path / "ole_cost.json").read_text())
    assert len(results["speedups"]) == 2
    # Two interleaved rounds, each with its speed-up; single-threaded after the restart.
    assert all(len(point["round_speedups"]) == 2 for point in results["speedups"])
    assert all(len(row["round_medians_ms"]) == 2 for row in results["results"])
    assert results["config"]["threads"] == 1
    assert (tmp_path / "ole_cost_vs_N.png").stat().st_size > 0


def test_step_overhead(tmp_path):
    _run(
        "step_overhead",
        "--backbone=small_cnn",
        "--image_size=16",
        "--batch_sizes=8",
        "--dims=4",
        "--sweep_batch=8",
        "--sweep_dim=4",
        "--repeats=1",
        f"--output_dir={tmp_path}",
    )
    results = json.loads((tmp_path / "step_overhead.json").read_text())
    assert {r["loss"] for r in results["overheads"]} == {"ranking+svmax", "ranking+ole"}


def test_retrieval_eval(tmp_path):
    output = tmp_path / "eval.json"
    _run(
        "retrieval_eval",
        "--num_embeddings=300",
        "--num_classes=60",
        "--dim=16",
        "--ks=1,10",
        "--reference_kmeans",
        "--spot_check_queries=20",
        f"--output={output}",
    )
    results = json.loads(output.read_text())
    assert results["spot_check"] == {"queries": 20, "rank_mismatches": 0}
    assert {"recall_at_1", "recall_at_10", "map_at_r", "nmi"} <= set(results["results"])
    assert results["peak_rss_mb"] > 0 and results["reference_kmeans"]["kmeans_converged"]
    assert results["results"]["kmeans_init"] == "k-means++"
    assert abs(results["reference_kmeans"]["nmi_difference"]) < 0.05
    pml = results["pytorch_metric_learning"]
    installed = all(importlib.util.find_spec(m) for m in ("pytorch_metric_learning", "faiss"))
    assert (pml is not None) == installed
    if installed:  # an independent implementation of the same definitions
        assert abs(pml["differences"]["precision_at_1"]) < 1e-6
        assert abs(pml["differences"]["mean_average_precision_at_r"]) < 1e-6
        assert set(pml["stages"]) == {"neighbors", "nmi"} and pml["peak_rss_mb"] > 0


def test_two_head_overhead(tmp_path):
    stdout = _run(
        "two_head_overhead",
        "--backbones=small_cnn",
        "--modes=softmax,hard,ole",
        "--repeats=1",
        "--num_classes=9",
        f"--output_dir={tmp_path}",
    )
    record = json.loads((tmp_path / "two_head_overhead.json").read_text())
    rows = {r["mode"]: r for r in record["results"]}
    assert rows["softmax"]["overhead_ratio"] == 1.0 and rows["hard"]["median_ms"] > 0
    # The embedding head adds a dense layer from the flattened 4 x 4 x 128 map to 256.
    assert rows["hard"]["parameters"] - rows["softmax"]["parameters"] == 4 * 4 * 128 * 256 + 256
    assert "| small_cnn | hard |" in stdout and "machine" in record


@pytest.mark.parametrize("model", ["dense", "small_cnn"])
def test_gather_overhead(tmp_path, model):
    stdout = _run(
        "gather_overhead",
        "--replicas=1,2",
        "--batches=8",
        "--embedding_dim=4",
        "--repeats=1",
        f"--model={model}",
        f"--output_dir={tmp_path}",
    )
    record = json.loads((tmp_path / "gather_overhead.json").read_text())
    assert record["config"]["model"].startswith({"dense": "Dense(", "small_cnn": "models."}[model])
    modes = {(r["replicas"], r["mode"]) for r in record["results"]}
    assert modes == {(1, "single"), (2, "global"), (2, "per_replica")}
    assert all(r["median_ms"] > 0 for r in record["results"])
    assert "| 2 | 8 | global |" in stdout and "machine" in record


def test_lorac_xml_overhead(tmp_path):
    stdout = _run(
        "lorac_xml_overhead",
        "--batch_sizes=8",
        "--views=3",
        "--queue_size=16",
        "--loss_queue_size=32",
        "--batch_p=4",
        "--repeats=1",
        f"--output_dir={tmp_path}",
    )
    record = json.loads((tmp_path / "lorac_xml_overhead.json").read_text())
    parts = {(r["part"], r["method"]) for r in record["results"]}
    assert ("contrastive step", "lorac") in parts and ("lorac_loss alone", "moco_m") in parts
    assert ("retrieval step", "contrastive") in parts and len(parts) == 6
    assert all(r["median_ms"] > 0 for r in record["results"])
    assert "| contrastive step | lorac | 8 |" in stdout and "machine" in record


def test_xbm_overhead(tmp_path):
    stdout = _run(
        "xbm_overhead",
        "--batches=8",
        "--memory_sizes=0,16",
        "--losses=contrastive_pairs,triplet_semihard",
        "--embedding_dim=4",
        "--repeats=2",
        f"--output_dir={tmp_path}",
    )
    record = json.loads((tmp_path / "xbm_overhead.json").read_text())
    cells = {(r["loss"], r["memory"]): r for r in record["results"]}
    assert set(cells) == {
        (n, m) for n in ("contrastive_pairs", "triplet_semihard") for m in (0, 16)
    }
    assert all(r["median_ms"] > 0 for r in record["results"])
    for name in ("contrastive_pairs", "triplet_semihard"):
        ratio = cells[(name, 16)]["median_ms"] / cells[(name, 0)]["median_ms"]
        assert cells[(name, 16)]["ratio_to_no_memory"] == pytest.approx(ratio)
    assert "| contrastive_pairs | 8 | 16 |" in stdout and "machine" in record


PROGRAMS = (
    "backend_memory",
    "checkpoint_formats",
    "gather_overhead",
    "lorac_xml_overhead",
    "loss_speed_vs_base",
    "mining_memory",
    "ole_cost",
    "retrieval_eval",
    "spectral_speed",
    "step_overhead",
    "svd_cost",
    "two_head_overhead",
    "xbm_overhead",
)


# The backends whose import takes seconds (tf_svmax imports Keras, Keras its backend).
BACKENDS = ("tensorflow", "keras", "jax", "torch")
# `python -m benchmarks.<argv[1]> <argv[2:]>` (runpy runs the module as -m does) that prints, as
# the interpreter exits (atexit handlers run after absl's SystemExit too), the backends imported.
IMPORT_PROBE = f"""
import atexit, runpy, sys
atexit.register(
    lambda: print("imported:", [m for m in {BACKENDS!r} if m in sys.modules], file=sys.stderr)
)
runpy.run_module("benchmarks." + sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""


def run_refusal(program, *flags):
    """`python -m benchmarks.<program> <flags>` through `IMPORT_PROBE`: the `CompletedProcess`
    and the backends the program had imported when it exited."""
    done = run_python("-c", IMPORT_PROBE, program, *flags, timeout=300)
    reports = [line for line in done.stderr.splitlines() if line.startswith("imported: ")]
    assert reports, done.stderr[-2000:]
    return done, reports[-1].removeprefix("imported: ")


@pytest.mark.parametrize(
    "program", (*PROGRAMS, "backend_speed", "gpu", "input_pipeline", "main_job_backends")
)
def test_an_unknown_flag_exits_2_before_any_work(program, tmp_path):
    """Before any work and before TensorFlow, Keras, JAX or torch load (seconds of CPU each)."""
    # absl exits 1 for a flag it cannot parse; 1 means a failed run here.
    done, imported = run_refusal(program, "--no_such_flag=1", f"--output_dir={tmp_path}")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "no_such_flag" in done.stderr and list(tmp_path.iterdir()) == []
    assert imported == "[]", done.stderr[-2000:]


@pytest.mark.parametrize(
    "program, flags",
    [
        ("checkpoint_formats", ("--models=main,x",)),
        ("gather_overhead", ("--replicas=3", "--batches=8")),
        ("input_pipeline", ("--threads=0",)),
        ("lorac_xml_overhead", ("--batch_p=6",)),
        ("backend_speed", ("--isa=avx512",)),
        ("loss_speed_vs_base", (f"--base={ROOT}", "--losses=no_such_loss")),
        ("loss_speed_vs_base", ("--base=/no/such/checkout",)),
        ("ole_cost", ("--batch_sizes=72,0",)),
        ("retrieval_eval", ("--ks=1,x",)),
        ("spectral_speed", ("--batch_size=144", "--classes_per_batch=5")),
        ("step_overhead", ("--batch_sizes=12",)),
        ("svd_cost", ("--modes=function,graph",)),
        ("two_head_overhead", ("--modes=center",)),
        ("xbm_overhead", ("--batches=6",)),
    ],
)
def test_a_refused_value_exits_2(program, flags):
    done, imported = run_refusal(program, *flags)
    assert done.returncode == 2 and imported == "[]", (imported, done.stderr[-2000:])


def test_checkpoint_formats(tmp_path):
    stdout = _run("checkpoint_formats", "--models=main", "--rounds=1", f"--output_dir={tmp_path}")
    record = json.loads((tmp_path / "checkpoint_formats.json").read_text())
    rows = {row["format"]: row for row in record["results"]}
    assert set(rows) == {"tf_train_checkpoint", "keras_weights"} and "machine" in record
    assert rows["keras_weights"]["parameters"] == rows["tf_train_checkpoint"]["parameters"]
    assert "| main | keras_weights |" in stdout


def test_loss_speed_vs_base(tmp_path):
    """Two workers, each importing tf_svmax from its tree (here the same one): the values and
    gradients of the two sides are then bit-identical, and every ratio is recorded."""
    stdout = _run(
        "loss_speed_vs_base",
        f"--base={ROOT}",
        "--losses=lifted_struct,proxy_anchor,contrastive",
        "--shapes=16x8",
        "--rounds=2",
        "--repeats=1",
        "--threads=1",
        f"--output={tmp_path}",
    )
    record = json.loads((tmp_path / "loss_speed_vs_base.json").read_text())
    rows = record["results"]
    assert [r["loss"] for r in rows] == ["lifted_struct", "proxy_anchor", "contrastive"]
    assert all(r["bit_identical"] and r["ratio"] > 0 and len(r["round_ratios"]) == 2 for r in rows)
    assert record["config"]["threads"] == 1 and "load_average_before" in record["config"]
    assert "| lifted_struct | 16x8 | tf.function |" in stdout


def test_backend_speed(tmp_path):
    """One worker process per Keras backend; every row carries its ratio to the PyTorch peer
    timed beside it, per round, and "auto" names the explicit method it took. `--isa=avx2`
    reaches every worker: its libraries report no AVX-512 kernels, and the record says so."""
    stdout = _run(
        "backend_speed",
        "--shapes=12x8",
        "--rounds=2",
        "--repeats=1",
        "--threads=1",
        "--isa=avx2",
        f"--output={tmp_path}",
    )
    results = json.loads((tmp_path / "backend_speed.json").read_text())
    assert set(results["backend_versions"]) == {"tensorflow", "jax", "torch"}
    for backend, versions in results["backend_versions"].items():
        assert versions["keras_backend"] == backend
    rows = {(r["backend"], r["measurement"]): r for r in results["results"]}
    assert ("torch", "torch.linalg.svdvals (autograd)") in rows
    for mode, methods in (
        (("tensorflow", "tf.function"), ("auto", "gram", "svd", "newton_schulz")),
        (("tensorflow", "XLA"), ("auto", "gram", "newton_schulz")),
        (("jax", "jax.jit"), ("auto", "gram", "svd", "newton_schulz")),
        (("torch", "eager"), ("auto", "gram", "svd", "newton_schulz")),
    ):
        for method in methods:
            assert (mode[0], f"tf_svmax.ops.svmax, {mode[1]}, method={method!r}") in rows
    # Outside XLA "auto" is the Gram path on every backend (bit-identical results).
    assert rows[("torch", "tf_svmax.ops.svmax, eager, method='auto'")]["auto_took"] == "gram"
    assert rows[("tensorflow", "tf_svmax.ops.svmax, XLA, method='auto'")]["auto_took"] == (
        "newton_schulz"
    )
    assert all(r["ratio_to_torch_svdvals"] > 0 for r in rows.values())
    peer = ("torch", "torch.linalg.svdvals (autograd)")
    assert all(len(r["round_ratios"]) == 2 for key, r in rows.items() if key != peer)
    assert {r["device"] for r in rows.values()} == {"cpu"}  # CI has no GPU
    config = results["config"]
    assert config["threads"] == 1 and len(config["load_average_1min_per_round"]) == 2
    assert "vector_flags" in (config["cpu"] or {"vector_flags": []})  # None without /proc
    assert "| 12 x 8 | jax | cpu |" in stdout
    # The cap, in the record, the CSV's rows and the table's title.
    assert config["isa"] == "instruction sets capped at AVX2" and "capped at AVX2" in stdout
    assert config["isa_caps"]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert {r["isa"] for r in rows.values()} == {"avx2"}
    assert ",avx2," in (tmp_path / "backend_speed.csv").read_text()
    # What each worker's libraries say they run: nothing above AVX2, whatever this CPU has.
    checked = {b: v["isa_check"] for b, v in results["backend_versions"].items()}
    assert checked["torch"]["torch_cpu_capability"] in ("AVX2", "DEFAULT")
    assert "AVX-512" not in (checked["tensorflow"]["onednn_isa"] or "")
    avx512_cores = {"SkylakeX", "Cooperlake", "SapphireRapids"}
    assert not avx512_cores & set((checked["jax"]["openblas_cores"] or {}).values())
    assert "--xla_cpu_max_isa=AVX2" in checked["jax"]["xla_flags"]


def test_backend_memory(tmp_path):
    """One child process per (backend, loss); a limit below what a backend needs to start kills
    the run, recorded as such."""
    stdout = _run(
        "backend_memory",
        "--losses=semihard,batch_hard",
        "--batch=16",
        "--dim=4",
        "--repeats=1",
        f"--output={tmp_path}",
    )
    results = json.loads((tmp_path / "backend_memory.json").read_text())
    assert set(results["backend_versions"]) == {"tensorflow", "jax", "torch"}
    rows = results["results"]
    assert {(r["backend"], r["loss"]) for r in rows} == {
        (backend, loss)
        for backend in ("tensorflow", "jax", "torch")
        for loss in ("semihard", "batch_hard")
    }
    assert all(r["peak_rss_mb"] >= r["rss_before_step_mb"] > 0 for r in rows)
    assert all(r["under_2gb"] and r["median_ms"] > 0 for r in rows)
    assert [r["tensorflow_imported"] for r in rows if r["backend"] != "tensorflow"] == [False] * 4
    assert "| jax | semihard | 16 x 4 |" in stdout
    done = run_program(
        "backend_memory", "--backends=jax", "--losses=hard", "--batch=8", "--memory_limit_gb=0.05"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| jax | hard | 8 x 128 | resident memory above 0.05 GB |" in done.stdout
    done = run_program("backend_memory", "--batch=6", "--losses=x", timeout=300)
    assert done.returncode == 2 and "`--batch`" in done.stderr and "`--losses`" in done.stderr
