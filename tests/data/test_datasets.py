import os

import numpy as np
import pytest

from tests.data import fake_trees
from tf_svmax import data


def _assert_split(split, train_classes, test_classes):
    for name, classes in (("train", train_classes), ("test", test_classes)):
        paths, labels = split[name]
        assert labels.dtype == np.int64 and len(paths) == len(labels)
        assert set(labels.tolist()) == set(classes)
        assert all(os.path.isfile(p) for p in paths)


def test_cub200_official_layout_and_class_split(tmp_path):
    base = fake_trees.make_cub(str(tmp_path))
    for root in (base, str(tmp_path)):  # the CUB_200_2011 folder or its parent
        split = data.read_cub200(root)
        _assert_split(split, {1, 2, 100}, {101, 150, 200})
    # Paths follow images.txt (by image id); labels come from image_class_labels.txt.
    ids = {}
    with open(os.path.join(base, "images.txt")) as f:
        for line in f:
            i, rel = line.split()
            ids[rel] = int(i)
    with open(os.path.join(base, "image_class_labels.txt")) as f:
        truth = {int(i): int(c) for i, c in (line.split() for line in f)}
    for name in ("train", "test"):
        paths, labels = split[name]
        for p, y in zip(paths, labels, strict=True):
            rel = os.path.relpath(p, os.path.join(base, "images"))
            assert truth[ids[rel]] == y


def test_cub200_errors_name_the_file(tmp_path):
    base = fake_trees.make_cub(str(tmp_path))
    os.rename(os.path.join(base, "image_class_labels.txt"), os.path.join(base, "x.txt"))
    with pytest.raises(FileNotFoundError, match=r"image_class_labels\.txt.*CUB_200_2011"):
        data.read_cub200(base)
    os.rename(os.path.join(base, "x.txt"), os.path.join(base, "image_class_labels.txt"))
    with open(os.path.join(base, "images.txt"), "a") as f:
        f.write("oops\n")
    with pytest.raises(data.DatasetFormatError, match=r"images\.txt:19: expected 2"):
        data.read_cub200(base)
    with pytest.raises(FileNotFoundError, match=r"Dataset directory not found"):
        data.read_cub200(str(tmp_path / "nowhere"))


def test_missing_images_are_reported(tmp_path):
    base = fake_trees.make_cub(str(tmp_path))
    paths, _ = data.read_cub200(base)["test"]
    os.remove(paths[0])
    with pytest.raises(FileNotFoundError, match=r"1 of 18 listed images are missing"):
        data.read_cub200(base)
    assert len(data.read_cub200(base, check_images=False)["test"][0]) == 9


def test_cars196_annotation_file_and_class_split(tmp_path):
    root = fake_trees.make_cars(str(tmp_path / "cars"))
    split = data.read_cars196(root)
    # The official train/test flag is ignored: the retrieval split is by class.
    _assert_split(split, {1, 2, 98}, {99, 150, 196})
    assert len(split["train"][0]) == 6 and len(split["test"][0]) == 6
    from scipy import io as scipy_io

    scipy_io.savemat(os.path.join(root, "cars_annos.mat"), {"something": np.zeros(3)})
    with pytest.raises(data.DatasetFormatError, match=r"cars_annos\.mat.*'annotations'"):
        data.read_cars196(root)
    os.remove(os.path.join(root, "cars_annos.mat"))
    with pytest.raises(FileNotFoundError, match=r"cars_annos\.mat"):
        data.read_cars196(root)


def test_sop_uses_class_id_not_super_class(tmp_path):
    base = fake_trees.make_sop(str(tmp_path))
    split = data.read_sop(str(tmp_path))
    _assert_split(split, {1, 2, 3}, {4, 5})
    with open(os.path.join(base, "Ebay_test.txt")) as f:
        lines = f.read().splitlines()
    with open(os.path.join(base, "Ebay_test.txt"), "w") as f:
        f.write("\n".join(lines[1:]) + "\n")  # header dropped
    with pytest.raises(data.DatasetFormatError, match=r"Ebay_test\.txt:1: expected the header"):
        data.read_sop(base)


def test_fgvr_lists(tmp_path):
    root = fake_trees.make_fgvr(str(tmp_path), image_dir="jpg")
    split = data.read_fgvr_lists(root, image_dir="jpg")
    _assert_split(split, {0, 1, 2}, {0, 1, 2})
    with pytest.raises(FileNotFoundError, match=r"listed images are missing"):
        data.read_fgvr_lists(root)  # wrong image folder
    with open(os.path.join(root, "lists", "test_all_sub_list.csv"), "w") as f:
        f.write("a,b\n1,2\n")
    with pytest.raises(data.DatasetFormatError, match=r"'label' and 'file_name'"):
        data.read_fgvr_lists(root, image_dir="jpg")


@pytest.mark.parametrize("split_dirs", [False, True])
def test_image_folder(tmp_path, split_dirs):
    root = fake_trees.make_folder(str(tmp_path / "f"), split=split_dirs)
    split = data.read_image_folder(root)
    names = split["class_names"]
    assert names == ["ant", "bee", "cat", "dog", "eel"]
    if split_dirs:
        _assert_split(split, {0, 2, 4}, {1, 3})
    else:
        _assert_split(split, {0, 1, 2}, {3, 4})
    for paths, labels in (split["train"], split["test"]):
        for p, y in zip(paths, labels, strict=True):
            assert os.path.basename(os.path.dirname(p)) == names[y]


def test_image_folder_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"no class sub-folders in"):
        data.read_image_folder(str(empty))
    fake_trees.make_folder(str(tmp_path / "one"), classes=("ant",))
    with pytest.raises(ValueError, match=r"at least 2"):
        data.read_image_folder(str(tmp_path / "one"))


def test_read_dataset_dispatch(tmp_path):
    fake_trees.make_sop(str(tmp_path))
    assert set(data.read_dataset("sop", str(tmp_path))) == {"train", "test"}
    with pytest.raises(ValueError, match=r"argument `name`"):
        data.read_dataset("imagenet", str(tmp_path))


def _append(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")


@pytest.mark.parametrize("entry", ["../../../../etc/passwd", "/etc/hostname", "a/../../x.jpg"])
def test_list_files_cannot_name_images_outside_the_dataset(tmp_path, entry):
    cub = fake_trees.make_cub(str(tmp_path / "cub"))
    _append(os.path.join(cub, "images.txt"), f"999 {entry}")
    _append(os.path.join(cub, "image_class_labels.txt"), "999 1")
    with pytest.raises(data.DatasetFormatError, match=r"images\.txt:19: .*leaves the dataset"):
        data.read_cub200(cub, check_images=False)
    sop = fake_trees.make_sop(str(tmp_path / "sop"))
    _append(os.path.join(sop, "Ebay_test.txt"), f"999 4 1 {entry}")
    with pytest.raises(data.DatasetFormatError, match=r"Ebay_test\.txt:6: .*leaves the dataset"):
        data.read_sop(sop, check_images=False)
    fgvr = fake_trees.make_fgvr(str(tmp_path / "fgvr"))
    _append(os.path.join(fgvr, "lists", "train_all_sub_list.csv"), f"6,0,{entry}")
    with pytest.raises(data.DatasetFormatError, match=r"train_all_sub_list\.csv:8: .*leaves"):
        data.read_fgvr_lists(fgvr, image_dir="jpg", check_images=False)


def test_duplicate_image_ids_are_refused(tmp_path):
    cub = fake_trees.make_cub(str(tmp_path))
    _append(os.path.join(cub, "images.txt"), "3 001.x/dup.jpg")
    with pytest.raises(
        data.DatasetFormatError, match=r"images\.txt:19: image id 3 is listed twice"
    ):
        data.read_cub200(cub, check_images=False)


def test_image_folder_lists_regular_files_only(tmp_path):
    root = fake_trees.make_folder(str(tmp_path))
    os.makedirs(os.path.join(root, "ant", "folder.jpg"))
    os.symlink("loop.jpg", os.path.join(root, "ant", "loop.jpg"))  # points at itself
    os.symlink(os.path.join(root, "ant", "0.jpg"), os.path.join(root, "ant", "link.jpg"))
    paths, _ = data.read_image_folder(root)["train"]
    names = sorted(os.path.basename(p) for p in paths if "/ant/" in p)
    assert names == ["0.jpg", "1.png", "link.jpg"]
