"""The two-head trainer: paper defaults, losses per mode, data protocols, records, resume, CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.data import fake_trees
from tf_svmax import losses, models
from trainers import two_head

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path, **kwargs):
    base = dict(
        output_dir=str(tmp_path / "run"),
        dataset="digits",
        train_steps=4,
        eval_every=2,
        trace_every=1,
        batch_p=4,
        embedding_dim=16,
        kmeans_max_iter=20,
        verbose=0,
    )
    return two_head.TwoHeadConfig(**{**base, **kwargs})


@pytest.mark.parametrize(
    "mode, lam",
    [("softmax", 0.0), ("center", 0.003), ("semi_hard", 1.0), ("hard", 1.0), ("ole", 0.25)],
)
def test_paper_lambda_per_mode(mode, lam):
    config = two_head.resolve(two_head.TwoHeadConfig(output_dir="x", mode=mode))
    assert config.regularizer_lambda == lam
    assert config.batch_p * config.batch_k == 32 and config.embedding_dim == 256
    assert config.learning_rate == 0.01 and config.recall_ks == (1, 4, 8, 16)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mode="softmax", regularizer_lambda=1.0), "--mode=softmax has no regularizer"),
        (dict(imbalance_ratio=0.5), "`--imbalance_ratio`"),
        (dict(test_fraction=1.0), "`--test_fraction`"),
        (dict(train_images_per_class=0), "`--train_images_per_class`"),
        (dict(dataset="fgvr"), "needs --data_dir"),
        (dict(data_dir="/tmp"), "takes no --data_dir"),
        (dict(backbone="resnet50"), "small grey images"),
        (dict(train_steps=10, eval_every=3), "multiple of --eval_every"),
        (dict(batch_k=1), r"`--batch_k`. Expected an int >= 2. Received: --batch_k=1"),
        (dict(batch_k=-3), r"`--batch_k`. Expected an int >= 2. Received: --batch_k=-3"),
        (
            dict(mode="hard", batch_p=1),
            r"`--batch_p`. Expected an int >= 2 with --mode=hard \(negatives\). Received: "
            "--batch_p=1",
        ),
        (dict(mode="ole", jit_compile=True), "--mode=ole cannot be XLA-compiled"),
        (dict(mode="softmax", margin=0.5), "--margin applies to --mode=semi_hard only"),
        (dict(mode="center", margin=0.2), "--margin applies to --mode=semi_hard only"),
        (dict(mode="hard", center_alpha=0.5), "--center_alpha applies to --mode=center only"),
        (dict(mode="center", center_alpha=2.0), r"`--center_alpha`. Expected a float in \(0, 1\]"),
        (dict(weights="imagenet"), "small_cnn_bn has no ImageNet weights"),
        (dict(weights="/nonexistent.weights.h5"), "is not a file; expected a .weights.h5 file[.]"),
        (
            dict(dataset="folder", data_dir="/tmp", backbone="resnet50", weights="/no.weights.h5"),
            "--weights=/no.weights.h5 is not a file",
        ),
        (dict(output_dir="/dev/null"), "`--output_dir`"),
    ],
)
def test_refused_combinations(kwargs, message):
    with pytest.raises(two_head.ConfigError, match=message):
        two_head.resolve(two_head.TwoHeadConfig(**{"output_dir": "x", **kwargs}))


@pytest.mark.parametrize("mode", ["softmax", "center", "semi_hard", "hard", "ole"])
def test_margin_and_center_rate_take_the_papers_values_in_their_mode_only(mode):
    config = two_head.resolve(two_head.TwoHeadConfig(output_dir="x", mode=mode))
    assert config.margin == (0.2 if mode == "semi_hard" else None)
    assert config.center_alpha == (0.5 if mode == "center" else None)


def test_losses_per_mode_sit_on_the_right_outputs():
    def built(mode, **kwargs):
        config = two_head.resolve(two_head.TwoHeadConfig(output_dir="x", mode=mode, **kwargs))
        return two_head.build_losses(config, num_classes=10)

    loss, weights, state = built("softmax")
    assert set(loss) == {"logits"} and not state
    loss, weights, state = built("hard")
    assert isinstance(loss["embedding"], losses.TripletHardLoss) and loss["embedding"].soft
    assert loss["embedding"].distance_metric == "squared-L2" and weights["embedding"] == 1.0
    loss, _, _ = built("semi_hard")
    assert loss["embedding"].margin == 0.2
    loss, weights, state = built("center")
    assert loss["embedding"].lambda_ == 0.003 and loss["embedding"].alpha == 0.5
    assert state["center_loss"] is loss["embedding"].centers
    loss, weights, _ = built("ole")
    assert set(loss) == {"logits", "features"} and loss["features"].lambda_ == 0.25
    # SVMax on the embedding head keeps its own weight when the output is weighted by λ.
    loss, weights, _ = built("semi_hard", regularizer_lambda=0.5, svmax_lambda=1.0)
    (svmax,) = loss["embedding"].regularizers
    assert weights["embedding"] * svmax.lambda_ == pytest.approx(1.0)
    loss, weights, _ = built("softmax", svmax_lambda=2.0)
    assert isinstance(loss["embedding"], losses.SVMaxLoss) and weights["embedding"] == 1.0


def test_digits_smoke_records_accuracies_retrieval_and_explanations(tmp_path):
    results = two_head.train_two_head(_config(tmp_path, mode="center"))
    run = tmp_path / "run"
    on_disk = json.loads((run / "results.json").read_text())
    assert on_disk["status"] == results["status"] == "completed"
    assert [e["step"] for e in on_disk["evaluations"]] == [0, 2, 4]
    last = on_disk["evaluations"][-1]
    for key in ("accuracy", "macro_accuracy", "recall_at_1", "recall_at_16", "nmi", "test_errors"):
        assert key in last
    assert len(last["per_class_accuracy"]) == 10
    assert on_disk["data"]["num_classes"] == 10 and on_disk["data"]["embedding_head"]
    assert all("step_seconds" in t for t in on_disk["trace"])
    for name in ("training.png", "model.keras"):
        assert (run / name).stat().st_size > 0
    # Accuracy recomputed from the saved model on the held-out images.
    split = two_head.load_split(two_head.resolve(_config(tmp_path)))
    model = keras.models.load_model(run / "model.keras")
    predictions = np.argmax(model.predict(split["test"][0], verbose=0)["logits"], axis=1)
    assert last["accuracy"] == pytest.approx(np.mean(predictions == split["test"][1]))
    # The center loss's centers are in the checkpoint (a resumed run continues them).
    with h5py.File(run / "checkpoints" / "ckpt-4.weights.h5", "r") as f:
        state = [f["layers"][n] for n in f["layers"] if "state_variables" in n]  # beside the model
        assert [s["vars"]["0"].shape for s in state] == [(10, on_disk["config"]["embedding_dim"])]


def test_long_tailed_and_scarce_protocols(tmp_path):
    scarce = two_head.load_split(two_head.resolve(_config(tmp_path, train_images_per_class=3)))
    assert np.bincount(scarce["train"][1]).tolist() == [3] * 10
    balanced = two_head.load_split(two_head.resolve(_config(tmp_path)))
    assert len(scarce["test"][1]) == len(balanced["test"][1])  # the test split is untouched
    tail = two_head.load_split(two_head.resolve(_config(tmp_path, imbalance_ratio=10.0)))
    train_counts = np.bincount(tail["train"][1])
    test_counts = np.bincount(tail["test"][1])
    assert train_counts.max() / train_counts.min() >= 7  # ~10 up to rounding
    # Test classes follow the training distribution (so macro and micro accuracy differ).
    assert np.corrcoef(train_counts, test_counts)[0, 1] > 0.95
    assert test_counts.min() >= 1 and train_counts.min() >= 2


def test_fgvr_tree_smoke(tmp_path):
    root = fake_trees.make_fgvr(str(tmp_path / "flowers"), per_class=4)
    config = _config(
        tmp_path,
        dataset="fgvr",
        data_dir=root,
        image_dir="jpg",
        backbone="small_cnn",
        input_size=32,
        batch_p=2,
        recall_ks=(1,),
        mode="semi_hard",
    )
    results = two_head.train_two_head(config)
    assert results["status"] == "completed"
    assert results["data"]["num_classes"] == 3 and results["data"]["test_images"] == 12


def _cli(*flags):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "trainers.train_two_head", *flags]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_cli_refuses_bad_flags_and_documents_the_papers_values(tmp_path):
    never = tmp_path / "never"
    for flags, message in (
        (("--mode=softmax", "--regularizer_lambda=1"), "--mode=softmax has no regularizer"),
        (("--imbalance_ratio=0.5",), "--imbalance_ratio"),
        (("--mode=triplet",), "triplet"),
    ):
        done = _cli(*flags, f"--output_dir={never}")
        assert done.returncode == 2 and message in done.stderr, (flags, done.stderr[-500:])
    assert not never.exists()
    done = _cli("--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for phrase in ("0.003 center", "0.25 ole", "paper: 256", "40000 ResNet-50", "--flagfile"):
        assert phrase in text, phrase


@pytest.mark.parametrize("corrupt", [None, "truncated"])
def test_cli_refuses_a_weights_file_it_cannot_load_naming_it(tmp_path, corrupt):
    """small_cnn_bn (the default backbone) given small_resnet's file, or its own cut short."""
    path = tmp_path / "backbone.weights.h5"
    source = "small_resnet" if corrupt is None else "small_cnn_bn"
    models.build_backbone(source, input_shape=(32, 32, 1)).save_weights(str(path))
    if corrupt:
        path.write_bytes(path.read_bytes()[:1000])
    done = _cli("--dataset=digits", f"--weights={path}", f"--output_dir={tmp_path / 'run'}")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"refused: --weights={path}" in done.stderr


@pytest.mark.parametrize("empty", ["train/", "train/a/"], ids=["no_classes", "no_images"])
def test_an_empty_folder_dataset_is_refused_naming_the_folder(tmp_path, empty):
    for split in ("train", "test"):
        (tmp_path / "tree" / empty.replace("train", split)).mkdir(parents=True)
    done = _cli(
        "--dataset=folder",
        f"--data_dir={tmp_path / 'tree'}",
        "--backbone=small_cnn",
        f"--output_dir={tmp_path / 'run'}",
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "refused: --dataset=folder --data_dir=" in done.stderr and "Traceback" not in done.stderr


def test_folder_without_train_and_test_splits_is_refused_before_reading(tmp_path):
    root = fake_trees.make_folder(str(tmp_path / "tree"))  # <class>/<image>, no train/ test/
    config = two_head.resolve(
        _config(tmp_path, dataset="folder", data_dir=root, backbone="small_cnn")
    )
    with pytest.raises(two_head.ConfigError, match="lacks train/ or test/"):
        two_head.load_split(config)


def test_the_checks_that_need_the_classes_refuse_when_the_split_is_read(tmp_path):
    digits = two_head.resolve(_config(tmp_path, batch_p=12))  # 10 digits
    with pytest.raises(two_head.ConfigError, match="--batch_p=12 exceeds the 10 classes"):
        two_head.load_split(digits)
    root = _four_class_tree(tmp_path)
    fake_trees.write_image(os.path.join(root, "test", "eel", "0.jpg"), 99)  # no training image
    folder = two_head.resolve(
        _config(tmp_path, dataset="folder", data_dir=root, backbone="small_cnn", batch_p=2)
    )
    with pytest.raises(two_head.ConfigError, match="1 test classes have no training image"):
        two_head.load_split(folder)


def test_every_library_kmeans_seeding_is_a_choice():
    from tf_svmax.metrics import kmeans

    for init in kmeans.INITS:  # k-means++-sklearn was missing from the flag's choices
        assert two_head.resolve(two_head.TwoHeadConfig(output_dir="x", kmeans_init=init))


def _four_class_tree(tmp_path):
    """The same four classes in train/ and test/ (2 and 1 images), the folder layout."""
    root = tmp_path / "tree"
    for k, name in enumerate(("ant", "bee", "cat", "dog")):
        for part, count in (("train", 2), ("test", 1)):
            for j in range(count):
                fake_trees.write_image(str(root / part / name / f"{j}.jpg"), 10 * k + j)
    return str(root)


@pytest.mark.parametrize(
    "backbone, flag, size",
    [
        ("small_cnn", None, 224),
        ("inception_v3", None, 299),
        ("resnet50", None, 224),
        ("small_cnn", 48, 48),
    ],
)
def test_the_recorded_input_size_is_the_one_the_images_are_loaded_at(
    tmp_path, backbone, flag, size
):
    """One definition for both: before, an inception_v3 run loaded its images at 224 while its
    resolved config (and results.json) said 299, and a small backbone recorded None."""
    config = two_head.resolve(
        _config(
            tmp_path,
            dataset="folder",
            data_dir=_four_class_tree(tmp_path),
            backbone=backbone,
            input_size=flag,
        )
    )
    assert config.input_size == size
    split = two_head.load_split(config)
    assert split["input_shape"] == (size, size, 3)
    image = split["loaders"][1](tf.constant(split["test"][0][0]))
    assert tuple(image.shape) == (size, size, 3)


def test_an_inception_v3_run_loads_trains_and_records_299(tmp_path):
    """The whole run, not only its pieces: the images the run's setup loads (the same
    `setup` `train_two_head` calls), the model it builds and results.json all say 299."""
    config = _config(
        tmp_path,
        dataset="folder",
        data_dir=_four_class_tree(tmp_path),
        backbone="inception_v3",
        batch_p=2,
        batch_k=2,
        train_steps=1,
        eval_every=1,
        evaluate_untrained=False,
        recall_ks=(1,),
    )
    resolved, split, model, _ = two_head.setup(config)
    assert resolved.input_size == 299 and tuple(model.input_shape) == (None, 299, 299, 3)
    for loader in split["loaders"]:  # training (crop and flip) and evaluation
        assert tuple(loader(tf.constant(split["train"][0][0])).shape) == (299, 299, 3)
    results = two_head.train_two_head(config)
    assert results["status"] == "completed" and len(results["trace"]) == 1
    on_disk = json.loads((tmp_path / "run" / "results.json").read_text())
    recorded = on_disk["config"]
    assert (recorded["input_size"], recorded["backbone"]) == (299, "inception_v3")
