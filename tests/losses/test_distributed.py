"""Batch-level losses under tf.distribute.MirroredStrategy on two logical CPUs.

Runs in a subprocess: logical devices must be configured before TensorFlow initializes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = r"""
import os, json
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tf_svmax import losses
from tests import reference_ranking as rr

rng = np.random.default_rng(0)
x = rng.standard_normal((34, 6)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
y = np.repeat(np.arange(17), 2)
out = {}

def model_in(strategy):
    with strategy.scope():
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(
            4, use_bias=False, kernel_initializer="ones")])

def strategy(replicas):
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"][:replicas])

# 1. Per-replica batch losses are averaged: the update size does not grow with replicas.
for name, make in (("svmax", losses.SVMaxLoss), ("triplet", losses.TripletHardLoss),
                   ("batch_hard", losses.BatchHardTripletLoss)):
    for replicas in (1, 2):
        s = strategy(replicas)
        model = model_in(s)
        with s.scope():
            model.compile(keras.optimizers.SGD(0.1), loss=make())
        batch = 16 * replicas
        before = model.get_weights()[0].copy()
        model.fit(x[:batch], y[:batch], batch_size=batch, epochs=1, shuffle=False, verbose=0)
        out[f"update/{name}/{replicas}"] = float(np.abs(model.get_weights()[0] - before).sum())

# 2. Center loss: one device updates from the whole batch; two replicas are refused.
s = strategy(1)
model = model_in(s)
with s.scope():
    loss = losses.CenterLoss(num_classes=17, embedding_dim=4, lambda_=1.0, seed=0)
    model.compile(keras.optimizers.SGD(0.0), loss=loss)
initial = loss.centers.numpy().copy()
features = model.predict(x[:16], verbose=0)
_, expected = rr.center(features, y[:16], initial, 0.5, 1.0)
model.fit(x[:16], y[:16], batch_size=16, epochs=1, shuffle=False, verbose=0)
out["center/1"] = float(np.abs(loss.centers.numpy() - expected).max())
s = strategy(2)
model = model_in(s)
with s.scope():
    model.compile("sgd", loss=losses.CenterLoss(num_classes=17, embedding_dim=4))
try:
    model.fit(x[:16], y[:16], batch_size=16, epochs=1, verbose=0)
    out["center/2"] = "no error"
except Exception as error:  # the refusal surfaces from inside fit
    out["center/2"] = str(error)

# 3. An uneven last batch (one replica gets no rows) gives finite losses.
for name, make in (("batch_hard", losses.BatchHardTripletLoss), ("triplet", losses.TripletHardLoss),
                   ("spread_out", lambda: losses.SpreadOutLoss(seed=0))):
    s = strategy(2)
    model = model_in(s)
    with s.scope():
        model.compile(keras.optimizers.SGD(0.01), loss=make())
    history = model.fit(x[:17], y[:17], batch_size=16, epochs=1, shuffle=False, verbose=0)
    out[f"uneven/{name}"] = float(history.history["loss"][0])
print(json.dumps(out))
"""


def test_mirrored_strategy_semantics(tmp_path):
    script = tmp_path / "distributed.py"
    script.write_text(_SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("svmax", "triplet", "batch_hard"):
        ratio = out[f"update/{name}/2"] / out[f"update/{name}/1"]
        # Averaged over replicas the update stays about the size of one replica's (it would
        # double if every replica's loss counted in full).
        assert 0.5 < ratio < 1.5, (name, out)
    assert out["center/1"] < 1e-5, out
    assert "does not support tf.distribute" in out["center/2"], out
    for name in ("batch_hard", "triplet", "spread_out"):
        assert out[f"uneven/{name}"] == out[f"uneven/{name}"], (name, out)  # not NaN
