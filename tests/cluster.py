"""Helpers for tests that start a MultiWorkerMirroredStrategy cluster on 127.0.0.1."""

import json
import socket


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
