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
