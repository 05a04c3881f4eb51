"""The readers on the public reference traces in ../shared/data (skipped when absent)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tesserae.profiles.default_model import DefaultModel
from tesserae.traces import load_cluster, read_trace, trace_info

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"reference data folder {DATA} not present")
MODEL = DefaultModel()


def test_tiresias_60_jobs() -> None:
    jobs = read_trace(DATA / "tiresias" / "60_job.csv", "tiresias", MODEL)
    assert len(jobs) == 60
    assert sorted(j.job_id for j in jobs) == list(range(60))
    assert Counter(j.num_gpus for j in jobs) == {1: 30, 2: 10, 4: 10, 8: 10}
    assert jobs[0].submit_time == 0.0 and jobs[-1].submit_time == 1779.0
    assert all(j.work == j.duration > 0 for j in jobs)
    assert Counter(j.job_type for j in jobs)["googlenet"] == 6  # kept even if the model does not know it


def test_philly_all_rows() -> None:
    """Every Philly row is read; reading speed is measured in benchmarks/sim_throughput.py, not here."""
    jobs = read_trace(DATA / "philly" / "philly.csv", "philly", MODEL, seed=0)
    # The file has 82,248 lines: a header and 82,247 jobs (plus a trailing blank line).
    assert len(jobs) == 82_247
    assert jobs[0].submit_time == 0.0
    # 2017-09-04 10:30:41 (earliest) to 2017-12-22 08:02:11 (latest)
    assert jobs[-1].submit_time == 9_408_690.0
    gpus = Counter(j.num_gpus for j in jobs)
    assert gpus[1] == 76_627 and gpus[128] == 3
    assert len({j.user for j in jobs}) == 15
    again = read_trace(DATA / "philly" / "philly.csv", "philly", MODEL, seed=0)
    assert [j.job_type for j in again] == [j.job_type for j in jobs]


def test_gavel_trace() -> None:
    jobs = read_trace(DATA / "gavel" / "msr_seed0_23dbec.trace", "gavel", MODEL)
    assert len(jobs) == 9
    assert [j.num_gpus for j in jobs] == [1, 1, 8, 8, 8, 8, 8, 8, 8]
    assert [j.submit_time for j in jobs][:3] == [0.0, 11.0, 182095.0]
    assert jobs[0].job_type == "Transformer (batch size 128)" and jobs[0].work == 14612.0
    assert all(j.duration is None for j in jobs)
    info = trace_info(jobs, load_cluster("2x4"), MODEL)
    assert info["cluster"]["too_large"] == 0 and info["cluster"]["larger_than_a_node"] == 7


@pytest.mark.parametrize(("name", "nodes", "per_node", "racks"), [
    ("n32g4.csv", 32, 4, 1), ("n160g8.csv", 160, 8, 5), ("n256g8.csv", 256, 8, 8), ("n1g4.csv", 1, 4, 1),
    ("cluster_spec.csv", 16, 4, 1),
])
def test_cluster_specs(name: str, nodes: int, per_node: int, racks: int) -> None:
    cluster = load_cluster(str(DATA / "tiresias" / name))
    assert cluster.num_nodes == nodes and cluster.num_gpus == nodes * per_node
    assert len(set(cluster.node_rack.tolist())) == racks
    assert cluster.gpu_types == ("v100",)
