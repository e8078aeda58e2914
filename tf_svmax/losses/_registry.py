"""String names for the losses: ``"tf_svmax>TripletSemiHardLoss"`` in `model.compile`.

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

import warnings

import keras

PREFIX = "tf_svmax>"


def names(classes):
    return {f"{PREFIX}{cls.__name__}": cls for cls in classes}


def install(classes, functions=()):
    """Adds ``"tf_svmax>ClassName"`` for `classes` and ``"tf_svmax>function_name"`` for
    `functions` (tensorflow-addons registered its loss functions by name too) to Keras' table,
    and registers the functions for serialization (a model compiled with one saves by name)."""
    for function in functions:
        keras.saving.register_keras_serializable(package=PREFIX[:-1])(function)
    _install(list(classes) + list(functions))


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


def get(identifier, classes, functions=()):
    """Resolves ``"tf_svmax>ClassName"`` to a loss instance (default arguments),
    ``"tf_svmax>function_name"`` to the function, anything else as `keras.losses.get` does."""
    if isinstance(identifier, str) and identifier.startswith(PREFIX):
        table = names(classes)
        by_name = {f"{PREFIX}{f.__name__}": f for f in functions}
        if identifier in by_name:
            return by_name[identifier]
        table.update(by_name)
        if identifier not in table:
            raise ValueError(
                f"Invalid value for argument `identifier`. Expected one of {sorted(table)}. "
                f"Received: identifier={identifier!r}"
            )
        return table[identifier]()
    return keras.losses.get(identifier)
