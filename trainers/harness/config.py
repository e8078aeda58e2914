"""Checks every trainer's config shares: each field against its option, the data source."""

from tf_svmax import models
from trainers.harness.flags import REQUIRED, FlagValueError, option, validate
from trainers.harness.run_dir import RunRefused


class ConfigError(RunRefused):
    """A flag combination the experiment cannot run; the message names the flags."""


def output_dir_option(flag_default):
    """The trainers' `output_dir` field: required in code, `flag_default` on the command line."""
    return option(
        REQUIRED,
        "Results, checkpoints, TensorBoard, plots (a relative path starts at the current "
        "directory).",
        flag_default=flag_default,
        identity=False,  # a moved run folder resumes
    )


def verbose_option():
    """The trainers' `verbose` field."""
    return option(
        1,
        "0 silent, 1 progress bar (one line per interval when not a terminal), 2 one line per "
        "interval.",
        choices=(0, 1, 2),
        identity=False,
    )


def check_fields_and_data(config, embedded):
    """Raises ConfigError for a field outside its option's kind or choices, a file dataset
    without --data_dir, an embedded one (a name in `embedded`) with one, or an embedded set
    (small grey images) with an applications backbone."""
    c = config
    try:
        validate(c)
    except FlagValueError as error:
        raise ConfigError(str(error)) from None
    if c.dataset not in embedded and not c.data_dir:
        raise ConfigError(f"--dataset={c.dataset} needs --data_dir (the dataset's folder).")
    if c.dataset in embedded and c.data_dir:
        raise ConfigError(f"--dataset={c.dataset} is embedded; it takes no --data_dir.")
    if c.dataset in embedded and c.backbone not in models.SMALL_BACKBONES:
        raise ConfigError(
            f"--dataset={c.dataset} has small grey images; --backbone={c.backbone} needs RGB "
            f"images of at least 32 x 32. Use --backbone from {list(models.SMALL_BACKBONES)}."
        )
