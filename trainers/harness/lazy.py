"""An experiment package's training code, imported when first used (PEP 562).

The packages under `trainers/` name their config (flags, checks: no Keras) and their training
code (model, data, loop: Keras and TensorFlow) in one namespace, one table of submodules and
their names. A program imports the package to define and check its flags, which imports only
the config; the training code is imported only when a name of it is first read, after the flags
are checked, so that ``--help`` and a refused flag return without importing TensorFlow:

    __getattr__, __all__ = lazy.exports(
        __name__, {"config": ("RetrievalConfig", "resolve"), "train": ("train_retrieval",), ...}
    )

The flags themselves are checked with the library's validators and name tables, which
`library_args` holds without importing Keras, and with the losses' declared capabilities,
which `library_declared` reads from their source.
"""

import importlib
import importlib.util
import os
import sys
import types

LIBRARY_ARGS = "tf_svmax._args"
LIBRARY_DECLARED = "tf_svmax.losses._declared"


def _library_module(name):
    """The library's Keras-free module `name` (``tf_svmax._args``, ``tf_svmax.losses._declared``:
    each imports only the standard library and NumPy, and no other module of the package),
    loaded from the installed package's folder without running ``tf_svmax/__init__.py``, which
    imports Keras and registers the library's objects (seconds). It is bound in
    ``sys.modules`` under its own name, so that an import of it finds this module once Keras
    is imported (the library's ``from tf_svmax._args import ...``: the same validators and the
    same `WeightsFileError` class)."""
    if name in sys.modules:  # tf_svmax is imported already (a test process)
        return sys.modules[name]
    package = importlib.util.find_spec("tf_svmax")  # finds the package without importing it
    path = os.path.join(package.submodule_search_locations[0], *name.split(".")[1:]) + ".py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


# The library's argument validators and name tables (`tf_svmax._args`).
library_args = _library_module(LIBRARY_ARGS)
# The losses' declared capabilities, read from their source (`tf_svmax.losses._declared`).
library_declared = _library_module(LIBRARY_DECLARED)


def attributes(package, modules):
    """A module ``__getattr__`` for `package` that, the first time one of the names in
    `modules` (submodule -> its names) is read, imports the submodule holding it and binds the
    names of every listed submodule imported by then (as eager imports in its ``__init__``
    would have: a name that is also a submodule's, e.g. two_head's ``evaluate``, is the
    function, also where importing one submodule imported another). The package's config
    (Keras-free) and its training code (Keras) are so listed side by side: reading a config
    name does not import the training code."""
    owner = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name):
        if name not in owner:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        importlib.import_module(f"{package}.{owner[name]}")
        namespace = vars(sys.modules[package])
        for module, names in modules.items():
            loaded = sys.modules.get(f"{package}.{module}")
            # A submodule still being imported (it imported another of the package's) has
            # not defined all its names yet: bound on a later read, once it has.
            if loaded is not None and all(hasattr(loaded, n) for n in names):
                namespace.update({n: getattr(loaded, n) for n in names})
        return namespace[name]

    return __getattr__


def exports(package, modules):
    """``(__getattr__, __all__)`` for `package`'s ``__init__``, called after its eager imports:
    `attributes`' ``__getattr__``, and every public name of the package, sorted: those its
    ``__init__`` imported so far (not submodules) and those of `modules`. A name is listed
    once, where the package imports it or reads it lazily."""
    eager = [
        name
        for name, value in vars(sys.modules[package]).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    ]
    lazy = [name for names in modules.values() for name in names]
    return attributes(package, modules), sorted({*eager, *lazy})
