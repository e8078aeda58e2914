"""Readers for the retrieval datasets in their official on-disk layouts, with the papers'
open-set splits (SVMax paper Sec. 4.1; Oh Song et al. 2016 for the class splits).

Every reader returns ``{"train": (paths, labels), "test": (paths, labels)}``: image paths
under `data_dir` (a NumPy string array) and int64 class labels, test classes disjoint from
training classes except for the FGVR classification lists. A missing directory, list file or
image, or a malformed line, raises an error that names the path and what was expected there.

- CUB-200-2011: ``images.txt``, ``image_class_labels.txt``, ``images/``; classes 1-100 train,
  101-200 test.
- Stanford CARS196: ``cars_annos.mat`` (``annotations``), ``car_ims/``; classes 1-98 / 99-196.
- Stanford Online Products: ``Ebay_train.txt``, ``Ebay_test.txt`` (label ``class_id``).
- FGVR lists: ``lists/<split>.csv`` with columns ``label`` and ``file_name`` (official lists).
- Folder per class: ``<class>/<image>`` (sorted classes split in half) or
  ``train/<class>/<image>`` and ``test/<class>/<image>``.
"""

import csv
import os

import numpy as np

from tf_svmax import checks

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


class DatasetFormatError(ValueError):
    """A dataset file exists but does not have the official format."""


def _require_dir(path, what):
    if not os.path.isdir(path):
        raise FileNotFoundError(f"Dataset directory not found: {path!r} (expected {what}).")


def _require_file(directory, name, dataset):
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{dataset}: expected the file {name!r} in {directory!r}, but {path!r} does not exist."
        )
    return path


def _check_images_exist(paths, dataset, limit=5):
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        shown = ", ".join(repr(p) for p in missing[:limit])
        raise FileNotFoundError(
            f"{dataset}: {len(missing)} of {len(paths)} listed images are missing, e.g. {shown}."
        )


def _split(paths, labels, train_mask):
    paths, labels = np.asarray(paths, dtype=str), np.asarray(labels, dtype=np.int64)
    return {
        "train": (paths[train_mask], labels[train_mask]),
        "test": (paths[~train_mask], labels[~train_mask]),
    }


def _read_columns(path, count, dataset):
    """Whitespace-separated lines of at least `count` fields (blank lines skipped)."""
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < count:
                raise DatasetFormatError(
                    f"{dataset}: {path}:{number}: expected {count} whitespace-separated fields, "
                    f"received {line.strip()!r}."
                )
            rows.append((number, fields))
    return rows


def _inside(root, relative, path, number, dataset):
    """`root/relative`, refused unless it stays inside `root` (a list file naming
    ``../../etc/passwd`` or an absolute path would otherwise feed that file to training)."""
    joined = os.path.normpath(os.path.join(root, relative))
    base = os.path.normpath(root)
    if os.path.isabs(relative) or os.path.commonpath([base, joined]) != base:
        raise DatasetFormatError(
            f"{dataset}: {path}:{number}: image path {relative!r} leaves the dataset folder "
            f"{root!r}; list files name images relative to it."
        )
    return joined


def _unique_id(value, seen, path, number, dataset):
    """The integer id on this line, refused if an earlier line listed it (it would overwrite)."""
    image_id = _int(value, path, number, dataset)
    if image_id in seen:
        raise DatasetFormatError(
            f"{dataset}: {path}:{number}: image id {image_id} is listed twice."
        )
    return image_id


def _int(value, path, number, dataset):
    try:
        return int(value)
    except ValueError:
        raise DatasetFormatError(
            f"{dataset}: {path}:{number}: expected an integer, received {value!r}."
        ) from None


def _find_root(data_dir, marker, subdirectory):
    """`data_dir` itself, or `data_dir/subdirectory` when that holds `marker` (the tarballs'
    top-level folder)."""
    _require_dir(data_dir, f"the dataset root containing {marker!r}")
    nested = os.path.join(data_dir, subdirectory)
    if not os.path.exists(os.path.join(data_dir, marker)) and os.path.exists(
        os.path.join(nested, marker)
    ):
        return nested
    return data_dir


def read_cub200(data_dir, *, check_images=True):
    """CUB-200-2011 (Wah et al. 2011): classes 1-100 train (5,864 images), 101-200 test (5,924).

    Args:
      data_dir: The ``CUB_200_2011`` folder of the official archive (or its parent), holding
        ``images.txt`` (``<image_id> <path>``), ``image_class_labels.txt``
        (``<image_id> <class_id>``) and ``images/``.
      check_images: Verify that every listed image exists.
    """
    dataset = "CUB-200-2011"
    root = _find_root(data_dir, "images.txt", "CUB_200_2011")
    images_path = _require_file(root, "images.txt", dataset)
    labels_path = _require_file(root, "image_class_labels.txt", dataset)
    images, labels = {}, {}
    for number, fields in _read_columns(images_path, 2, dataset):
        image_id = _unique_id(fields[0], images, images_path, number, dataset)
        images[image_id] = (number, fields[1])
    for number, fields in _read_columns(labels_path, 2, dataset):
        image_id = _unique_id(fields[0], labels, labels_path, number, dataset)
        labels[image_id] = _int(fields[1], labels_path, number, dataset)
    if set(images) != set(labels):
        unmatched = sorted(set(images) ^ set(labels))[:5]
        raise DatasetFormatError(
            f"{dataset}: images.txt and image_class_labels.txt list different image ids "
            f"(e.g. {unmatched}) in {root!r}."
        )
    ids = sorted(images)
    image_root = os.path.join(root, "images")
    paths = [_inside(image_root, images[i][1], images_path, images[i][0], dataset) for i in ids]
    classes = np.array([labels[i] for i in ids], dtype=np.int64)
    if check_images:
        _check_images_exist(paths, dataset)
    return _split(paths, classes, classes <= 100)


def read_cars196(data_dir, *, check_images=True):
    """Stanford CARS196 (Krause et al. 2013): classes 1-98 train (8,054 images), 99-196 test
    (8,131), both from the official train and test halves together.

    Args:
      data_dir: The folder holding ``cars_annos.mat`` and ``car_ims/`` (the ``relative_im_path``
        of each annotation is relative to it).
      check_images: Verify that every listed image exists.
    """
    from scipy import io as scipy_io  # noqa: PLC0415 (scikit-learn already depends on SciPy)

    dataset = "CARS196"
    _require_dir(data_dir, "the folder holding 'cars_annos.mat' and 'car_ims/'")
    mat_path = _require_file(data_dir, "cars_annos.mat", dataset)
    try:
        annotations = scipy_io.loadmat(mat_path, squeeze_me=True)["annotations"]
        relative = [str(a) for a in np.atleast_1d(annotations["relative_im_path"])]
        classes = np.atleast_1d(annotations["class"]).astype(np.int64)
    except (KeyError, ValueError, TypeError) as error:
        raise DatasetFormatError(
            f"{dataset}: {mat_path} is not the official annotation file (expected a struct array "
            f"'annotations' with fields 'relative_im_path' and 'class'): {error}"
        ) from error
    paths = [_inside(data_dir, p, mat_path, i + 1, dataset) for i, p in enumerate(relative)]
    if check_images:
        _check_images_exist(paths, dataset)
    return _split(paths, classes, classes <= 98)


def read_sop(data_dir, *, check_images=True):
    """Stanford Online Products (Oh Song et al. 2016): ``Ebay_train.txt`` (11,318 products,
    59,551 images) and ``Ebay_test.txt`` (11,316 products, 60,502 images); the label is
    ``class_id`` (the product), not ``super_class_id``.

    Args:
      data_dir: The ``Stanford_Online_Products`` folder (or its parent): the list files with the
        header ``image_id class_id super_class_id path`` and the image folders they name.
      check_images: Verify that every listed image exists.
    """
    dataset = "Stanford Online Products"
    root = _find_root(data_dir, "Ebay_train.txt", "Stanford_Online_Products")
    out = {}
    for split, name in (("train", "Ebay_train.txt"), ("test", "Ebay_test.txt")):
        path = _require_file(root, name, dataset)
        rows = _read_columns(path, 4, dataset)
        if not rows or rows[0][1][:2] != ["image_id", "class_id"]:
            raise DatasetFormatError(
                f"{dataset}: {path}:1: expected the header 'image_id class_id super_class_id path'."
            )
        labels = [_int(fields[1], path, number, dataset) for number, fields in rows[1:]]
        paths = [_inside(root, fields[3], path, number, dataset) for number, fields in rows[1:]]
        if check_images:
            _check_images_exist(paths, dataset)
        out[split] = (np.asarray(paths, dtype=str), np.asarray(labels, dtype=np.int64))
    return out


def read_fgvr_lists(
    data_dir,
    *,
    image_dir="",
    train_list="lists/train_all_sub_list.csv",
    test_list="lists/test_all_sub_list.csv",
    check_images=True,
):
    """The list files of the two-head FGVR code (ahmdtaha/softmax_triplet_loss and
    FineGrainedVisualRecognition): CSVs written by pandas, header ``,label,file_name``.

    These are classification splits: train and test share their classes.

    Args:
      data_dir: The dataset folder (``db_path`` in the original configs).
      image_dir: Folder of the images relative to `data_dir` (e.g. ``jpg`` for Flowers-102,
        ``fgvc-aircraft-2013b/data/images`` for Aircraft, ``""`` for Stanford Cars).
      train_list, test_list: The list files relative to `data_dir`.
      check_images: Verify that every listed image exists.
    """
    dataset = "FGVR lists"
    _require_dir(data_dir, "the dataset folder holding the 'lists/' CSV files")
    out = {}
    for split, name in (("train", train_list), ("test", test_list)):
        path = _require_file(data_dir, name, dataset)
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, [])
            if "label" not in header or "file_name" not in header:
                raise DatasetFormatError(
                    f"{dataset}: {path}:1: expected a header with the columns 'label' and "
                    f"'file_name', received {header!r}."
                )
            label_col, file_col = header.index("label"), header.index("file_name")
            paths, labels = [], []
            for number, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) <= max(label_col, file_col):
                    raise DatasetFormatError(
                        f"{dataset}: {path}:{number}: expected {len(header)} columns, "
                        f"received {row!r}."
                    )
                labels.append(_int(row[label_col], path, number, dataset))
                image_root = os.path.join(data_dir, image_dir)
                paths.append(_inside(image_root, row[file_col], path, number, dataset))
        if check_images:
            _check_images_exist(paths, dataset)
        out[split] = (np.asarray(paths, dtype=str), np.asarray(labels, dtype=np.int64))
    return out


def _images_by_class(directory):
    classes = sorted(d for d in os.listdir(directory) if os.path.isdir(os.path.join(directory, d)))
    if not classes:
        raise FileNotFoundError(
            f"Folder per class: no class sub-folders in {directory!r} (expected "
            f"'{directory}/<class>/<image>')."
        )
    out = {}
    for name in classes:
        folder = os.path.join(directory, name)
        # Regular files only: a folder named x.jpg or a dangling (or self-looping) link is not
        # an image.
        out[name] = sorted(
            os.path.join(folder, f)
            for f in os.listdir(folder)
            if f.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(folder, f))
        )
    return out


def _paths_and_labels(by_class, names, class_ids):
    paths = [p for name in names for p in by_class[name]]
    labels = [class_ids[name] for name in names for _ in by_class[name]]
    return np.asarray(paths, dtype=str), np.asarray(labels, dtype=np.int64)


def read_image_folder(data_dir):
    """A generic folder-per-class tree, split by class for open-set retrieval.

    With ``train/`` and ``test/`` sub-folders, each holds its own ``<class>/<image>`` tree;
    otherwise the sorted class folders are split in half, the first half for training (the
    CUB / CARS convention). Labels index the sorted class names across both splits; images
    are files ending in one of `IMAGE_EXTENSIONS`.

    Returns:
      ``{"train": ..., "test": ..., "class_names": [...]}``.
    """
    _require_dir(data_dir, "a folder of '<class>/<image>' sub-folders")
    split_dirs = [os.path.join(data_dir, s) for s in ("train", "test")]
    if all(os.path.isdir(d) for d in split_dirs):
        trees = [_images_by_class(d) for d in split_dirs]
        names = sorted(set(trees[0]) | set(trees[1]))
        class_ids = {name: i for i, name in enumerate(names)}
        splits = [_paths_and_labels(t, sorted(t), class_ids) for t in trees]
    else:
        tree = _images_by_class(data_dir)
        names = sorted(tree)
        if len(names) < 2:
            raise ValueError(
                f"Folder per class: {data_dir!r} has {len(names)} class folder(s); an open-set "
                f"split needs at least 2 (or 'train/' and 'test/' sub-folders)."
            )
        class_ids = {name: i for i, name in enumerate(names)}
        half = (len(names) + 1) // 2
        splits = [
            _paths_and_labels(tree, names[:half], class_ids),
            _paths_and_labels(tree, names[half:], class_ids),
        ]
    for split, (paths, _) in zip(("train", "test"), splits, strict=True):
        if not len(paths):
            raise FileNotFoundError(
                f"Folder per class: no images ({', '.join(IMAGE_EXTENSIONS)}) in the {split} "
                f"classes under {data_dir!r}."
            )
    return {"train": splits[0], "test": splits[1], "class_names": names}


READERS = {
    "cub200": read_cub200,
    "cars196": read_cars196,
    "sop": read_sop,
    "fgvr": read_fgvr_lists,
    "folder": read_image_folder,
}


def read_dataset(name, data_dir, **kwargs):
    """Dispatches to the reader of `name` (one of `READERS`)."""
    if name not in READERS:
        raise ValueError(checks.invalid("name", f"one of {sorted(READERS)}", name))
    return READERS[name](data_dir, **kwargs)
