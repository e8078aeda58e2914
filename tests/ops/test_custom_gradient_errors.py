"""An error inside the forward of one of the library's custom gradients surfaces as that error on
every backend, never as NaN gradients (issue 41's PyTorch trap).

Keras 3.15's PyTorch `custom_gradient` (`backend/torch/core.py`, `CustomGradientFunction`) runs
the forward in a bare ``try``/``except``: when the forward raises, it calls it again and, if that
second call returns, uses a gradient function that returns NaN. Our forwards are deterministic
and always return ``(value, grad)``, so the second call raises the same error; these tests pin it
for each custom gradient of `tf_svmax.ops` by making a step inside the forward fail."""

import warnings

import numpy as np
import pytest

from tests import backends
from tf_svmax import _backend
from tf_svmax.ops import ole, spectral

pytestmark = pytest.mark.all_backends


class Boom(RuntimeError):
    pass


def _boom(*args, **kwargs):
    raise Boom("inside the forward")


def _value_and_grad(fn, x):
    """The value and gradient of `fn` at `x`, eagerly (the errors below must stop them)."""
    return backends.value_and_grad(fn, x)


@pytest.mark.parametrize(
    ("patched", "fn"),
    [
        ("_guarded_factors", lambda x: spectral.nuclear_norm(x, method="gram")),
        ("_guarded_factors", lambda x: spectral.nuclear_norm(x, method="svd")),
        ("_guarded_factors", lambda x: spectral.singular_values(x, method="gram")[0]),
        ("polar_newton_schulz", lambda x: spectral.nuclear_norm(x, method="newton_schulz")),
    ],
    ids=["nuclear-gram", "nuclear-svd", "singular-values", "nuclear-newton-schulz"],
)
def test_a_spectral_forward_error_surfaces(rng, monkeypatch, patched, fn):
    x = rng.standard_normal((6, 3)).astype(np.float32)
    monkeypatch.setattr(spectral, patched, _boom)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # Newton-Schulz outside XLA is slow
        with pytest.raises(Boom, match="inside the forward"):
            _value_and_grad(fn, x)


def test_an_ole_forward_error_surfaces(rng, monkeypatch):
    x = rng.standard_normal((8, 3)).astype(np.float32)
    labels = np.repeat(np.arange(2), 4).astype(np.int32)
    monkeypatch.setattr(_backend, "class_layout", _boom)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # JAX without x64: OLE in float32
        with pytest.raises(Boom, match="inside the forward"):
            _value_and_grad(lambda e: ole.ole_loss(labels, e), x)


def test_a_forward_that_fails_once_is_not_a_nan_gradient(rng, monkeypatch):
    """The one way a retry could succeed: a failure on the first call only. The error still
    surfaces (Keras' PyTorch retry then returns a ``(value, grad)`` pair as the value, which it
    cannot convert), and the gradients are never NaN."""
    x = rng.standard_normal((6, 3)).astype(np.float32)
    original, calls = spectral._guarded_factors, []

    def fails_once(*args):
        calls.append(1)
        if len(calls) == 1:
            raise Boom("first call")
        return original(*args)

    monkeypatch.setattr(spectral, "_guarded_factors", fails_once)
    with pytest.raises(Exception) as caught:  # noqa: PT011 (the type differs per backend)
        _value_and_grad(lambda e: spectral.nuclear_norm(e, method="gram"), x)
    assert isinstance(caught.value, (Boom, ValueError, TypeError)), caught.value
