"""Saves small models compiled with each tensorflow-addons metric-learning loss, as TFA-era
projects saved them, with what TF 2.15 computed on them.

Runs in the legacy environment (tensorflow-cpu==2.15.1 + tensorflow-addons==0.23.0, Keras 2),
beside `generate_tfa_reference.py`; `.ci/run` runs

    <legacy venv>/bin/python tests/parity/generate_tfa_models.py OUTPUT_DIR

and tests/losses/test_tfa_saved_models.py loads the files on Keras 3 after `import tf_svmax`
alone. In OUTPUT_DIR, for each of TFA's six loss classes and six functions (the names its
files store): `NAME.h5` (the legacy format Keras 3 reads); for two models `NAME.keras` (Keras
2.15's own zip format) and for one a SavedModel folder `NAME.savedmodel` (Keras 3's
`load_model` cannot read SavedModels at all; `keras.layers.TFSMLayer` can, for inference); and
`models.npz`: each model's input batch, labels, `predict` output, the loss `train_on_batch`
returned and the weights after that one SGD step, all computed here in TF 2.15. This file
imports only numpy, tensorflow and tensorflow_addons, never tf_svmax.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_addons as tfa

SEED = 20261126
BATCH = 8
LEARNING_RATE = 0.1
# The models saved in Keras 2.15's `.keras` format and as a SavedModel too: what Keras 3 can
# and cannot read of those formats does not depend on the loss (the files stay small).
KERAS_FORMAT = ("TripletSemiHardLoss", "triplet_semihard_loss")
SAVEDMODEL = "TripletSemiHardLoss"


def _labels(rng, loss):
    """The labels a TFA user fed this loss: class ids, 0/1 pair labels, or multi-hot rows."""
    if loss in ("ContrastiveLoss", "contrastive_loss"):
        return rng.integers(0, 2, size=BATCH).astype(np.float32)
    if loss in ("NpairsMultilabelLoss", "npairs_multilabel_loss"):
        multi = (rng.uniform(size=(BATCH, 4)) < 0.3).astype(np.float32)
        multi[np.arange(BATCH), np.arange(BATCH) % 4] = 1.0  # every row has a label
        return multi
    return np.repeat(np.arange(BATCH // 2), 2).astype(np.int32)


def _head(loss):
    """The model's output layers: embeddings for the triplet and lifted losses, a distance per
    pair for the contrastive loss, a `[b, b]` similarity matrix for the N-pair losses."""
    if loss in ("ContrastiveLoss", "contrastive_loss"):
        return [tf.keras.layers.Dense(1, activation="softplus")]
    if loss.lower().startswith("npairs"):
        return [tf.keras.layers.Dense(BATCH)]
    return [tf.keras.layers.Dense(3), tf.keras.layers.UnitNormalization()]


# Compiled losses: each class with a non-default hyperparameter where it has one (so its
# config travels), and each function by itself (saved by its registered name).
LOSSES = {
    "TripletSemiHardLoss": lambda: tfa.losses.TripletSemiHardLoss(margin=0.5),
    "TripletHardLoss": lambda: tfa.losses.TripletHardLoss(margin=0.5),
    "ContrastiveLoss": lambda: tfa.losses.ContrastiveLoss(margin=0.5),
    "LiftedStructLoss": lambda: tfa.losses.LiftedStructLoss(margin=0.5),
    "NpairsLoss": lambda: tfa.losses.NpairsLoss(),
    "NpairsMultilabelLoss": lambda: tfa.losses.NpairsMultilabelLoss(),
    "triplet_semihard_loss": lambda: tfa.losses.triplet_semihard_loss,
    "triplet_hard_loss": lambda: tfa.losses.triplet_hard_loss,
    "contrastive_loss": lambda: tfa.losses.contrastive_loss,
    "lifted_struct_loss": lambda: tfa.losses.lifted_struct_loss,
    "npairs_loss": lambda: tfa.losses.npairs_loss,
    "npairs_multilabel_loss": lambda: tfa.losses.npairs_multilabel_loss,
}


_FUNCTIONS = {
    "npairsloss": tfa.losses.npairs_loss,
    "npairs_loss": tfa.losses.npairs_loss,
    "npairsmultilabelloss": tfa.losses.npairs_multilabel_loss,
    "npairs_multilabel_loss": tfa.losses.npairs_multilabel_loss,
}


def _tape_step(model, fn, x, y):
    """One SGD step (the compiled learning rate) on ``fn(y, model(x))``; the loss before it."""
    with tf.GradientTape() as tape:
        value = fn(tf.constant(y), model(x, training=True))
    gradients = tape.gradient(value, model.trainable_variables)
    for variable, gradient in zip(model.trainable_variables, gradients, strict=True):
        variable.assign_sub(LEARNING_RATE * gradient)
    return value.numpy()


def build(loss, seed):
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential(
        # tanh: no exact ties between embeddings (see generate_tfa_reference._net).
        [tf.keras.Input((6,)), tf.keras.layers.Dense(8, activation="tanh"), *_head(loss)]
    )
    model.compile(
        optimizer=tf.keras.optimizers.SGD(learning_rate=LEARNING_RATE), loss=LOSSES[loss]()
    )
    return model


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    arrays, models = {}, []
    for index, loss in enumerate(LOSSES):
        model = build(loss, SEED + index)
        x = rng.standard_normal((BATCH, 6)).astype(np.float32)
        y = _labels(rng, loss)
        files = {"h5": f"{loss}.h5"}
        model.save(os.path.join(out, files["h5"]))
        if loss in KERAS_FORMAT:
            files["keras"] = f"{loss}.keras"
            model.save(os.path.join(out, files["keras"]))
        if loss == SAVEDMODEL:
            files["savedmodel"] = f"{loss}.savedmodel"
            model.save(os.path.join(out, files["savedmodel"]), save_format="tf")
        # What TF 2.15 computes on the saved model: its output, then one training step.
        arrays[f"{loss}:x"], arrays[f"{loss}:y"] = x, y
        arrays[f"{loss}:predict"] = model.predict(x, verbose=0)
        if loss.lower().startswith("npairs"):
            # Keras 2's compile expands [b] labels to [b, 1], on which TFA's N-pair losses
            # broadcast into [b, 1, b] (`fit` gives NaN): the reference step is TFA's function
            # on the labels as given, one SGD step of a GradientTape.
            step = "tape"
            value = _tape_step(model, _FUNCTIONS[loss.lower()], x, y)
        else:
            step = "train_on_batch"
            value = model.train_on_batch(x, y)
        arrays[f"{loss}:loss"] = np.float32(value)
        for i, weight in enumerate(model.get_weights()):
            arrays[f"{loss}:step_weights/{i}"] = weight
        models.append(
            {
                "loss": loss,
                "registered_name": f"Addons>{loss}",
                "kind": "class" if loss[0].isupper() else "function",
                "files": files,
                "weights": len(model.get_weights()),
                "step": step,
            }
        )
    meta = {
        "tensorflow": tf.__version__,
        "tensorflow_addons": tfa.__version__,
        "seed": SEED,
        "learning_rate": LEARNING_RATE,
        "models": models,
    }
    np.savez_compressed(
        os.path.join(out, "models.npz"), __meta__=np.array(json.dumps(meta)), **arrays
    )
    print(
        f"wrote {len(models)} tensorflow-addons-era models to {out} "
        f"(TF {tf.__version__}, TFA {tfa.__version__})"
    )


if __name__ == "__main__":
    main(sys.argv[1])
