"""What checking an argument or a flag needs from tf_svmax, without Keras.

Importing the `tf_svmax` package runs ``tf_svmax/__init__.py``, which imports Keras and, on
its TensorFlow backend, TensorFlow (seconds; it registers the library's objects, so that
``.keras`` files load after ``import tf_svmax``). This module imports only the standard
library and NumPy, and no other module of the package, so that a program can load it by
itself and define, parse and check its flags (``--help``, a refused value) before any of that
starts: the trainers do (`trainers.harness.lazy.library_args`: this file, loaded as
``tf_svmax._args`` without running the package's ``__init__``; the library's own imports of it
then find the same module). It is the one home of:

- the Python-argument validators of `tf_svmax.checks` (which re-exports them: the same
  objects, the same messages);
- the name tables the models, the k-means seeding and LORAC take their choices from
  (`tf_svmax.models` and the others import them from here), and the backbone-weights file
  check (`tf_svmax.models.check_weights_file` and its `WeightsFileError`).

NumPy is imported for NumPy scalars (``np.integer``, ``np.bool_``, ``np.errstate``): the
validators take them as the library does.
"""

import math
import numbers
import os
import sys

import numpy as np

# Python arguments (re-exported by `tf_svmax.checks`).


def invalid(arg, expected, received):
    """Builds the library's standard error message for a bad argument."""
    return f"Invalid value for argument `{arg}`. Expected {expected}. Received: {arg}={received!r}"


def _as_float(value, arg, expected):
    """`value` as the Python float the library computes with, raising ValueError (`expected`)
    unless it is a real number (Python, NumPy or `fractions.Fraction`; not a bool). An int or
    a NumPy long double beyond float's range is +-inf, as it would be in the computation (NumPy's
    `isfinite` refuses a Python int past 2**64 with a raw TypeError, and took ``1e400`` as a
    long double for finite)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(invalid(arg, expected, value))
    try:
        # `over="ignore"`: a long double past float's range becomes inf, checked by the caller.
        with np.errstate(over="ignore"):
            return float(value)
    except OverflowError:  # a Python int (or Fraction) past float's range
        return math.inf if value > 0 else -math.inf


def check_non_negative_number(value, arg):
    """Returns `value` as a Python float, raising ValueError unless it is a finite number >= 0."""
    number = _as_float(value, arg, "a float >= 0")
    if not math.isfinite(number) or number < 0:
        raise ValueError(invalid(arg, "a finite float >= 0", value))
    return number


def check_finite_number(value, arg):
    """Returns `value` as a Python float, raising ValueError unless it is a finite real number
    (Python or NumPy, not a bool; negative allowed, e.g. a triplet margin)."""
    number = _as_float(value, arg, "a finite float")
    if not math.isfinite(number):
        raise ValueError(invalid(arg, "a finite float", value))
    return number


def check_choice(value, arg, choices):
    """Returns `value`, raising ValueError unless it is one of `choices`."""
    if isinstance(value, str) and value in choices:
        return value
    raise ValueError(invalid(arg, f"one of {list(choices)}", value))


def check_positive_number(value, arg, allow_inf=False):
    """Returns `value` as a Python float, raising ValueError unless it is a real number > 0
    (Python or NumPy, not a bool): finite, or also ``inf`` where `allow_inf` (a scale whose
    infinity means "no term", e.g. LORAC's ``beta``)."""
    expected = "a float > 0 (or inf)" if allow_inf else "a finite float > 0"
    number = _as_float(value, arg, expected)
    if math.isnan(number) or number <= 0 or (math.isinf(number) and not allow_inf):
        raise ValueError(invalid(arg, expected, value))
    return number


def check_fraction(value, arg):
    """Returns `value` as a Python float, raising ValueError unless it is a real number in
    [0, 1] (a share, a mixing weight, an EMA momentum)."""
    number = check_non_negative_number(value, arg)
    if number > 1:
        raise ValueError(invalid(arg, "a float in [0, 1]", value))
    return number


def check_rate(value, arg):
    """Returns `value` as a Python float, raising ValueError unless it is a real number in
    (0, 1] (an update rate: 0 would never move, above 1 overshoots the target)."""
    number = check_non_negative_number(value, arg)
    if number == 0 or number > 1:
        raise ValueError(invalid(arg, "a float in (0, 1]", value))
    return number


def check_positive_int(value, arg):
    """Returns `value` as an int, raising ValueError unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(invalid(arg, "an int >= 1", value))
    return int(value)


def check_non_negative_int(value, arg):
    """Returns `value` as an int, raising ValueError unless it is an integer >= 0 (a seed)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(invalid(arg, "an int >= 0", value))
    return int(value)


def check_bool(value, arg):
    """Returns `value` as a Python bool, raising ValueError unless it is a bool (Python or
    NumPy; not an int, so that 0 and 1 are refused)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(invalid(arg, "a bool", value))
    return bool(value)


def progress_verbosity(verbose, arg="verbose", stream=None):
    """`verbose` (0: silent, 1: a progress bar, 2: one plain line per stage or interval) checked,
    with 1 turned into 2 when `stream` (default: sys.stdout) is not a terminal: the bar redraws
    itself with carriage returns and ANSI colour codes, which pile up in a log file or a CI log
    as one endless line. (The trainers' `fit_verbosity` uses it for `fit`.)"""
    if (
        isinstance(verbose, (bool, np.bool_))
        or not isinstance(verbose, (int, np.integer))
        or verbose not in (0, 1, 2)
    ):
        raise ValueError(invalid(arg, "0, 1 or 2", verbose))
    stream = sys.stdout if stream is None else stream
    if verbose == 1 and not (hasattr(stream, "isatty") and stream.isatty()):
        return 2
    return int(verbose)


# The backbones of `tf_svmax.models` (re-exported there).

# name -> (keras.applications constructor, preprocess module, default input size)
APPLICATIONS = {
    "resnet50": ("ResNet50", "resnet", 224),
    "mobilenet_v2": ("MobileNetV2", "mobilenet_v2", 224),
    "inception_v3": ("InceptionV3", "inception_v3", 299),
    "densenet121": ("DenseNet121", "densenet", 224),
}
# small_cnn_bn: the same three convolutions with batch normalization before each ReLU, as the
# applications have; it trains a softmax head from scratch at the papers' learning rate (0.01),
# where small_cnn's small activations make that take tens of thousands of steps.
# small_resnet: ResNet-18's layout (He et al. 2016, the CIFAR variant: a 3 x 3 stem, no max-pool)
# at widths 16-32-64-128 instead of 64-128-256-512: 0.70 M weights and ~35 M multiply-adds per
# 32 x 32 image (1/16 of ResNet-18's), a deeper backbone that a 2-core CPU can pretrain.
SMALL_BACKBONES = ("small_cnn", "small_cnn_bn", "small_resnet")
# mnist_toy: the SVMax paper's network for its 2-D MNIST circle figure (ahmdtaha/svmax @ cc5f1b5b,
# mnist_embedding.py, ToyModel): Conv2D(32, 3, relu, valid padding) -> Flatten -> Dense(128, relu).
# No global pooling (so not in SMALL_BACKBONES: pooled_feature_map and XML need one) and no
# weights file: it starts from Keras' default initialisation, as the original does.
TOY_BACKBONES = ("mnist_toy",)
BACKBONES = (*SMALL_BACKBONES, *TOY_BACKBONES, *APPLICATIONS)


def check_backbone(backbone):
    """Raises ValueError unless `backbone` is one of `BACKBONES`."""
    if backbone not in BACKBONES:
        raise ValueError(invalid("backbone", f"one of {list(BACKBONES)}", backbone))


def default_input_size(backbone):
    """The input side length a backbone was designed for (None for the small ones: any size)."""
    check_backbone(backbone)
    return APPLICATIONS[backbone][2] if backbone in APPLICATIONS else None


class WeightsFileError(ValueError):
    """A backbone weights file that cannot be used: empty, truncated or not HDF5, not a
    weights file, or written for another backbone (or number of input channels). The message
    names the file and what is wrong with it."""


def check_weights_file(path):
    """Returns `path` (a str) if it names a file that reads as HDF5 (the format of Keras'
    ``.weights.h5`` and legacy ``.h5`` files), without loading it.

    Raises:
      FileNotFoundError: there is no such file.
      WeightsFileError: the file is empty, truncated or not HDF5 (the message names it).
    """
    import h5py  # Keras' own dependency for weights files

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Backbone weights file not found: {path!r}.")
    size = os.path.getsize(path)
    if size == 0:
        raise WeightsFileError(
            f"The weights file {path!r} is empty (0 bytes); write it anew (a backbone's "
            "save_weights, e.g. python -m trainers.pretrain_glyphs)."
        )
    try:
        with h5py.File(path, "r"):
            pass
    except OSError as error:
        # h5py's message says what it found, e.g. "truncated file: eof = 197556, ...,
        # stored_eof = 395112" or "file signature not found" (not HDF5).
        reason = str(error).split("(", 1)[-1].rstrip(")") if "(" in str(error) else str(error)
        raise WeightsFileError(
            f"The weights file {path!r} ({size} bytes) is not a readable HDF5 weights file "
            f"({reason}): it is truncated, damaged or of another format; write it anew (a "
            "backbone's save_weights, e.g. python -m trainers.pretrain_glyphs)."
        ) from None
    return path


# Other choices (re-exported by the modules that use them).

# The seedings of `tf_svmax.metrics.kmeans` (its INITS).
KMEANS_INITS = ("k-means++", "k-means++-sklearn", "random")
# The priors of `tf_svmax.losses.LORACLoss` (`tf_svmax.losses.lorac.PRIORS`).
LORAC_PRIORS = ("laplace", "gaussian", "margin")
