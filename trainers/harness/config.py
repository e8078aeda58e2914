"""Checks every trainer's config shares: each field against its option, the data source; and
the refusals made once a run reads its data (`dataset_refusals`) and builds its model in its
distribution's scope (`model_scope`: the cluster's configs, the batch's split, --weights)."""

import contextlib
import dataclasses
import os

from trainers.harness.flags import (
    REQUIRED,
    FlagValueError,
    non_negative_int,
    option,
    positive_int,
    validate,
    writable_folder,
)
from trainers.harness.lazy import library_args  # the library's validators and tables, no Keras
from trainers.harness.run_dir import RunRefused
from trainers.harness.strategies import STRATEGIES  # records: what make_distribution makes


class ConfigError(RunRefused):
    """A flag combination the experiment cannot run; the message names the flags."""


def output_dir_option(flag_default):
    """The trainers' `output_dir` field: required in code, `flag_default` on the command line."""
    return option(
        REQUIRED,
        "Results, checkpoints, TensorBoard, plots (a relative path starts at the current "
        "directory).",
        flag_default=flag_default,
        check=writable_folder,
        identity=False,  # a moved run folder resumes
    )


def verbose_option():
    """The trainers' `verbose` field."""
    return option(
        1,
        "0 silent, 1 progress bar on a terminal (elsewhere as 2), 2 plain lines: progress "
        "(step, rate, loss, time left) every 15 s and one line per evaluation interval.",
        choices=(0, 1, 2),
        identity=False,
    )


@dataclasses.dataclass(frozen=True)
class ImageDataConfig:
    """The config part of a run of a backbone on images (retrieval, two-head; the run
    fields are `trainers.harness.parts.run_part`'s): where the images come from, how the
    backbone starts and the distribution it trains under (`trainers.harness.runtime` makes
    it). The experiment's config also inherits ``dataset``, ``backbone`` and ``jit_compile``
    (`parts.dataset_part`, `parts.backbone_part`, `parts.jit_compile_part`, with its own
    choices and defaults), and `resolve_image_run` reads them with these."""

    data_dir: str | None = option(
        None, "Dataset folder (the file datasets; not for the embedded ones)."
    )
    weights: str | None = option(
        None,
        "Backbone weights: unset (random), 'imagenet' (applications backbones; needs the network "
        "or Keras' cache) or a .weights.h5 file (a small backbone's from "
        "`python -m trainers.pretrain_glyphs`).",
    )
    input_size: int | None = option(
        None,
        "Image side fed to the backbone (default: an applications backbone's own, 224 or 299; "
        "224 for image files otherwise; an embedded set is read at its own size).",
        check=positive_int,
    )
    strategy: str = option(
        "default",
        "Distribution: default (one device), mirrored (every GPU of this machine, or "
        "--cpu_devices logical CPUs without one; with KERAS_BACKEND=jax Keras' DataParallel over "
        "JAX's devices; not on PyTorch), multi_worker (TensorFlow only: every worker of the "
        "cluster in the TF_CONFIG environment variable runs the same command; the chief keeps the "
        "run folder: --output_dir must be the same shared folder on every machine).",
        choices=tuple(STRATEGIES),
        identity=False,  # the same steps on other hardware: a run resumes under another
    )
    cpu_devices: int = option(
        0,
        "Split the CPU into this many logical devices (0: as found), to try --strategy=mirrored "
        "on a machine without GPUs. They share the same cores: a test of the code path, not a "
        "speed-up.",
        check=non_negative_int,
        identity=False,
    )
    cluster_timeout: int = option(
        600,
        "--strategy=multi_worker: seconds to wait for every worker of TF_CONFIG's cluster to "
        "join; a worker that cannot reach them in time is stopped (exit status 137) with a "
        "message naming TF_CONFIG.",
        check=positive_int,
        identity=False,
    )


def mark_resolved(config):
    """`config`, marked as its experiment's resolve's output (`is_resolved`), so that the run
    it is passed on to takes it as it is instead of resolving (and checking) it again. The mark
    is an attribute of this instance, not a field: no flag, not in results.json, and a config
    changed with `dataclasses.replace` (a new instance) is unmarked."""
    object.__setattr__(config, "_resolved", True)  # a frozen dataclass: set past its guard
    return config


def is_resolved(config):
    """Whether `config` is one its experiment's resolve returned (`mark_resolved`)."""
    return vars(config).get("_resolved", False)


def resolved(config, resolve):
    """`config` as it is where it is resolved already (`is_resolved`: the command line
    resolved it when it checked the flags), else ``resolve(config)``: a run resolves its
    config once."""
    return config if is_resolved(config) else resolve(config)


def check_fields(config):
    """Raises ConfigError for a field outside its option's kind or choices."""
    try:
        validate(config)
    except FlagValueError as error:
        raise ConfigError(str(error)) from None


def resolve_image_run(config, datasets):
    """The harness' part of resolving an image run (`ImageDataConfig`) whose --dataset is one of
    `datasets` (the trainer's `trainers.harness.datasets.records`), its checks in the order
    they run, before any data is read; returns the fields it settles, ``{"train_steps",
    "eval_every", "trace_every", "input_size"}`` (`resolve_cadence` with the dataset's default
    steps, `image_input_size`). The experiment's own checks follow it. Raises ConfigError for,
    in this order:

    - a field outside its option's kind or choices;
    - a file dataset without --data_dir, an embedded one with one;
    - --weights the backbone cannot load (any weights for a toy backbone; a missing, empty,
      truncated or non-HDF5 file; 'imagenet' for a small backbone);
    - an embedded set (small grey images) with an applications backbone;
    - flags the strategy cannot run: XLA cannot compile the multi-worker collectives
      (TensorFlow's tf2xla conversion fails on them);
    - --train_steps not a multiple of --eval_every.
    """
    c = config
    check_fields(c)
    dataset = datasets[c.dataset]
    if not dataset.embedded and not c.data_dir:
        raise ConfigError(f"--dataset={c.dataset} needs --data_dir (the dataset's folder).")
    if dataset.embedded and c.data_dir:
        raise ConfigError(f"--dataset={c.dataset} is embedded; it takes no --data_dir.")
    if c.backbone in library_args.TOY_BACKBONES and c.weights not in (None, "none"):
        raise ConfigError(
            f"--weights={c.weights}: --backbone={c.backbone} starts from random weights (as the "
            f"original does); leave --weights unset."
        )
    if c.weights not in (None, "none", "imagenet") and not os.path.isfile(c.weights):
        kinds = "a .weights.h5 file" + (
            "" if c.backbone in library_args.SMALL_BACKBONES else " or 'imagenet'"
        )
        raise ConfigError(f"--weights={c.weights} is not a file; expected {kinds}.")
    if c.weights not in (None, "none", "imagenet"):
        with weights_refusals(c):
            # empty, truncated, not HDF5: before any data
            library_args.check_weights_file(c.weights)
    if c.weights == "imagenet" and c.backbone in library_args.SMALL_BACKBONES:
        raise ConfigError(
            f"--weights=imagenet: --backbone={c.backbone} has no ImageNet weights; use one of "
            f"{list(library_args.APPLICATIONS)}, or a .weights.h5 file of this backbone (e.g. "
            f"python -m trainers.pretrain_glyphs --backbone={c.backbone})."
        )
    if dataset.embedded and c.backbone in library_args.APPLICATIONS:
        small = [*library_args.SMALL_BACKBONES, *library_args.TOY_BACKBONES]
        raise ConfigError(
            f"--dataset={c.dataset} has small grey images; --backbone={c.backbone} needs RGB "
            f"images of at least 32 x 32. Use --backbone from {small}."
        )
    if c.strategy == "multi_worker" and c.jit_compile:
        raise ConfigError(
            "--jit_compile with --strategy=multi_worker: XLA cannot compile the step's "
            "cross-worker all-reduces (TensorFlow's tf2xla conversion fails); leave "
            "--jit_compile unset."
        )
    return {
        **resolve_cadence(c, dataset.default_steps),
        "input_size": image_input_size(c, dataset),
    }


GIB = 2**30


def physical_memory_bytes():
    """This machine's physical memory in bytes (the most any allocation of a run can get)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits_in_memory(needed_bytes, what):
    """Raises ConfigError when `what` (the flags that size an allocation, and how: e.g.
    ``"--xbm_size=10 (10 rows x 129 x 4 bytes)"``) needs more than this machine's physical
    memory: refused before any work instead of a ResourceExhaustedError or numpy's "Unable to
    allocate" after it. `needed_bytes` is a lower bound of what the run allocates. The one
    check of this kind for every trainer's size flags."""
    available = physical_memory_bytes()
    if needed_bytes > available:
        raise ConfigError(
            f"{what} needs at least {needed_bytes / GIB:,.1f} GiB of memory; this machine has "
            f"{available / GIB:,.1f} GiB. Use a smaller value."
        )


# The fewest features a backbone of `tf_svmax.models` hands its embedding head (the small ones'
# and mnist_toy's 128; the applications' 1,024 and more).
MIN_BACKBONE_FEATURES = 128


def check_dense_fits(flag, units, fan_in, inputs="inputs"):
    """Raises ConfigError when a Dense layer of `units` (the value of `flag`) on `fan_in`
    `inputs` cannot fit in memory: its float32 kernel, its gradient and the optimizer's slot
    (three copies; a lower bound of what training it allocates)."""
    check_fits_in_memory(
        3 * 4 * fan_in * units,
        f"{flag}={units} (a Dense kernel of {fan_in:,} {inputs} x {units:,} float32, with its "
        "gradient and the optimizer's slot)",
    )


# The side image files are resized to for a small backbone (any size works there): CUB's and
# the other benchmarks' customary 224.
FILE_INPUT_SIZE = 224


def image_input_size(config, dataset):
    """The image side a run trains and evaluates at, the one definition its resolved config
    records and its image loaders use: --input_size, else the backbone's own (224 or 299 for
    an applications backbone), else 224 for image files (None for an embedded set, read at its
    own size). `dataset`: the `trainers.harness.datasets.Dataset` of --dataset."""
    size = config.input_size or library_args.default_input_size(config.backbone)
    if size is None and not dataset.embedded:
        size = FILE_INPUT_SIZE
    return size


def resolve_cadence(config, default_steps):
    """``{"train_steps", "eval_every", "trace_every"}`` of a config whose unset fields take
    `default_steps`, a quarter of the steps between evaluations and a twentieth of an interval
    per trace point; raises ConfigError unless the steps are a multiple of the interval."""
    c = config
    train_steps = default_steps if c.train_steps is None else c.train_steps
    eval_every = c.eval_every if c.eval_every is not None else max(1, train_steps // 4)
    if train_steps % eval_every:
        raise ConfigError(
            f"--train_steps ({train_steps}) must be a multiple of --eval_every ({eval_every})."
        )
    trace_every = max(1, eval_every // 20) if c.trace_every is None else c.trace_every
    return {"train_steps": train_steps, "eval_every": eval_every, "trace_every": trace_every}


@contextlib.contextmanager
def weights_refusals(config):
    """Turns the library's `WeightsFileError` (a --weights file that is unreadable or written
    for another backbone; its message names the file) into a refusal (exit 2)."""
    try:
        yield
    except library_args.WeightsFileError as error:
        raise ConfigError(
            f"--weights={config.weights} --backbone={config.backbone}: {error}"
        ) from None


@contextlib.contextmanager
def dataset_refusals(config):
    """Turns a dataset reader's complaint about --data_dir (missing or empty folders, no
    images, a malformed list file: FileNotFoundError, NotADirectoryError, ValueError) into a
    refusal (exit 2) with the reader's message, instead of a traceback."""
    try:
        yield
    except (FileNotFoundError, NotADirectoryError, ValueError) as error:
        raise ConfigError(
            f"--dataset={config.dataset} --data_dir={config.data_dir}: {error}"
        ) from None


@contextlib.contextmanager
def model_scope(distribution, config):
    """Where an image run builds its model from its resolved `config`: the scope of its
    distribution (`trainers.harness.runtime.start`).

    Raises:
      ConfigError: the workers of a multi-worker cluster hold different configs
        (`check_same_config`: every worker holds the chief's, or all refuse, before any
        variable is made), the global batch P x K does not split evenly over the replicas, or
        (building) a --weights file that does not fit the backbone.
    """
    distribution.check_same_config(config)
    distribution.check_even_split(config.batch_p * config.batch_k)
    with distribution.scope(), weights_refusals(config):  # --weights of another backbone
        yield
