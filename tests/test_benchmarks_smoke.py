"""The benchmark programs run end to end on a tiny problem (no timing is asserted)."""

import json

from absl.testing import flagsaver

from benchmarks import spectral_speed


def test_spectral_speed_runs_and_writes_json(tmp_path):
    output = tmp_path / "out.json"
    with flagsaver.flagsaver(
        batch_size=12,
        embedding_dim=8,
        classes_per_batch=3,
        repeats=2,
        xla=False,
        torch=False,
        output=str(output),
    ):
        spectral_speed.FLAGS(["spectral_speed"])
        spectral_speed.main([])
    results = json.loads(output.read_text())
    assert set(results["versions"]) >= {"tensorflow", "keras", "tf_svmax"}
    assert "tf_svmax.svmax[gram]" in results["svmax_forward_backward"]
    assert "tf_svmax.ole_loss" in results["ole_forward_backward"]
    table = spectral_speed.format_table(results)
    assert "scipy" in table and "in-graph" in table
