"""Loss state kept in a layer of the model (the cross-batch memory's bank, the spread-out
draws), and how a loaded model's compiled loss finds that layer again.

While `keras.models.load_model` runs, the model's layers are made first (their `from_config`),
then its compiled loss (whose `from_config` takes the layer from here, by the name its config
recorded), then the weights are loaded (which removes the layer from here). So the loaded loss
and the loaded model share one layer, as they did before saving. Weak references: a layer nobody
holds is forgotten.
"""

import weakref

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
