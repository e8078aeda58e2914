"""Helpers for tests that start a MultiWorkerMirroredStrategy cluster on 127.0.0.1."""

import json
import socket
import subprocess


def free_ports(count):
    """`count` TCP ports free on 127.0.0.1 now (the OS picks them)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tf_config(ports, index):
    """The TF_CONFIG of worker `index` in a cluster of one worker per port on 127.0.0.1."""
    return json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
            "task": {"type": "worker", "index": index},
        }
    )


def finish(process, timeout=600):
    """``(returncode, stderr)`` of a `subprocess.Popen` with text pipes; a process that outlives
    `timeout` seconds is killed and the test fails with its stderr (no hang)."""
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        raise AssertionError(f"timed out after {timeout} s:\n{stderr[-3000:]}") from None
    return process.returncode, stderr
