"""A two-head run, top to bottom: config → data → model → losses → `harness.loop.run_job`.

config = TwoHeadConfig(output_dir="/tmp/run", mode="hard")   # glyphs, two-head (hard)
results = train_two_head(config)                            # also in results.json
"""

import os
import time

import keras
import numpy as np

from trainers.harness import runtime
from trainers.harness.config import model_scope, resolved
from trainers.harness.loop import Job, image_file_diagnosis, run_job
from trainers.two_head.config import has_embedding_head, resolve
from trainers.two_head.evaluate import evaluate
from trainers.two_head.inputs import load_split
from trainers.two_head.model import build_losses, build_model, with_state_layers
from trainers.two_head.plots import describe, plot_run, run_title


def train_two_head(config, *, callbacks=()):
    """Trains, evaluates every `eval_every` steps, resumes from `output_dir` if interrupted.

    Returns the results dict (also in ``output_dir/results.json``), with ``status``
    ``"completed"`` or ``"diverged"``.

    Raises:
      ConfigError: a flag combination the experiment cannot run.
      RunRefused: `output_dir` in use, holding another configuration, or damaged.
    """
    started = time.perf_counter()
    config, split, model, distribution = setup(config)
    schedule = keras.optimizers.schedules.PolynomialDecay(
        config.learning_rate, config.train_steps, end_learning_rate=1e-4, power=1.0
    )
    output_names = tuple(model.output_names)  # every output gets the labels
    with distribution.scope():  # the center loss's centers
        loss, loss_weights, state = build_losses(config, split["num_classes"])
    model = with_state_layers(model, loss)  # JAX, PyTorch: the centers in the model
    evaluated, refresh = distribution.local_copy(model)  # multi_worker: the chief's own copy
    with distribution.scope():  # the optimizer's slots
        model.compile(
            optimizer=keras.optimizers.SGD(schedule, momentum=0.9),
            loss=loss,
            loss_weights=loss_weights,
            metrics={"logits": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]},
            jit_compile=runtime.jit_compile(config.jit_compile),
        )
    train_x, train_y = split["train"]

    def batches(start_step):
        map_fn = split["loaders"][0] if split["loaders"] else None
        return runtime.pk_batches(
            config, train_x, train_y, map_fn=map_fn, start_step=start_step, outputs=output_names
        )

    def evaluate_at(step, epoch):
        refresh()
        return evaluate(config, evaluated, split)

    title = run_title(config, split["num_classes"])
    job = Job(
        name="train_two_head",
        config=config,
        model=model,
        schedule=schedule,
        batches=batches,
        distribution=distribution,
        global_batch=config.batch_p * config.batch_k,
        evaluate=evaluate_at,
        plot=lambda results, folder: plot_run(results, folder, title),
        save_models=lambda folder: model.save(os.path.join(folder, "model.keras")),
        header={"data": _data_record(config, split)},
        description=(
            f"{config.dataset} ({split['num_classes']} classes, {len(train_y)} train / "
            f"{len(split['test'][1])} test images), {config.backbone}, {describe(config)}, "
            f"P x K = {config.batch_p} x {config.batch_k}, lr {config.learning_rate}, "
            f"{config.train_steps} steps"
        ),
        state=state,
        callbacks=callbacks,
        diagnose=(
            image_file_diagnosis(split["train"][0], split["test"][0]) if split["loaders"] else None
        ),
    )
    return run_job(job, started)


def setup(config):
    """``(config, split, model, distribution)``: the config resolved once, before any data is
    read (bad flags refused first), then the distribution and the seed (`runtime.start`),
    the split and the model — in that order, so the same config always gives the same initial
    weights."""
    config = resolved(config, resolve)
    distribution = runtime.start(config)
    split = load_split(config)
    with model_scope(distribution, config):
        model = build_model(config, split)
    return config, split, model, distribution


def _data_record(config, split):
    """What results.json records of the data a run trained and evaluated on."""
    counts = np.bincount(split["train"][1], minlength=split["num_classes"])
    return {
        "num_classes": split["num_classes"],
        "train_images": len(split["train"][1]),
        "test_images": len(split["test"][1]),
        "train_images_per_class": {"min": int(counts.min()), "max": int(counts.max())},
        "class_names": split["class_names"],
        "embedding_head": has_embedding_head(config),
        "retrieval_features": "embedding head"
        if has_embedding_head(config)
        else "pooled features (L2-normalised)",
    }
