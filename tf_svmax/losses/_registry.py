"""The losses' registry and their string names (``"tf_svmax>TripletSemiHardLoss"`` in
`model.compile`).

Every public object of `tf_svmax.losses` is registered where it is defined, by the `register`
decorator (in place of Keras' `register_keras_serializable`, which it applies): the loss
classes, the loss functions, their base classes, the layers that hold a loss' state and the
helpers. From that one registry come the package's ``__all__``, the string names
(`install_registered`, `get`), the names tensorflow-addons' files store (``tfa=True``) and the
tests' tables of losses (tests/losses/test_registry_backends.py and the tables derived in
other test files), and the lists of losses the docs' pages must name (tests/test_docs.py).
Adding a loss is its module (its class and function decorated), one import line in
`tf_svmax/losses/__init__.py`, its reference test and its row in docs/guide/backends.md:
docs/guide/adding-a-loss.md.

String names:

Keras 3.15's `keras.losses.get` (which `compile` calls through `compile_utils.get_loss`)
resolves a *string* only from its own module-level table of built-in losses
(``ALL_OBJECTS_DICT.get(identifier)``); unlike a dict identifier, which goes through
`keras.saving.deserialize_keras_object` and so consults `keras.saving.get_custom_objects()`, a
string never looks at the public registrations (`register_keras_serializable`,
`get_custom_objects`, `custom_object_scope`: all checked, all refused with "Could not interpret
loss identifier"). So the names of our losses (``"tf_svmax>ClassName"``, the names `.keras` files
use, registered publicly as well) are also added to that table, reached through
`keras.losses.get`'s module globals so that nothing imports `keras.src`; the table is the same on
every backend. If a future Keras moves the table, string lookup in `compile` is skipped (a
RuntimeWarning says so) and `tf_svmax.losses.get` and loading saved files keep working; if a
future Keras resolves registered names itself (asked in keras-team/keras#20112; not so in 3.15.1
nor in its 3.16.0 development tree of August 2026), nothing is written.

Why this private touch is kept (issue 41 asked for public API only): dropping it would break
``compile(loss="tf_svmax>Name")`` in users' code, which the migration guide offers TFA users
(Keras 2 resolved registered names there). A `.keras` file compiled so does not need it: loading
deserializes the stored name through the public registrations. It is the library's one write
into Keras' private state, done once at import, tested (tests/losses/test_loss_classes_backends.py)
on every backend.
"""

import dataclasses
import inspect
import warnings

import keras

PREFIX = "tf_svmax>"
PACKAGE = PREFIX[:-1]

# The kinds of registered object: a loss class (a `keras.losses.Loss`), a loss function, a layer
# holding a loss' state, a base class to build losses on (`LabelLoss`), and a helper (public, no
# loss: e.g. `random_negatives`).
KINDS = ("loss", "function", "layer", "base", "helper")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered object. `tfa`: one of tensorflow-addons' metric-learning losses (its
    ``"Addons>Name"`` resolves to ours)."""

    obj: object
    kind: str
    tfa: bool = False

    @property
    def name(self):
        return self.obj.__name__

    @property
    def required_arguments(self):
        """A loss class' constructor arguments without a default (none: nameable by a string,
        which constructs it with its defaults)."""
        if self.kind != "loss":
            return ()
        parameters = list(inspect.signature(self.obj.__init__).parameters.values())[1:]
        return tuple(
            p.name
            for p in parameters
            if p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        )


# name -> Entry, in the order of registration (the modules' import order).
REGISTRY = {}


def register(obj=None, *, tfa=False, helper=False, base=False):
    """Registers a public object of `tf_svmax.losses` (``@register``, ``@register(tfa=True)``,
    ``@register(helper=True)``, ``@register(base=True)``): in the registry, and with Keras'
    serialization under ``"tf_svmax>Name"`` (`keras.saving.register_keras_serializable`) where
    Keras can save it (a class with `get_config`, a function). Its kind follows from what it
    is: a `keras.losses.Loss` class is a loss (a base class to build losses on with
    ``base=True``), a `keras.layers.Layer` class a layer, a function a loss function unless
    ``helper=True`` (public, but no loss: not a string name)."""

    def decorate(obj):
        if helper:
            kind = "helper"
        elif base:
            kind = "base"
        elif inspect.isclass(obj) and issubclass(obj, keras.losses.Loss):
            kind = "loss"
        elif inspect.isclass(obj) and issubclass(obj, keras.layers.Layer):
            kind = "layer"
        elif inspect.isfunction(obj):
            kind = "function"
        else:
            raise TypeError(
                f"register: expected a Loss or Layer class or a function, or helper=True; "
                f"received {obj!r}."
            )
        if obj.__name__ in REGISTRY and REGISTRY[obj.__name__].obj is not obj:
            raise ValueError(f"register: the name {obj.__name__!r} is registered twice.")
        if not inspect.isclass(obj) or hasattr(obj, "get_config"):
            obj = keras.saving.register_keras_serializable(package=PACKAGE)(obj)
        REGISTRY[obj.__name__] = Entry(obj, kind, tfa)
        return obj

    return decorate if obj is None else decorate(obj)


def entries(*kinds):
    """The registered entries of `kinds` (every kind if none), in registration order."""
    return [entry for entry in REGISTRY.values() if not kinds or entry.kind in kinds]


def public_names():
    """Every registered name, sorted: `tf_svmax.losses.__all__` (with `get`)."""
    return sorted(REGISTRY)


def nameable():
    """The objects a string names: the loss classes constructible with their defaults and the
    loss functions."""
    return [
        e.obj
        for e in entries("loss", "function")
        if e.kind == "function" or not e.required_arguments
    ]


def names(classes):
    return {f"{PREFIX}{cls.__name__}": cls for cls in classes}


def install_registered():
    """Makes every registered loss class and function a string name in `compile`, and the TFA
    ones (``tfa=True``) resolve from the names TensorFlow-Addons' files store."""
    install(nameable())
    tfa = entries("loss", "function")
    install_tfa_names(
        [e.obj for e in tfa if e.tfa and e.kind == "loss"],
        [e.obj for e in tfa if e.tfa and e.kind == "function"],
    )


def install(objects):
    """Adds ``"tf_svmax>Name"`` for `objects` (loss classes constructible without arguments,
    loss functions: tensorflow-addons registered its functions by name too) to Keras' table."""
    _install(list(objects))


def _keras_resolves(name):
    """Whether `keras.losses.get` resolves `name` (a registered object's name) by itself."""
    try:
        keras.losses.get(name)
    except ValueError:
        return False
    return True


def _install(classes):
    if classes and _keras_resolves(next(iter(names(classes)))):
        # A Keras whose string lookup consults the public registrations (keras-team/keras#20112)
        # needs no entry in its private table: this shim retires itself there.
        return
    table = getattr(keras.losses.get, "__globals__", {}).get("ALL_OBJECTS_DICT")
    if not isinstance(table, dict):
        warnings.warn(
            "tf_svmax: this Keras version has no loss-name table; use instances or "
            "tf_svmax.losses.get('tf_svmax>Name') instead of strings in compile().",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    table.update(names(classes))


# The package tensorflow-addons registered its Keras objects under: a TFA-era file names its
# compiled loss "Addons>TripletSemiHardLoss" or "Addons>triplet_semihard_loss".
TFA_PACKAGE = "Addons"


def install_tfa_names(classes, functions):
    """Makes the names TFA-era files store for tensorflow-addons' metric-learning losses
    resolve to ours, so that such models load after ``import tf_svmax`` alone
    (tests/losses/test_tfa_saved_models.py): ``"Addons>Name"`` for `classes` and `functions`
    (TFA's registered names), and the bare function name (``"triplet_semihard_loss"``), which
    is what Keras 2.15 writes into an `.h5` file compiled with a TFA function.

    Public API only: Keras' global custom objects (`keras.saving.get_custom_objects`), which
    every deserialization consults. Not `register_keras_serializable`: it would also rename
    our objects when saved; they keep saving as ``"tf_svmax>Name"``. A name the user has
    already mapped to something else is left alone."""
    custom_objects = keras.saving.get_custom_objects()
    for obj in (*classes, *functions):
        custom_objects.setdefault(f"{TFA_PACKAGE}>{obj.__name__}", obj)
    for function in functions:
        custom_objects.setdefault(function.__name__, function)


def get(identifier):
    """Resolves ``"tf_svmax>ClassName"`` to a loss instance (default arguments),
    ``"tf_svmax>function_name"`` to the function, anything else as `keras.losses.get` does."""
    if isinstance(identifier, str) and identifier.startswith(PREFIX):
        entry = REGISTRY.get(identifier[len(PREFIX) :])
        if entry is None or entry.kind not in ("loss", "function"):
            known = sorted(f"{PREFIX}{e.name}" for e in entries("loss", "function"))
            raise ValueError(
                f"Invalid value for argument `identifier`. Expected one of {known}. "
                f"Received: identifier={identifier!r}"
            )
        if entry.kind == "function":
            return entry.obj
        if entry.required_arguments:
            raise ValueError(
                f"Invalid value for argument `identifier`: {identifier!r} names a loss whose "
                f"constructor needs arguments ({', '.join(entry.required_arguments)}); "
                f"expected an instance, e.g. {entry.name}(...), or a name of a loss "
                "constructible with its defaults."
            )
        return entry.obj()
    return keras.losses.get(identifier)
