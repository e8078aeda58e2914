"""The optional parts of the library and the pyproject extra that installs what they need.

The core (`tf_svmax.ops`, the losses, the metrics) needs Keras, NumPy and scikit-learn only; the
embedded glyph set draws its images with matplotlib's bundled fonts, Pillow and fontTools, which
come with the ``trainers`` extra (the trainers use the set). A part that needs them calls
`require` first, so that a JAX- or PyTorch-only install gets one sentence naming the extra
instead of an ImportError from deep inside it.
"""

import importlib

# The command that installs the extra: the package is installed from its repository's clone (or
# from a wheel built there), not from PyPI.
INSTALL = 'pip install ".[trainers]" (in the clone of the repository)'


def require(modules, what):
    """Imports `modules` (``{module: distribution}``); raises ModuleNotFoundError in one
    sentence naming `what` needs them and the extra that installs them when any is missing."""
    missing = []
    for module, distribution in modules.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(distribution)
    if missing:
        raise ModuleNotFoundError(
            f"{what} needs {', '.join(missing)}, which the `trainers` extra installs: {INSTALL}."
        )
