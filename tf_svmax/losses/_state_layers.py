"""Loss state kept in a layer of the model (the cross-batch memory's bank, the spread-out
draws), and how a loaded model's compiled loss finds that layer again.

While `keras.models.load_model` runs, the model's layers are made first (their `from_config`),
then its compiled loss (whose `from_config` takes the layer from here, by the name its config
recorded), then the weights are loaded (which removes the layer from here). So the loaded loss
and the loaded model share one layer, as they did before saving. Weak references: a layer nobody
holds is forgotten.
"""

import weakref

import keras

from tf_svmax import checks

_AWAITING_WEIGHTS = weakref.WeakValueDictionary()


def awaiting_weights(layer):
    """Marks `layer` (just made by `from_config`) as one whose weights are not loaded yet."""
    _AWAITING_WEIGHTS[layer.name] = layer
    return layer


def weights_loaded(layer):
    """`layer`'s weights are loaded: no later loss may take it."""
    if _AWAITING_WEIGHTS.get(layer.name) is layer:
        del _AWAITING_WEIGHTS[layer.name]


def restored_layer(name, accepts):
    """The layer `name` of a model being loaded (made, weights not yet loaded) if
    ``accepts(layer)``, taken off the list; None otherwise (not loading a model)."""
    layer = _AWAITING_WEIGHTS.get(name)
    if layer is None or not accepts(layer):
        return None
    del _AWAITING_WEIGHTS[name]
    return layer


class StateLayer(keras.layers.Layer):
    """Base of a layer that holds a loss' state in the model: never trainable (its loss writes
    it; ``trainable=True`` is refused, saying `written_by`); made by `from_config` while a model
    loads, it waits for its weights here, and the loaded model's compiled loss takes it
    (`restored_layer`)."""

    def __init__(self, written_by, **kwargs):
        # `get_config` (hence a `.keras` file) carries ``trainable=False``: accepted again.
        if checks.check_bool(kwargs.pop("trainable", False), "trainable"):
            raise ValueError(checks.invalid("trainable", f"False ({written_by})", True))
        super().__init__(trainable=False, **kwargs)

    @classmethod
    def from_config(cls, config):
        return awaiting_weights(super().from_config(config))

    def load_own_variables(self, store):
        weights_loaded(self)
        super().load_own_variables(store)
