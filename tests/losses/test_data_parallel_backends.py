"""A batch loss under JAX's `keras.distribution.DataParallel` (issue 41, item 4): a `fit` step of
triplet semi-hard + SVMax on 4 host CPU devices equals one device's step on the same global batch
and the float64 NumPy step. DataParallel shards the batch over the devices, but the train step
works on the global array (XLA inserts the collectives), so a loss over pairs of rows sees pairs
that cross the shards, with no gather of ours. The devices exist only in a fresh process
(``XLA_FLAGS`` is read when JAX starts), so the steps run in a subprocess."""

import numpy as np
import pytest

from tests import backends
from tests import reference_spectral as ref
from tests.losses.test_tfa_functions_backends import ref_semihard

pytestmark = pytest.mark.all_backends

B, DIM, OUT, LAMBDA, LR = 16, 6, 4, 0.1, 0.5

# One SGD step of `semihard + LAMBDA * svmax` on `x @ W`, under DataParallel over 4 host CPU
# devices and on one device, from the same weights and global batch (argv: the .npz file):
# prints both losses and kernels.
DATA_PARALLEL = """
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import numpy as np, keras
from tf_svmax.losses import FunctionLoss, RegularizedLoss, SVMaxLoss, triplet_semihard_loss

data = np.load(sys.argv[1])

def step(devices):
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices) if len(devices) > 1 else None
    )
    dim, out = data["w0"].shape
    model = keras.Sequential([keras.Input((dim,)), keras.layers.Dense(out, use_bias=False)])
    model.layers[0].kernel.assign(data["w0"])
    svmax = SVMaxLoss(lambda_=float(data["lam"]))
    loss = RegularizedLoss(FunctionLoss(triplet_semihard_loss), [svmax])
    model.compile(optimizer=keras.optimizers.SGD(float(data["lr"])), loss=loss, jit_compile=True)
    history = model.fit(
        data["x"], data["labels"], batch_size=len(data["x"]), epochs=1, shuffle=False, verbose=0
    )
    return history.history["loss"][0], np.asarray(model.layers[0].kernel).tolist()

devices = keras.distribution.list_devices("cpu")
assert len(devices) == 4, devices
print(json.dumps([step(devices[:1]), step(devices)]))
"""


def _reference_loss(labels, y):
    svmax, _ = ref.svmax_reference(y, ref.original_bounds(*y.shape))
    return ref_semihard(labels, y) + LAMBDA * svmax


@pytest.mark.skipif(backends.BACKEND != "jax", reason="keras.distribution is JAX's here")
def test_semihard_and_svmax_step_on_4_devices_equals_one_device_and_numpy(rng, tmp_path):
    x = rng.standard_normal((B, DIM)).astype(np.float32)
    # 4 classes of 4 rows, shuffled: every device's shard of 4 rows misses positives and
    # negatives that only the global batch has (a per-shard loss would differ).
    labels = rng.permutation(np.repeat(np.arange(4), 4)).astype(np.int32)
    w0 = (rng.standard_normal((DIM, OUT)) * 0.5).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x, labels=labels, w0=w0, lam=LAMBDA, lr=LR)
    (loss_1, kernel_1), (loss_4, kernel_4) = backends.run_script(
        # a fresh process: the script sets XLA_FLAGS before importing Keras
        DATA_PARALLEL,
        tmp_path / "data.npz",
        backend="jax",
        cwd=tmp_path,
        fresh=True,
    )
    # The 4-device step is the one-device step.
    assert loss_4 == pytest.approx(loss_1, rel=1e-6)
    np.testing.assert_allclose(kernel_4, kernel_1, rtol=1e-6, atol=1e-7)
    # Both are the float64 NumPy step: W - lr * x^T dL/dy (dL/dy by central differences of the
    # reference, away from the semi-hard selection's kinks at these random rows).
    y = x.astype(np.float64) @ w0
    expected_loss = _reference_loss(labels, y)
    shard_losses = [_reference_loss(labels[i : i + 4], y[i : i + 4]) for i in range(0, B, 4)]
    assert not np.isclose(np.mean(shard_losses), expected_loss, rtol=1e-3)  # the test can fail
    backends.assert_close(loss_4, expected_loss, backends.RTOL32)
    d_y = backends.numpy_gradient(lambda e: _reference_loss(labels, e), y)
    step = np.asarray(kernel_4) - w0
    backends.assert_close(step, -LR * x.T.astype(np.float64) @ d_y, 1e-4)
