"""Tiny dataset trees in the official on-disk layouts, with real (generated) JPEG files."""

import os

import numpy as np
import tensorflow as tf


def write_image(path, seed, size=(12, 10), fmt="jpeg"):
    rng = np.random.default_rng(seed)
    pixels = tf.constant(rng.integers(0, 256, size=(*size, 3), dtype=np.uint8))
    data = tf.io.encode_jpeg(pixels) if fmt == "jpeg" else tf.io.encode_png(pixels)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tf.io.write_file(path, data)


def make_cub(root, classes=(1, 2, 100, 101, 150, 200), per_class=3):
    """CUB_200_2011/{images.txt, image_class_labels.txt, images/NNN.Name/*.jpg}, ids shuffled."""
    base = os.path.join(root, "CUB_200_2011")
    entries = []
    for c in classes:
        for j in range(per_class):
            entries.append((f"{c:03d}.Bird_{c}/Bird_{c}_{j:04d}_{c * 10 + j}.jpg", c))
    order = np.random.default_rng(0).permutation(len(entries))
    with (
        open(os.path.join(_mkdir(base), "images.txt"), "w") as fi,
        open(os.path.join(base, "image_class_labels.txt"), "w") as fl,
    ):
        for image_id, k in enumerate(order, start=1):
            rel, c = entries[k]
            fi.write(f"{image_id} {rel}\n")
            fl.write(f"{image_id} {c}\n")
            write_image(os.path.join(base, "images", rel), image_id)
    return base


def make_cars(root, classes=(1, 2, 98, 99, 150, 196), per_class=2):
    """cars_annos.mat (struct array `annotations` like the official file) + car_ims/*.jpg."""
    from scipy import io as scipy_io

    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    records = []
    number = 0
    for c in classes:
        for j in range(per_class):
            number += 1
            rel = f"car_ims/{number:06d}.jpg"
            write_image(os.path.join(root, rel), number)
            records.append((rel, 1, 2, 9, 8, c, j % 2))
    annotations = np.empty((1, len(records)), dtype=[(f, "O") for f in fields])
    for i, record in enumerate(records):
        annotations[0, i] = record
    class_names = np.empty((1, 196), dtype="O")
    class_names[0, :] = [f"Car model {i}" for i in range(1, 197)]
    scipy_io.savemat(
        os.path.join(_mkdir(root), "cars_annos.mat"),
        {"annotations": annotations, "class_names": class_names},
    )
    return root


def make_sop(root, train_classes=(1, 2, 3), test_classes=(4, 5), per_class=2):
    """Stanford_Online_Products/{Ebay_train.txt, Ebay_test.txt, <super>_final/*.JPG}."""
    base = _mkdir(os.path.join(root, "Stanford_Online_Products"))
    image_id = 0
    for name, classes in (("Ebay_train.txt", train_classes), ("Ebay_test.txt", test_classes)):
        lines = ["image_id class_id super_class_id path"]
        for c in classes:
            for j in range(per_class):
                image_id += 1
                super_id = 1 + c % 2
                rel = f"{['bicycle', 'chair'][super_id - 1]}_final/{1000 + c}_{j}.JPG"
                write_image(os.path.join(base, rel), image_id)
                lines.append(f"{image_id} {c} {super_id} {rel}")
        with open(os.path.join(base, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    return base


def make_fgvr(root, image_dir="jpg", classes=(0, 1, 2), per_class=2):
    """lists/{train_all_sub_list,test_all_sub_list}.csv written like pandas' to_csv."""
    for split in ("train", "test"):
        rows = [",label,file_name"]
        for i, (c, j) in enumerate((c, j) for c in classes for j in range(per_class)):
            name = f"{split}_{c}_{j}.jpg"
            write_image(os.path.join(root, image_dir, name), hash((split, c, j)) % 1000)
            rows.append(f"{i},{c},{name}")
        with open(
            os.path.join(_mkdir(os.path.join(root, "lists")), f"{split}_all_sub_list.csv"), "w"
        ) as f:
            f.write("\n".join(rows) + "\n")
    return root


def make_folder(root, classes=("ant", "bee", "cat", "dog", "eel"), per_class=2, split=False):
    for k, c in enumerate(classes):
        for j in range(per_class):
            sub = ("train" if k % 2 == 0 else "test") if split else ""
            fmt = "png" if j % 2 else "jpeg"
            ext = "png" if fmt == "png" else "jpg"
            write_image(os.path.join(root, sub, c, f"{j}.{ext}"), k * 10 + j, fmt=fmt)
    with open(os.path.join(_mkdir(root), "README.txt"), "w") as f:
        f.write("not a class folder\n")
    return root


def _mkdir(path):
    os.makedirs(path, exist_ok=True)
    return path
