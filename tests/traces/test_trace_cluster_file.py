"""Tiresias cluster-spec CSV and load_cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tesserae.core.errors import InputError
from tesserae.traces import load_cluster, read_cluster_csv

HEAD = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"


def test_switches_become_racks(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text(HEAD + "2,3,4,40,256", encoding="utf-8")  # no trailing newline, as in Tiresias
    c = read_cluster_csv(path)
    assert c.num_nodes == 6 and c.num_gpus == 24
    assert c.node_rack.tolist() == [0, 0, 0, 1, 1, 1]
    assert c.node_first_gpu.tolist() == [0, 4, 8, 12, 16, 20]
    assert load_cluster(str(path)).num_gpus == 24


def test_spec_string() -> None:
    c = load_cluster("4x8:a100,2x4")
    assert c.num_gpus == 40 and c.gpu_types == ("a100", "v100")


@pytest.mark.parametrize(("text", "line", "field"), [
    ("", 1, "num_switch"),
    (HEAD, 2, "num_switch"),
    ("num_switch,num_gpu_p_node\n1,4\n", 1, "num_node_p_switch"),
    (HEAD + "1,x,4,40,256\n", 2, "num_node_p_switch"),
    (HEAD + "1,2,0,40,256\n", 2, "num_gpu_p_node"),
    (HEAD + "1,2,4,-40,256\n", 2, "num_cpu_p_node"),
    (HEAD + "1,2,4,40,256\n1,2,4,40,256\n", 3, "num_switch"),
])
def test_bad_cluster_file(tmp_path: Path, text: str, line: int, field: str) -> None:
    path = tmp_path / "c.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_cluster(str(path))
    msg = str(e.value)
    assert str(path) in msg and f"line {line}" in msg and f"field '{field}'" in msg


def test_missing_cluster_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_cluster(str(tmp_path / "missing.csv"))


def test_bad_spec_string() -> None:
    with pytest.raises(InputError, match="NODESxGPUS"):
        load_cluster("lots of gpus")
