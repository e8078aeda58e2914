"""An experiment package's training code, imported when first used (PEP 562).

The packages under `trainers/` name their config (flags, checks: no Keras) and their training
code (model, data, loop: Keras and TensorFlow) in one namespace. A program imports the package
to define and check its flags; the training code is imported only when a name of it is first
read, after the flags are checked, so that ``--help`` and a refused flag return without
importing TensorFlow:

    __getattr__ = lazy.attributes(__name__, {"train": ("train_retrieval", "setup"), ...})
"""

import importlib
import sys


def attributes(package, modules):
    """A module ``__getattr__`` for `package` that, the first time one of the names in
    `modules` (submodule -> its names) is read, imports every submodule listed and binds all
    their names in the package (as eager imports in its ``__init__`` would have: a name that
    is also a submodule's, e.g. two_head's ``evaluate``, is the function)."""
    owner = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name):
        if name not in owner:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace = vars(sys.modules[package])
        for module, names in modules.items():
            loaded = importlib.import_module(f"{package}.{module}")
            namespace.update({n: getattr(loaded, n) for n in names})
        return namespace[name]

    return __getattr__
