"""`--strategy` / `--cpu_devices` in the trainers (each run in its own process: logical CPU
devices must be set before TensorFlow starts).

A mirrored run on 2 logical CPUs must take the steps a default run takes on the same global
batches (the trace's per-step losses and the held-out s_mu agree), record its strategy, and a run
interrupted under one strategy resumes under the other. Under multi_worker, two worker processes
on 127.0.0.1 (TF_CONFIG, free ports) must take the steps of one process, resume after one of
them is killed, and stop together on a refusal or a cluster that cannot be reached.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.cluster import finish, free_ports, tf_config
from trainers.harness import distribute
from trainers.harness.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def _train(program, output_dir, *flags):
    done = subprocess.run(
        [sys.executable, "-m", f"trainers.{program}", f"--output_dir={output_dir}", "--verbose=0"]
        + list(flags),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        | {"TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return done


def _results(output_dir):
    return json.loads((Path(output_dir) / "results.json").read_text())


def _assert_same_steps(a, b, rel):
    losses_a = [t["loss"] for t in a["trace"]]
    losses_b = [t["loss"] for t in b["trace"]]
    assert len(losses_a) == len(losses_b) == 4
    assert losses_a == pytest.approx(losses_b, rel=rel)
    # Training moved the loss: agreement is not that of an idle model.
    assert abs(losses_a[-1] - losses_a[0]) > 100 * rel * abs(losses_a[0])
    assert a["evaluations"][-1]["s_mu"] == pytest.approx(b["evaluations"][-1]["s_mu"], rel=rel)


def test_mirrored_retrieval_run_equals_the_default_run_and_resumes_across_strategies(tmp_path):
    common = [
        "--dataset=digits",  # the strategy's path, not the data, is under test: the small set
        "--train_steps=4",
        "--eval_every=2",
        "--trace_every=1",
        "--noevaluate_untrained",
    ]
    mirrored, single = tmp_path / "mirrored", tmp_path / "single"
    done = _train("train_retrieval", mirrored, "--strategy=mirrored", "--cpu_devices=2", *common)
    assert done.returncode == 0, done.stderr[-3000:]
    done = _train("train_retrieval", single, *common)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = _results(mirrored), _results(single)
    assert a["distribution"]["strategy"] == "mirrored" and a["distribution"]["replicas"] == 2
    assert b["distribution"] == {"strategy": "default", "replicas": 1, "devices": []}
    _assert_same_steps(a, b, rel=1e-4)

    # Lose the mirrored run's last checkpoint: the default strategy resumes it at step 2.
    checkpoints = mirrored / "checkpoints"
    removed = list(checkpoints.glob("ckpt-4.*"))
    assert removed
    for path in removed:
        path.unlink()
    done = _train("train_retrieval", mirrored, *common)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = _results(mirrored)
    assert resumed["resumed_at_steps"] == [2]
    assert resumed["distribution"]["strategy"] == "default"
    _assert_same_steps(resumed, b, rel=1e-4)


def test_mirrored_two_head_center_loss_equals_the_default_run(tmp_path):
    """The center loss's moving centers and the backbone's (synchronized) batch norm see the
    global batch under the strategy."""
    common = [
        "--dataset=digits",  # the strategy's path, not the data, is under test: the small set
        "--mode=center",
        "--train_steps=4",
        "--eval_every=2",
        "--trace_every=1",
        "--noevaluate_untrained",
    ]
    mirrored, single = tmp_path / "mirrored", tmp_path / "single"
    done = _train("train_two_head", mirrored, "--strategy=mirrored", "--cpu_devices=2", *common)
    assert done.returncode == 0, done.stderr[-3000:]
    done = _train("train_two_head", single, *common)
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_same_steps(_results(mirrored), _results(single), rel=1e-4)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--strategy=multi_worker"], "needs the TF_CONFIG environment variable"),
        (["--strategy=multi_worker", "--jit_compile"], "XLA cannot compile the step's"),
        (["--cpu_devices=2"], "--cpu_devices=2 needs --strategy=mirrored"),
        (["--strategy=mirrored", "--cpu_devices=5"], "must split evenly across the 5 replicas"),
        (["--cpu_devices=-1"], "--cpu_devices"),
    ],
)
def test_impossible_strategy_flags_are_refused_with_exit_2(tmp_path, flags, message):
    done = _train("train_retrieval", tmp_path / "run", "--train_steps=2", "--eval_every=2", *flags)
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_single_replica_batches_pass_through():
    import tensorflow as tf

    dataset = tf.data.Dataset.range(4)
    assert distribute.replica_batches(tf.distribute.get_strategy(), lambda: dataset, 4) is dataset
    with pytest.raises(ConfigError, match="--cpu_devices=3 needs --strategy=mirrored"):
        distribute.default_strategy(3)


# --- multi_worker: two worker processes on 127.0.0.1 -------------------------------------------


def _start_worker(program, output_dir, ports, index, *flags):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": tf_config(ports, index)}
    return subprocess.Popen(
        [sys.executable, "-m", f"trainers.{program}", f"--output_dir={output_dir}", "--verbose=0"]
        + ["--strategy=multi_worker", *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _train_on_two_workers(program, output_dir, *flags):
    ports = free_ports(2)
    workers = [_start_worker(program, output_dir, ports, i, *flags) for i in range(2)]
    return [finish(w) for w in workers]


def _worker_folders(program):
    return set(Path(tempfile.gettempdir()).glob(f"{program}-worker-*"))


def _assert_same_trace(a, b, rel):
    losses_a = [t["loss"] for t in a["trace"]]
    losses_b = [t["loss"] for t in b["trace"]]
    assert [t["step"] for t in a["trace"]] == [t["step"] for t in b["trace"]]
    assert losses_a == pytest.approx(losses_b, rel=rel)
    assert abs(losses_a[-1] - losses_a[0]) > 10 * rel * abs(losses_a[0])  # training moved it
    assert [e["step"] for e in a["evaluations"]] == [e["step"] for e in b["evaluations"]]


def test_two_workers_train_retrieval_like_one_process_and_resume_after_a_sigkill(tmp_path):
    """24 steps on the glyph set (its evaluations give the kill time to land between the first
    checkpoint and the end; digits would race it): the trace of two workers (each half of every
    P x K batch) equals a one-process run's; a worker killed with SIGKILL after the first
    checkpoint leaves it intact, the chief fails (exit 1) in bounded time, and the same command
    on both resumes from it and ends on the uninterrupted trace."""
    common = ["--train_steps=24", "--eval_every=6", "--trace_every=3", "--noevaluate_untrained"]
    single, cluster = tmp_path / "single", tmp_path / "cluster"
    done = _train("train_retrieval", single, *common)
    assert done.returncode == 0, done.stderr[-3000:]

    ports = free_ports(2)
    workers = [_start_worker("train_retrieval", cluster, ports, i, *common) for i in range(2)]
    first = cluster / "checkpoints" / "ckpt-6.json"
    deadline = time.monotonic() + 600
    while not first.exists() and time.monotonic() < deadline and workers[1].poll() is None:
        time.sleep(0.2)
    assert first.exists(), finish(workers[0])[1][-3000:]
    workers[1].kill()  # SIGKILL: no handler runs
    code, stderr = finish(workers[0], timeout=300)
    finish(workers[1])
    assert code == 1, stderr[-3000:]
    assert "A worker of the cluster was lost" in stderr
    assert "run the same command on every worker" in stderr
    interrupted = _results(cluster)
    assert interrupted["status"] == "failed"
    assert interrupted["evaluations"][0]["step"] == 6

    before = _worker_folders("train_retrieval")  # the killed worker's is left behind
    for code, stderr in _train_on_two_workers("train_retrieval", cluster, *common):
        assert code == 0, stderr[-3000:]
    resumed, reference = _results(cluster), _results(single)
    assert resumed["status"] == "completed"
    assert resumed["resumed_at_steps"] == [6]
    assert resumed["distribution"]["strategy"] == "multi_worker"
    assert resumed["distribution"]["replicas"] == 2
    assert resumed["distribution"]["workers"] == {"worker": 2}
    _assert_same_trace(resumed, reference, rel=1e-3)
    # The chief evaluated (once per interval) what one process evaluates.
    for key in ("s_mu", "recall_at_1", "nmi"):
        got = [e[key] for e in resumed["evaluations"]]
        assert got == pytest.approx([e[key] for e in reference["evaluations"]], rel=1e-2, abs=1e-2)
    assert (cluster / "embedding_model.keras").exists()
    assert _worker_folders("train_retrieval") == before  # the other worker kept nothing


def test_two_workers_train_two_head_with_center_loss_like_one_process(tmp_path):
    """The loss dict, the center loss's moving centers (non-trainable state, checkpointed) and
    the backbone's batch norm on two workers."""
    common = [
        "--dataset=digits",
        "--backbone=small_cnn_bn",
        "--mode=center",
        "--train_steps=8",
        "--eval_every=4",
        "--trace_every=2",
        "--noevaluate_untrained",
    ]
    single, cluster = tmp_path / "single", tmp_path / "cluster"
    for code, stderr in _train_on_two_workers("train_two_head", cluster, *common):
        assert code == 0, stderr[-3000:]
    done = _train("train_two_head", single, *common)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = _results(cluster), _results(single)
    assert a["distribution"]["strategy"] == "multi_worker"
    _assert_same_trace(a, b, rel=1e-3)
    for key in ("accuracy", "recall_at_1"):
        got = [e[key] for e in a["evaluations"]]
        assert got == pytest.approx([e[key] for e in b["evaluations"]], abs=1e-2)


def test_a_refusal_on_the_chief_stops_every_worker(tmp_path):
    """The chief refuses an --output_dir holding another configuration; the other worker, which
    has nothing to refuse, stops too (exit 2) instead of waiting for it for ever."""
    common = ["--train_steps=2", "--eval_every=2", "--noevaluate_untrained"]
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    (cluster / "config.json").write_text(json.dumps({"seed": 12345}))
    (code0, err0), (code1, err1) = _train_on_two_workers("train_retrieval", cluster, *common)
    assert code0 == 2 and "different configuration" in err0, err0[-3000:]
    assert code1 == 2 and "another worker of the cluster refused" in err1, err1[-3000:]


def test_workers_started_with_different_flags_are_all_refused_naming_the_flags(tmp_path):
    """Every worker must train the chief's configuration: two workers started with different
    --seed and --train_steps both refuse (exit 2) naming those flags, and nothing is trained
    or recorded as completed."""
    ports = free_ports(2)
    cluster = tmp_path / "cluster"
    common = ["--dataset=digits", "--eval_every=2", "--noevaluate_untrained"]
    workers = [
        _start_worker("train_retrieval", cluster, ports, 0, *common, "--seed=0", "--train_steps=4"),
        _start_worker("train_retrieval", cluster, ports, 1, *common, "--seed=7", "--train_steps=6"),
    ]
    for code, stderr in [finish(w) for w in workers]:
        assert code == 2, stderr[-3000:]
        assert "--seed" in stderr and "--train_steps" in stderr, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
    assert not (cluster / "results.json").exists()
    assert not list((cluster / "checkpoints").glob("ckpt-*"))


def test_a_worker_that_cannot_reach_its_cluster_fails_in_bounded_time_naming_tf_config(tmp_path):
    ports = free_ports(2)
    started = time.monotonic()
    worker = _start_worker(
        "train_retrieval", tmp_path / "run", ports, 1, "--train_steps=2", "--cluster_timeout=3"
    )
    code, stderr = finish(worker, timeout=300)
    assert code == -9, stderr[-3000:]  # SIGKILL: TensorFlow's join cannot be interrupted
    assert "TF_CONFIG" in stderr and "--cluster_timeout=3 s" in stderr
    assert time.monotonic() - started < 240
    assert not (tmp_path / "run").exists()  # nothing was written


@pytest.mark.parametrize(
    "value, message",
    [
        (None, "needs the TF_CONFIG environment variable"),
        ("{not json", "TF_CONFIG is not valid JSON"),
        ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}', "'cluster' must map"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}', "'task'"),
        ('{"cluster": {"worker": ["a:1"]}}', "'task' must name"),
    ],
)
def test_a_bad_tf_config_is_refused_naming_it(monkeypatch, value, message):
    if value is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", value)
    with pytest.raises(ConfigError, match=re.escape(message)):
        distribute.cluster_from_environment()


def test_a_valid_tf_config_gives_its_cluster_and_task(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", tf_config([1234, 1235], 1))
    cluster, task = distribute.cluster_from_environment()
    assert cluster == {"worker": ["127.0.0.1:1234", "127.0.0.1:1235"]}
    assert task == {"type": "worker", "index": 1}
