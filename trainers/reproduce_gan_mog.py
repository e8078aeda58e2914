"""SVMax paper Fig. 3 on the ring of 8 Gaussians, over seeds, plus a sweep of learning rate x
SVMax weight x generator activation to find where the GAN collapses and whether SVMax changes it.

    python -m trainers.reproduce_gan_mog --table=docs/gan_mog.md          # 20 + 18 runs
    python -m trainers.reproduce_gan_mog --seeds=0 --sweep_seeds= --train_steps=300 \\
        --table=/tmp/quick.md                                             # a smoke run

Fig. 3's rows: vanilla, vanilla + SVMax, unrolled, unrolled + SVMax (`trainers.gan_mog`
defaults: the paper's lr 0.025, tanh generator, SVMax lambda 0.01, 5 unrolled steps, the
original code's unroll: surrogate gradient, a fresh real batch per unrolled update, the
discriminator's Adam state advanced by the unroll) over --seeds. The sweep (vanilla) crosses
--sweep_learning_rates x --sweep_lambdas x --sweep_activations over --sweep_seeds. Every run
lives in its own folder under --output_dir, named by every setting that differs between runs
(``vanilla_<activation>_lr<lr>_lambda<lambda>_seed<seed>``; unrolled runs add
``_<gradient>_u<K>_<real>_<adam state>``; ``--mixture=random`` adds ``_mix<seed>``);
re-running resumes unfinished runs and reuses finished ones, and a sweep cell equal to a Fig. 3
cell reuses its runs.
Writes the table (mean ± std of modes covered, high-quality fraction and mode KL after the last
step, and the median ms per step), ``<table>.png`` (the heat-map grid: rows = Fig. 3 variants
for the first seed, columns = evaluation steps, last = the target) and ``<table>.json``.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from absl import flags, logging  # noqa: E402

from tf_svmax import data, records  # noqa: E402
from trainers import gan_mog  # noqa: E402
from trainers.harness import flags as harness_flags  # noqa: E402
from trainers.harness.plots import pyplot, save_figure  # noqa: E402
from trainers.harness.tables import mean_std  # noqa: E402

FLAGS = flags.FLAGS
harness_flags.define_flags(
    gan_mog.GanConfig,
    only=("output_dir", "train_steps", "eval_every", "learning_rate", "mixture", "mixture_seed"),
    defaults={"output_dir": "runs/gan_mog_table"},
    help_overrides={"output_dir": "Parent folder of the runs (one folder per run)."},
)
flags.adopt_module_key_flags(harness_flags)
flags.DEFINE_list("seeds", ["0", "1", "2", "3", "4"], "Seeds of the Fig. 3 rows.")
flags.DEFINE_float("svmax_lambda", gan_mog.PAPER_SVMAX_LAMBDA, "SVMax weight of the + SVMax rows.")
flags.DEFINE_integer(
    "unrolled_rows_steps",
    gan_mog.PAPER_UNROLL_STEPS,
    f"The unrolled rows' discriminator updates (paper: {gan_mog.PAPER_UNROLL_STEPS}; the "
    f"original notebook: {gan_mog.NOTEBOOK_UNROLL_STEPS}).",
    lower_bound=1,
)
flags.DEFINE_enum(
    "unrolled_rows_gradient",
    "surrogate",
    list(gan_mog.UNROLL_GRADIENTS),
    "The unrolled rows' gradient: surrogate (the PyTorch code the paper used) or through the "
    "updates (Metz et al.).",
)
flags.DEFINE_enum(
    "unrolled_rows_real",
    "fresh",
    list(gan_mog.UNROLL_REAL),
    "The unrolled rows' real batches: fresh per unrolled update (the original) or reused.",
)
flags.DEFINE_enum(
    "unrolled_rows_adam_state",
    "advance",
    list(gan_mog.UNROLL_ADAM_STATE),
    "The unrolled rows' discriminator Adam state: advanced by the unroll (the original) or a "
    "discarded copy (Metz et al.).",
)
flags.DEFINE_list("sweep_learning_rates", ["0.0025", "0.025", "0.1"], "Sweep: learning rates.")
flags.DEFINE_list("sweep_lambdas", ["0", "0.01", "0.1"], "Sweep: SVMax weights.")
flags.DEFINE_list("sweep_activations", ["tanh", "relu"], "Sweep: generator activations.")
flags.DEFINE_list("sweep_seeds", ["0"], "Sweep seeds (empty: no sweep).")
flags.DEFINE_string("table", None, "Markdown output (default: <output_dir>/gan_mog.md).")

PROGRAM = "reproduce_gan_mog"


def fig3_rows(svmax_lambda, unroll_steps, unroll_gradient, unroll_real, unroll_adam_state):
    """``(label, overrides)`` of the paper's four rows."""
    unrolled = dict(
        variant="unrolled",
        unroll_steps=unroll_steps,
        unroll_gradient=unroll_gradient,
        unroll_real=unroll_real,
        unroll_adam_state=unroll_adam_state,
    )
    how = f"{unroll_steps} steps, {unroll_gradient}, {unroll_real} real, Adam {unroll_adam_state}"
    return [
        ("vanilla", dict(variant="vanilla", svmax_lambda=0.0)),
        (
            f"vanilla + SVMax (λ {svmax_lambda:g})",
            dict(variant="vanilla", svmax_lambda=svmax_lambda),
        ),
        (f"unrolled ({how})", dict(unrolled, svmax_lambda=0.0)),
        (
            f"unrolled ({how}) + SVMax (λ {svmax_lambda:g})",
            dict(unrolled, svmax_lambda=svmax_lambda),
        ),
    ]


def run_name(config):
    """The run's folder: every setting that differs between the program's runs."""
    variant = config.variant
    if config.variant == "unrolled":
        variant += (
            f"_{config.unroll_gradient}_u{config.unroll_steps}_{config.unroll_real}_"
            f"{config.unroll_adam_state}"
        )
    mixture = f"_mix{config.mixture_seed}" if config.mixture == "random" else ""
    return (
        f"{variant}_{config.generator_activation}_lr{config.learning_rate:g}_"
        f"lambda{config.svmax_lambda:g}{mixture}_seed{config.seed}"
    )


def run(base, overrides, seed, progress):
    config = dataclasses.replace(base, seed=seed, **overrides)
    config = dataclasses.replace(config, output_dir=os.path.join(base.output_dir, run_name(config)))
    print(f"[{PROGRAM}] {progress} {run_name(config)}", flush=True)
    keras.backend.clear_session()
    results = gan_mog.train_gan_mog(config)
    print(
        f"[{PROGRAM}]   {results['status']} in {results['wall_seconds']:.0f} s: "
        f"{results.get('modes_covered')} modes, high-quality "
        f"{results.get('high_quality_fraction')}",
        flush=True,
    )
    return results


def mixture_text(mixture, config):
    if mixture.get("weights") is None:
        return "modes equally weighted"
    weights = ", ".join(f"{w:.3f}" for w in mixture["weights"])
    return (
        f"random mode weights (the original notebook's `random_distribution()`, mixture seed "
        f"{config['mixture_seed']}): {weights} (std {mixture['weights_std']:.3f}; a mode of "
        "weight below 1 % can only be covered by over-representing it)"
    )


def step_ms(results):
    """Median ms per step over the trace windows after the first (which includes tracing)."""
    seconds = [t["step_seconds"] for t in results["trace"][1:]]
    return 1000 * float(np.median(seconds)) if seconds else float("nan")


def cells(runs):
    """The table cells of one setting's runs."""
    done = [r for r in runs if r["status"] == "completed" and r.get("modes_covered") is not None]
    if len(done) < len(runs):
        statuses = ", ".join(
            f"seed {r['config']['seed']}: {r['status']}" for r in runs if r not in done
        )
        note = f" ({statuses})"
    else:
        note = ""
    if not done:
        return ["–", "–", "–", "–", f"{len(runs)}{note}"]
    kls = [r["mode_kl"] for r in done if r["mode_kl"] is not None]
    return [
        mean_std([r["modes_covered"] for r in done], digits=1),
        mean_std([r["high_quality_fraction"] for r in done], 100, 1),
        (
            mean_std(kls, digits=3)
            + (f" ({len(kls)} of {len(done)} defined)" if len(kls) < len(done) else "")
        )
        if kls
        else "undefined (no high-quality point)",
        mean_std([step_ms(r) for r in done], digits=1),
        f"{len(done)}{note}",
    ]


HEAD = (
    "| {first} | modes covered (of 8) | high-quality % | KL(modes ‖ target) | ms / step | runs |\n"
    "|---|---:|---:|---:|---:|---|"
)


def plot_grid(rows, path, title):
    """Rows = Fig. 3 variants (their first seed), columns = evaluation steps, last = target."""
    plt = pyplot()
    first = rows[0][1][0]
    steps = [e["step"] for e in first["evaluations"]]
    fig, axes = plt.subplots(
        len(rows),
        len(steps) + 1,
        figsize=(1.5 * (len(steps) + 1), 1.6 * len(rows) + 0.6),
        squeeze=False,
    )
    config = first["config"]
    truth, _ = data.sample_gaussian_ring(
        config["num_samples"], seed=1, weights=first["mixture"].get("weights")
    )
    for i, (label, runs) in enumerate(rows):
        results = runs[0]
        for j, step in enumerate(steps):
            ax = axes[i, j]
            path_j = gan_mog.sample_path(results["config"]["output_dir"], step)
            if os.path.exists(path_j):
                gan_mog.draw_density(ax, np.load(path_j), bins=100)
            if i == 0:
                ax.set_title(f"step {step}", fontsize=8)
            if j == 0:
                # Wrapped: an unrolled row's label names four settings and would run into
                # the rows above and below on one line.
                ax.set_ylabel(textwrap.fill(label, 24), fontsize=7)
        gan_mog.draw_density(axes[i, -1], truth, bins=100)
        if i == 0:
            axes[i, -1].set_title("target", fontsize=8)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def row_flags():
    return (
        FLAGS.svmax_lambda,
        FLAGS.unrolled_rows_steps,
        FLAGS.unrolled_rows_gradient,
        FLAGS.unrolled_rows_real,
        FLAGS.unrolled_rows_adam_state,
    )


def _floats(values, name):
    out = []
    for v in values:
        try:
            out.append(float(v))
        except ValueError:
            raise ValueError(f"--{name}: {v!r} is not a number") from None
    return out


def main(argv):
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    try:
        seeds = [int(v) for v in FLAGS.seeds]
        sweep_seeds = [int(v) for v in FLAGS.sweep_seeds]
        rates = _floats(FLAGS.sweep_learning_rates, "sweep_learning_rates")
        lambdas = _floats(FLAGS.sweep_lambdas, "sweep_lambdas")
        base = harness_flags.config_from_flags(gan_mog.GanConfig, verbose=0)
        settings = [o for _, o in fig3_rows(*row_flags())]
        settings += [
            dict(variant="vanilla", learning_rate=lr, svmax_lambda=lam, generator_activation=act)
            for lr in rates
            for lam in lambdas
            for act in FLAGS.sweep_activations
        ]
        if not seeds:
            raise ValueError("--seeds must not be empty")
        for overrides in settings:  # refuse impossible flags before any training
            gan_mog.resolve(dataclasses.replace(base, **overrides))
    except (ValueError, gan_mog.ConfigError) as error:
        print(f"{PROGRAM}: refused: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    total = 4 * len(seeds) + len(settings[4:]) * len(sweep_seeds)
    count = iter(range(1, total + 1))
    rows = [
        (label, [run(base, o, s, f"{next(count)}/{total}") for s in seeds])
        for label, o in fig3_rows(*row_flags())
    ]
    sweep = [
        (o, [run(base, o, s, f"{next(count)}/{total}") for s in sweep_seeds]) for o in settings[4:]
    ]
    first = rows[0][1][0]
    config = first["config"]
    lines = [
        "# GAN on the ring of 8 Gaussians (SVMax paper Sec. 4.2, Fig. 3)",
        "",
        f"Generated by `python -m trainers.reproduce_gan_mog {' '.join(sys.argv[1:])}` on "
        f"{first['device']} with TensorFlow {first['versions']['tensorflow']}, Keras "
        f"{first['versions']['keras']}.",
        "",
        f"Every run: `trainers.gan_mog` — batch {config['batch_size']}, noise "
        f"{config['noise_dim']}-d, MLPs 2 × {config['hidden_units']}, Adam (0.5, 0.999), "
        f"{config['train_steps']} steps, ring radius {config['mixture_radius']:g}, std "
        f"{config['mixture_std']:g}, {mixture_text(first['mixture'], config)}. Metrics after "
        f"the last step on {config['num_samples']} "
        "generated points (VEEGAN: high quality = within 3σ of the nearest mode; a mode is "
        "covered with ≥ 1 % of the points as its high-quality points). Cells: mean ± std over "
        "seeds (ddof = 1). ms / step: median over the trace windows after the first.",
        "",
        f"## Fig. 3 rows (lr {config['learning_rate']:g}, tanh generator), seeds "
        f"{', '.join(map(str, seeds))}",
        "",
        HEAD.format(first="setting"),
        *[f"| {label} | " + " | ".join(cells(runs)) + " |" for label, runs in rows],
        "",
    ]
    if sweep_seeds and sweep:
        lines += [
            f"## Sweep (vanilla), seeds {', '.join(map(str, sweep_seeds))}",
            "",
            HEAD.format(first="lr | λ | generator").replace("|---|", "|---|---|---|", 1),
            *[
                f"| {o['learning_rate']:g} | {o['svmax_lambda']:g} | "
                f"{o['generator_activation']} | " + " | ".join(cells(runs)) + " |"
                for o, runs in sweep
            ],
            "",
        ]
    minutes = (time.perf_counter() - started) / 60
    lines.append(f"Wall time of this invocation: {minutes:.1f} min.")
    path = FLAGS.table or os.path.join(FLAGS.output_dir, "gan_mog.md")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    stem = os.path.splitext(path)[0]
    plot_grid(
        rows,
        f"{stem}.png",
        f"GAN on the 8-Gaussian ring, seed {first['config']['seed']}, lr "
        f"{config['learning_rate']:g}:\ngenerated points (log-density) over training steps",
    )

    def summary(r):
        keys = ("seed", "variant", "learning_rate", "svmax_lambda", "generator_activation")
        return {
            **{k: r["config"][k] for k in keys},
            "status": r["status"],
            **{k: r.get(k) for k in ("modes_covered", "high_quality_fraction", "mode_kl")},
            "evaluations": r["evaluations"],
            "ms_per_step": step_ms(r),
        }

    records.write_json(
        f"{stem}.json",
        {
            "fig3": {label: [summary(r) for r in runs] for label, runs in rows},
            "sweep": [summary(r) for _, runs in sweep for r in runs],
        },
    )
    del argv
    print("\n".join(lines))
    print(f"[{PROGRAM}] wrote {path}, {stem}.png, {stem}.json ({minutes:.1f} min)")
    return 0


if __name__ == "__main__":
    harness_flags.run(main)
