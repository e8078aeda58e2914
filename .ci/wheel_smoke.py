"""The installed wheel at work: .ci/check_wheel.sh runs this in a fresh virtual environment,
from a directory outside the checkout, with ``python -I`` (so only the installed tf_svmax can be
imported). Usage: python -I wheel_smoke.py CHECKOUT_ROOT SCRATCH_DIR

Imports tf_svmax, fits one step of a small embedding model compiled with a tf_svmax loss
(TripletSemiHardLoss + SVMax through RegularizedLoss) and the SVMax metrics, saves it as .keras,
loads it back with keras.models.load_model and no custom_objects (the classes are found through
their registration), and checks that the predictions and the evaluated loss are the same.
Exits non-zero with a message on the first failure.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def fail(message):
    sys.exit(f"wheel smoke: FAILED: {message}")


def main(checkout, scratch):
    import keras
    import numpy as np

    import tf_svmax

    source = Path(tf_svmax.__file__).resolve()
    if checkout in source.parents or "site-packages" not in source.parts:
        fail(f"tf_svmax was imported from {source}, not from the installed wheel")
    print(f"wheel smoke: imported tf_svmax {tf_svmax.__version__} from {source.parent}")

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    embeddings = keras.layers.UnitNormalization()(keras.layers.Dense(16)(inputs))
    model = keras.Model(inputs, embeddings)
    model.compile(
        optimizer="sgd",
        loss=tf_svmax.losses.RegularizedLoss(
            tf_svmax.losses.TripletSemiHardLoss(margin=0.2), [tf_svmax.losses.SVMaxLoss(0.1)]
        ),
        metrics=tf_svmax.metrics.svmax_metrics(),
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8)).astype("float32")
    y = np.repeat(np.arange(8), 4).astype("int32")  # P x K = 8 x 4
    history = model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    if model.optimizer.iterations.numpy() != 1:
        fail(f"fit took {model.optimizer.iterations.numpy()} steps, expected 1")
    loss = history.history["loss"][0]
    if not np.isfinite(loss):
        fail(f"the training loss is {loss}")
    print(f"wheel smoke: fitted one step, loss {loss:.6f}")

    path = Path(scratch) / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)  # no custom_objects: registration must find them
    inner = [type(term).__name__ for term in (loaded.loss.loss, *loaded.loss.regularizers)]
    if type(loaded.loss) is not tf_svmax.losses.RegularizedLoss or inner != [
        "TripletSemiHardLoss",
        "SVMaxLoss",
    ]:
        fail(f"the loaded model's loss is {loaded.loss!r} ({inner})")
    print(f"wheel smoke: saved and loaded {path.name} ({path.stat().st_size} bytes), loss {inner}")

    before, after = model.predict(x, verbose=0), loaded.predict(x, verbose=0)
    if not np.array_equal(before, after):
        fail(f"predictions differ after loading (max {np.max(np.abs(before - after))})")
    evaluated = model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)["loss"]
    reloaded = loaded.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)["loss"]
    if evaluated != reloaded:
        fail(f"the evaluated loss differs after loading: {evaluated} vs {reloaded}")
    print(f"wheel smoke: predictions {before.shape} equal, evaluated loss equal ({reloaded:.6f})")
    print("wheel smoke: OK")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[0])
    main(Path(sys.argv[1]).resolve(), sys.argv[2])
