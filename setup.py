"""Packaging for tf_svmax (`pip install -e .[test]`)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "tf_svmax" / "__init__.py").read_text())[1]

setup(
    name="tf_svmax",
    version=VERSION,
    description="SVD-based feature-embedding regularizers (SVMax, OLE) for Keras 3 / TensorFlow",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tf_svmax", "tf_svmax.*"]),
    python_requires=">=3.10",
    # TensorFlow itself is an extra: `tensorflow` and `tensorflow-cpu` are different
    # distributions of the same package, and requiring one would overwrite the other.
    install_requires=[
        "keras>=3.0",
        "numpy",
        "absl-py",
        "scikit-learn",  # NMI's k-means; brings SciPy (read_cars196 loads .mat files)
        "tensorboard",  # tf.summary for RetrievalEvaluation and the trainers (not in TF 2.21)
        "matplotlib",  # plots; its bundled fonts are drawn into the embedded glyph set
        "pillow",  # renders the glyph set (also a matplotlib dependency)
        "fonttools",  # reads the fonts' character maps (also a matplotlib dependency)
    ],
    extras_require={
        "cpu": ["tensorflow-cpu>=2.16"],
        "gpu": ["tensorflow[and-cuda]>=2.16"],
        # The test tools without TensorFlow (tasks.py adds the cpu or gpu extra), and with it.
        "testtools": ["pytest", "pytest-xdist", "scipy", "ruff"],
        "test": ["tensorflow-cpu>=2.16", "pytest", "pytest-xdist", "scipy", "ruff"],
        "bench": ["scipy", "matplotlib"],
    },
    license="Apache-2.0",
)
