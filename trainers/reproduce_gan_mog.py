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

import dataclasses
import os
import textwrap
from typing import ClassVar

import numpy as np

from trainers import gan_mog
from trainers.harness import flags as harness_flags
from trainers.harness import grid
from trainers.harness.flags import option, positive_int
from trainers.harness.grid import step_seconds
from trainers.harness.plots import finish_figure, pyplot
from trainers.harness.tables import mean_std

PROGRAM = "reproduce_gan_mog"


@dataclasses.dataclass(frozen=True)
class GanGrid(
    grid.grid_config("runs/gan_mog_table", seeds=range(5), seeds_help="Seeds of the Fig. 3 rows.")
):
    TABLE: ClassVar[str] = "gan_mog.md"

    svmax_lambda: float = option(gan_mog.PAPER_SVMAX_LAMBDA, "SVMax weight of the + SVMax rows.")
    unrolled_rows_steps: int = option(
        gan_mog.PAPER_UNROLL_STEPS,
        f"The unrolled rows' discriminator updates (paper: {gan_mog.PAPER_UNROLL_STEPS}; the "
        f"original notebook: {gan_mog.NOTEBOOK_UNROLL_STEPS}).",
        check=positive_int,
    )
    unrolled_rows_gradient: str = option(
        "surrogate",
        "The unrolled rows' gradient: surrogate (the PyTorch code the paper used) or through the "
        "updates (Metz et al.).",
        choices=gan_mog.UNROLL_GRADIENTS,
    )
    unrolled_rows_real: str = option(
        "fresh",
        "The unrolled rows' real batches: fresh per unrolled update (the original) or reused.",
        choices=gan_mog.UNROLL_REAL,
    )
    unrolled_rows_adam_state: str = option(
        "advance",
        "The unrolled rows' discriminator Adam state: advanced by the unroll (the original) or a "
        "discarded copy (Metz et al.).",
        choices=gan_mog.UNROLL_ADAM_STATE,
    )
    sweep_learning_rates: tuple[float, ...] = option((0.0025, 0.025, 0.1), "Sweep: learning rates.")
    sweep_lambdas: tuple[float, ...] = option((0.0, 0.01, 0.1), "Sweep: SVMax weights.")
    sweep_activations: tuple[str, ...] = option(("tanh", "relu"), "Sweep: generator activations.")
    sweep_seeds: tuple[int, ...] = option((0,), "Sweep seeds (empty: no sweep).")


# The trainer's flags the grid passes to every run.
TRAINER_FLAGS = dict(
    only=("train_steps", "eval_every", "learning_rate", "mixture", "mixture_seed"),
)


def fig3_rows(config):
    """``(label, overrides)`` of the paper's four rows."""
    svmax_lambda = config.svmax_lambda
    unrolled = dict(
        variant="unrolled",
        unroll_steps=config.unrolled_rows_steps,
        unroll_gradient=config.unrolled_rows_gradient,
        unroll_real=config.unrolled_rows_real,
        unroll_adam_state=config.unrolled_rows_adam_state,
    )
    how = (
        f"{config.unrolled_rows_steps} steps, {config.unrolled_rows_gradient}, "
        f"{config.unrolled_rows_real} real, Adam {config.unrolled_rows_adam_state}"
    )
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


def planned_run(base, overrides, seed):
    """One run of the grid: `base` with `overrides` and `seed`, in the folder `run_name`."""
    config = dataclasses.replace(base, seed=seed, **overrides)
    config = dataclasses.replace(config, output_dir=os.path.join(base.output_dir, run_name(config)))
    return grid.Planned(
        run_name(config),
        lambda c: gan_mog.train_gan_mog(c),  # the training code, read as the run trains
        gan_mog.resolve,
        config,
    )


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
    return 1000 * step_seconds(results)


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
    from tf_svmax import data  # imported with the training code (after the flags were checked)

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
    finish_figure(fig, path, title, title_size=9)


def reproduce(config):
    base = harness_flags.config_from_flags(
        gan_mog.GanConfig, verbose=0, output_dir=config.output_dir
    )
    fig3 = fig3_rows(config)
    settings = [
        dict(variant="vanilla", learning_rate=lr, svmax_lambda=lam, generator_activation=act)
        for lr in config.sweep_learning_rates
        for lam in config.sweep_lambdas
        for act in config.sweep_activations
    ]
    seeds, sweep_seeds = config.seeds, config.sweep_seeds
    planned = [planned_run(base, o, s) for _, o in fig3 for s in seeds]
    planned += [planned_run(base, o, s) for o in settings for s in sweep_seeds]
    runs = grid.Runs(  # refuses every run before any trains
        PROGRAM,
        planned,
        tensorflow_only="the unrolled GAN's functional Adam and its train step are TensorFlow's",
    )
    results = iter(runs.train())
    rows = [(label, [next(results) for _ in seeds]) for label, _ in fig3]
    sweep = [(o, [next(results) for _ in sweep_seeds]) for o in settings]
    first = rows[0][1][0]
    c = first["config"]
    lines = [
        "# GAN on the ring of 8 Gaussians (SVMax paper Sec. 4.2, Fig. 3)",
        "",
        grid.provenance(PROGRAM, first),
        "",
        f"Every run: `trainers.gan_mog` — batch {c['batch_size']}, noise "
        f"{c['noise_dim']}-d, MLPs 2 × {c['hidden_units']}, Adam (0.5, 0.999), "
        f"{c['train_steps']} steps, ring radius {c['mixture_radius']:g}, std "
        f"{c['mixture_std']:g}, {mixture_text(first['mixture'], c)}. Metrics after "
        f"the last step on {c['num_samples']} "
        "generated points (VEEGAN: high quality = within 3σ of the nearest mode; a mode is "
        "covered with ≥ 1 % of the points as its high-quality points). Cells: mean ± std over "
        "seeds (ddof = 1). ms / step: median over the trace windows after the first.",
        "",
        f"## Fig. 3 rows (lr {c['learning_rate']:g}, tanh generator), seeds "
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
    lines.append(runs.wall_time())
    title = (
        f"GAN on the 8-Gaussian ring, seed {c['seed']}, lr {c['learning_rate']:g}:\n"
        "generated points (log-density) over training steps"
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

    grid.write(
        config,
        PROGRAM,
        "\n".join(lines) + "\n",
        {
            "fig3": {label: [summary(r) for r in runs] for label, runs in rows},
            "sweep": [summary(r) for _, runs in sweep for r in runs],
        },
        [(".png", lambda path: plot_grid(rows, path, title))],
        runs.minutes(),
    )


if __name__ == "__main__":
    grid.main(GanGrid, reproduce, PROGRAM, trainer=gan_mog.GanConfig, **TRAINER_FLAGS)
