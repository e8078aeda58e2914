"""tf_svmax.records: the environment block and atomic JSON writes."""

import json
import platform

import numpy as np
import tensorflow as tf

from tf_svmax import records


def test_environment_names_this_process():
    env = records.environment()
    assert env["versions"]["tensorflow"] == tf.__version__
    assert env["versions"]["numpy"] == np.__version__
    import sklearn

    assert env["versions"]["sklearn"] == sklearn.__version__
    assert env["machine"]["python"] == platform.python_version()
    gpus = [g.name for g in tf.config.list_physical_devices("GPU")]
    assert env["machine"]["gpus"] == gpus
    line = records.device(env["machine"])
    assert (gpus and gpus[0] in line) or (not gpus and line.startswith("CPU ("))


def test_write_json_converts_numpy_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "r.json"
    records.write_json(str(path), {"a": np.float32(0.5), "b": np.int64(3), "c": np.arange(3)})
    records.write_json(str(path), {"a": np.float32(0.25), "b": np.int64(4), "c": np.arange(2)})
    assert json.loads(path.read_text()) == {"a": 0.25, "b": 4, "c": [0, 1]}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]


def test_write_json_into_a_full_disk_keeps_the_old_file_and_removes_the_half_one(
    tmp_path, monkeypatch
):
    """A full disk mid-write (issue 59): the error reaches the caller, the file keeps its old
    content and no half-written temporary is left beside it."""
    import errno

    path = tmp_path / "results.json"
    records.write_json(str(path), {"status": "running", "step": 1})

    def dump_then_fill(payload, file, **kwargs):
        file.write('{"status": "runn')  # part of the new record reached the disk
        file.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records.json, "dump", dump_then_fill)
    try:
        records.write_json(str(path), {"status": "completed", "step": 2})
    except OSError as error:
        assert error.errno == errno.ENOSPC
    else:
        raise AssertionError("the full disk was not reported")
    assert json.loads(path.read_text()) == {"status": "running", "step": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
