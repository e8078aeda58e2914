"""Writes the PyTorch original's training iterations for tests/trainers/test_train_gan_mog.py.

The SVMax paper's GAN (Fig. 3) is andrewliao11/unrolled-gans @ 7e68a04 (`unrolled_gan.ipynb`:
`d_loop`, `d_unrolled_loop`, `g_loop`) with lr 0.025 and SVMax on the generator's loss. CI
installs no torch, so this runs by hand where torch is installed:

    python -m tests.trainers.make_unrolled_gan_golden          # (re)writes golden/unrolled_gan.npz
    python -m tests.trainers.make_unrolled_gan_golden --check  # recomputes; fails unless equal

and the test suite runs `trainers.gan_mog` (`RingGAN` in `trainers/gan_mog/model.py`) from the same
initial weights on the same batches.
This file imports only numpy and torch, never tensorflow or tf_svmax. It re-states the
notebook's semantics (not its code):

- an iteration is one discriminator step on a real batch and D(G(noise_d)) (G without gradient),
  then the generator step on noise_g;
- unrolled (K > 0): the discriminator is copied, then takes K more steps, step j on a *fresh*
  real batch and on G(noise_g) (without gradient), with the real Adam (its moments and step
  count advance); the generator's loss BCE(D_K(G(noise_g)), 1) is differentiated with D_K's
  weights as constants (the optimizer's in-place update is not differentiable); then only the
  weights are restored (`D.load(backup)` copies `.data`; the Adam state is not restored);
- the generator's loss with SVMax: ``BCE - lambda * mean(singular values of G(noise_g))``;
- Adam in PyTorch 0.4's form, which the original's README pins: ``step = lr * sqrt(1 - b2^t)
  / (1 - b1^t)``, ``p -= step * m / (sqrt(v) + eps)`` (today's torch.optim.Adam adds eps after
  the bias correction: it differs from the first step on);
- `nn.BCELoss` on `sigmoid`, as the original (no saturation at these weights: the logits stay
  small, `_check_not_saturated`).

What it stores, per setting in `SETTINGS` (float32 inputs kept as float32):
``<setting>/g_init/<i>``, ``<setting>/d_init/<i>`` (Keras layout: kernels [in, out]), the
batches ``real`` [T, b, 2], ``noise_d``, ``noise_g`` [T, b, z], ``unroll_real`` [T, K, b, 2],
and after T iterations ``g/<i>``, ``d/<i>``, the discriminator's Adam ``d_m/<i>``, ``d_v/<i>``,
``d_t``; ``__meta__``: JSON of the versions and settings.
"""

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

GOLDEN = Path(__file__).resolve().parent / "golden" / "unrolled_gan.npz"
SEED = 2024
SIZES = {"batch": 32, "noise_dim": 8, "hidden": 16, "iterations": 3}
LR, BETAS, EPS = 0.025, (0.5, 0.999), 1e-8
SETTINGS = {
    "vanilla": {"unroll_steps": 0, "svmax_lambda": 0.0},
    "unrolled": {"unroll_steps": 3, "svmax_lambda": 0.0},
    "unrolled_svmax": {"unroll_steps": 3, "svmax_lambda": 0.5},
}


class Adam04(torch.optim.Optimizer):
    """PyTorch 0.4's Adam (eps added to sqrt(v) before the bias correction's step size)."""

    def __init__(self, params):
        super().__init__(params, dict(lr=LR, betas=BETAS, eps=EPS))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["step"] += 1
                g = p.grad.detach()
                state["m"].mul_(b1).add_((1 - b1) * g)
                state["v"].mul_(b2).add_((1 - b2) * g * g)
                t = state["step"]
                size = group["lr"] * math.sqrt(1 - b2**t) / (1 - b1**t)
                p.sub_(size * state["m"] / (state["v"].sqrt() + group["eps"]))


def mlp(layers, x, activation, sigmoid=False):
    """Two hidden layers and a linear output; `layers` are (weight [out, in], bias) pairs."""
    for i, (w, b) in enumerate(layers):
        x = F.linear(x, w, b)
        if i < len(layers) - 1:
            x = activation(x)
    return torch.sigmoid(x) if sigmoid else x


def _torch_layers(keras_weights):
    """Keras' [kernel [in, out], bias, ...] as torch Parameters (weight [out, in], bias)."""
    out = []
    for k, b in zip(keras_weights[::2], keras_weights[1::2], strict=True):
        out.append(
            (
                torch.nn.Parameter(torch.tensor(k.T.copy())),
                torch.nn.Parameter(torch.tensor(b.copy())),
            )
        )
    return out


def _init(rng, fan_in, fan_out):
    """nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias."""
    limit = 1.0 / math.sqrt(fan_in)
    return (
        rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32),
        rng.uniform(-limit, limit, fan_out).astype(np.float32),
    )


def _check_not_saturated(logits):
    # BCELoss clamps log at -100 and sigmoid rounds to 1.0 past a logit of ~16.6: there the
    # original's gradient vanishes and the softplus form's does not. Not at these weights.
    largest = float(logits.detach().abs().max())
    assert largest < 10.0, largest


def run(setting, rng):
    z, h, b, iters = (SIZES[k] for k in ("noise_dim", "hidden", "batch", "iterations"))
    k_steps, lam = setting["unroll_steps"], setting["svmax_lambda"]
    g_init = [a for pair in (_init(rng, z, h), _init(rng, h, h), _init(rng, h, 2)) for a in pair]
    d_init = [a for pair in (_init(rng, 2, h), _init(rng, h, h), _init(rng, h, 1)) for a in pair]
    real = rng.normal(size=(iters, b, 2)).astype(np.float32)
    noise_d = rng.normal(size=(iters, b, z)).astype(np.float32)
    noise_g = rng.normal(size=(iters, b, z)).astype(np.float32)
    unroll_real = rng.normal(size=(iters, k_steps, b, 2)).astype(np.float32)
    g_layers, d_layers = _torch_layers(g_init), _torch_layers(d_init)
    g_params = [p for pair in g_layers for p in pair]
    d_params = [p for pair in d_layers for p in pair]
    g_opt, d_opt = Adam04(g_params), Adam04(d_params)

    def G(x):
        return mlp(g_layers, x, torch.tanh)

    def D(x):
        logits = mlp(d_layers, x, torch.relu)
        _check_not_saturated(logits)
        return torch.sigmoid(logits)

    def d_step(real_batch, noise):
        d_opt.zero_grad()
        with torch.no_grad():
            fake = G(torch.tensor(noise))
        real_out, fake_out = D(torch.tensor(real_batch)), D(fake)
        loss = F.binary_cross_entropy(real_out, torch.ones_like(real_out))
        loss = loss + F.binary_cross_entropy(fake_out, torch.zeros_like(fake_out))
        loss.backward()
        d_opt.step()

    for t in range(iters):
        d_step(real[t], noise_d[t])
        g_opt.zero_grad()
        backup = [p.detach().clone() for p in d_params]
        for j in range(k_steps):
            d_step(unroll_real[t, j], noise_g[t])  # the unroll: the real optimizer advances
        fake = G(torch.tensor(noise_g[t]))
        out = D(fake)
        loss = F.binary_cross_entropy(out, torch.ones_like(out))
        if lam:
            loss = loss - lam * torch.linalg.svdvals(fake).mean()
        loss.backward()
        g_opt.step()
        with torch.no_grad():  # weights only, as D.load(backup)
            for p, saved in zip(d_params, backup, strict=True):
                p.copy_(saved)

    def keras_layout(layers):
        return [
            a for w, bias in layers for a in (w.detach().numpy().T.copy(), bias.detach().numpy())
        ]

    d_state = [d_opt.state[p] for p in d_params]
    out = {"g_init": g_init, "d_init": d_init}
    out.update(real=real, noise_d=noise_d, noise_g=noise_g, unroll_real=unroll_real)
    out["g"], out["d"] = keras_layout(g_layers), keras_layout(d_layers)
    # The moments in Keras' layout too (kernels transposed).
    out["d_m"] = [s["m"].numpy().T.copy() for s in d_state]
    out["d_v"] = [s["v"].numpy().T.copy() for s in d_state]
    out["d_t"] = np.array(d_state[0]["step"], np.int64)
    return out


def compute():
    rng = np.random.default_rng(SEED)
    arrays = {}
    for name, setting in SETTINGS.items():
        for key, value in run(setting, rng).items():
            if isinstance(value, list):
                for i, a in enumerate(value):
                    arrays[f"{name}/{key}/{i}"] = a
            else:
                arrays[f"{name}/{key}"] = value
    meta = dict(
        torch=torch.__version__,
        numpy=np.__version__,
        seed=SEED,
        sizes=SIZES,
        learning_rate=LR,
        betas=BETAS,
        epsilon=EPS,
        settings=SETTINGS,
        original="andrewliao11/unrolled-gans @ 7e68a04cd57a06d0a8d30eda37baec91cd7ef570",
    )
    arrays["__meta__"] = np.array(json.dumps(meta))
    return arrays


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Compare with the stored file.")
    args = parser.parse_args(argv)
    torch.set_default_dtype(torch.float32)
    arrays = compute()
    if args.check:
        with np.load(GOLDEN) as stored:
            bad = [
                k
                for k in arrays
                if k != "__meta__" and not np.allclose(stored[k], arrays[k], rtol=1e-6, atol=1e-7)
            ]
        if bad:
            print(f"differs from {GOLDEN}: {', '.join(bad[:5])}", file=sys.stderr)
            return 1
        print(f"{GOLDEN}: {len(arrays) - 1} arrays equal")
        return 0
    GOLDEN.parent.mkdir(exist_ok=True)
    np.savez_compressed(GOLDEN, **arrays)
    print(f"wrote {GOLDEN} ({len(arrays) - 1} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
