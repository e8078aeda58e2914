"""A retrieval run, top to bottom: config → data → model → loss → `harness.loop.run_job`.

config = RetrievalConfig(output_dir="/tmp/run")      # glyphs, contrastive + SVMax
results = train_retrieval(config)                     # also written to results.json
"""

import os
import time

import numpy as np

from tf_svmax import data, losses, metrics, models, ops
from trainers.harness import runtime
from trainers.harness.config import model_scope, resolved
from trainers.harness.loop import Job, image_file_diagnosis, run_job
from trainers.harness.run_dir import layout
from trainers.retrieval.config import (
    resolve_before_data,
    with_training_classes,
)
from trainers.retrieval.inputs import load_split, train_features
from trainers.retrieval.model import (
    build_loss,
    build_optimizer,
    build_training_model,
    head_output,
    spread_out_draws,
)
from trainers.retrieval.plots import plot_run


def train_retrieval(config, *, callbacks=()):
    """Trains, evaluates every `eval_every` steps, resumes from `output_dir` if interrupted
    (the shared loop: `trainers.harness.loop.run_job`).

    Returns the results dict (also in ``output_dir/results.json``), whose ``status`` is
    ``"completed"`` or ``"diverged"`` (non-finite loss: training stopped, the last good
    checkpoint kept, ``message`` says where).

    Raises:
      ConfigError: a flag combination the experiment cannot run.
      RunRefused: `output_dir` is in use by another process, holds another configuration,
        or its record is damaged (`trainers.harness.run_dir`).
    """
    started = time.perf_counter()
    config, split, embedding_model, distribution = setup(config)
    evaluated = distribution.local_copy(embedding_model)  # multi_worker: the chief's own copy
    with distribution.scope():  # the training head, the loss's state, the optimizer's slots
        job = _job(config, split, embedding_model, callbacks, evaluated, distribution)
    return run_job(job, started)


def setup(config):
    """``(config, (train, test, input_shape, loaders), embedding_model, distribution)``, in the
    order a run takes them: the config resolved but for P before any data is read (bad flags
    refused first; a config `resolve_before_data` returned is taken as it is), the
    distribution and the seed (`runtime.start`), the split, P settled with its training
    classes (the one fact of the data the config needs), and the embedding
    model — so the same config always gives the same initial weights."""
    config = resolved(config, resolve_before_data)
    distribution = runtime.start(config)
    split = load_split(config)  # its loaders at the --input_size resolved before the data
    config = with_training_classes(config, num_train_classes=len(np.unique(split[0][1])))
    with model_scope(distribution, config):
        embedding_model = models.build_embedding_model(
            config.backbone,
            input_shape=split[2],
            embedding_dim=config.embedding_dim,
            weights=config.weights,
        )
    return config, split, embedding_model, distribution


def _job(config, split, embedding_model, callbacks, evaluated, distribution):
    """The run's `Job`, top to bottom: what the start line says and the evaluation on the test
    split, what the P x K sampler draws from, the training model with its loss and optimizer,
    then what the loop calls (the batches, the evaluation); `evaluated` is ``(model,
    refresh)`` of `distribution`'s `local_copy`."""
    train, test, input_shape, loaders = split
    description = _description(config)
    evaluator = _evaluator(
        config, test, input_shape, loaders, layout(config.output_dir)["tensorboard"]
    )
    features, map_fn = train_features(config, train[0], input_shape, loaders)
    train_classes, train_labels = np.unique(train[1], return_inverse=True)
    memory = (
        losses.CrossBatchMemoryBank(config.xbm_size, name="xbm_memory") if config.xbm_size else None
    )
    draws = spread_out_draws(config)  # JAX, PyTorch: the negatives' seed state in the model
    model = build_training_model(config, embedding_model, len(train_classes), memory, draws)
    optimizer, schedule = build_optimizer(config)
    head = head_output(config)
    model.compile(
        optimizer=optimizer,
        loss=build_loss(config, memory, draws),
        metrics={"embedding": metrics.svmax_metrics()} if head else metrics.svmax_metrics(),
        jit_compile=runtime.jit_compile(config.jit_compile),
    )
    batch = config.batch_p * config.batch_k
    bounds = ops.svmax_bounds(batch, config.embedding_dim)
    # Proxy-Anchor indexes one proxy per class: labels become 0 .. C-1 (order kept, so the
    # batches are those of the original labels).
    labels = train_labels if head == "proxies" else train[1]

    def batches(start_step):
        return runtime.pk_batches(
            config,
            features,
            labels,
            map_fn=map_fn,
            start_step=start_step,
            outputs=("embedding", head) if head else None,
        )

    evaluated_model, refresh = evaluated
    evaluator.set_model(evaluated_model)

    def evaluate(step, epoch):
        refresh()
        record = evaluator.evaluate(step=step, epoch=epoch)  # also its TensorBoard scalars
        return metrics.split_retrieval_results(
            {k: v for k, v in record.items() if k not in ("step", "epoch")}
        )

    return Job(
        name="train_retrieval",
        config=config,
        model=model,
        schedule=schedule,
        batches=batches,
        distribution=distribution,
        global_batch=batch,
        evaluate=evaluate,
        plot=lambda results, folder: plot_run(results, bounds, folder),
        save_models=lambda folder: embedding_model.save(
            os.path.join(folder, "embedding_model.keras")
        ),
        header={
            "train_batch_bounds": {"batch_size": batch, "lower": bounds[0], "upper": bounds[1]}
        },
        description=description,
        callbacks=callbacks,
        diagnose=image_file_diagnosis(train[0], test[0]) if loaders else None,
    )


def _description(config):
    c = config
    xml = f" + XML (λ {c.xml_lambda:g}, m {c.xml_prototypes})" if c.xml_lambda else ""
    xbm = f" + XBM (M {c.xbm_size} from step {c.xbm_start_step})" if c.xbm_size else ""
    return (
        f"{c.dataset}, {c.backbone}, {c.loss} + {c.regularizer}{xml}{xbm}, P x K = "
        f"{c.batch_p} x {c.batch_k}, lr {c.learning_rate}"
        f"{' constant' if c.lr_schedule == 'constant' else ''}, momentum {c.momentum:g}, "
        f"{c.train_steps} steps"
    )


def _evaluator(config, test, input_shape, loaders, tensorboard_dir):
    kwargs = {
        "prefix": "",
        "log_dir": None if tensorboard_dir is None else os.path.join(tensorboard_dir, "test"),
        "ks": config.recall_ks,
        "kmeans_init": config.kmeans_init,
        "kmeans_max_iter": config.kmeans_max_iter,
        "seed": config.seed,
        "verbose": 0,
    }
    if loaders:
        test_data = data.image_dataset(
            *test, input_size=input_shape[0], batch_size=config.eval_batch_size
        )
        return metrics.RetrievalEvaluation(test_data, **kwargs)
    return metrics.RetrievalEvaluation(
        test[0], test[1], batch_size=config.eval_batch_size, **kwargs
    )


def evaluate_untrained(config):
    """The step-0 evaluation of `config`'s run without training or writing anything: the
    initial weights are those `train_retrieval(config)` starts from (same seed, same order)."""
    config, (_, test, input_shape, loaders), embedding_model, _ = setup(config)
    evaluator = _evaluator(config, test, input_shape, loaders, None)
    evaluator.set_model(embedding_model)
    return evaluator.evaluate(step=0)
