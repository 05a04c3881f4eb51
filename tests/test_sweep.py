"""Sweeps: configurations x seeds x loads; the same sweep on Ray gives identical results."""

from __future__ import annotations

import pytest

from tesserae.config import RunSpec
from tesserae.core.cluster import parse_cluster_spec
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.sweep import SweepPoint, run_sweep
from tesserae.sim.workload import WorkloadSpec

RUNS = [RunSpec(policy="fifo"), RunSpec(policy="las", placement="first-fit")]


def _points() -> list[SweepPoint]:
    return [SweepPoint(r, seed, load) for load in (0.7, 1.4) for seed in (1, 2) for r in RUNS]


def test_local_sweep_covers_every_point_in_order() -> None:
    cluster = parse_cluster_spec("2x4")
    results = run_sweep(_points(), WorkloadSpec(jobs=30), cluster, DefaultModel())
    assert [r.point for r in results] == _points()
    assert all(r.summary["completed"] == 30 for r in results)
    # A different seed or load is a different workload.
    assert results[0].summary["avg_jct"] != results[2].summary["avg_jct"]
    assert results[0].summary["avg_jct"] != results[4].summary["avg_jct"]


def test_ray_sweep_matches_local_sweep() -> None:
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'tesserae[ray]')")
    cluster = parse_cluster_spec("2x4")
    local = run_sweep(_points(), WorkloadSpec(jobs=30), cluster, DefaultModel())
    if ray.is_initialized():  # another test in this worker left a connection open
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_sweep(_points(), WorkloadSpec(jobs=30), cluster, DefaultModel(), ray_address="auto")
    finally:
        ray.shutdown()
    assert [r.point for r in remote] == [r.point for r in local]
    for a, b in zip(local, remote, strict=True):
        assert a.jobs == b.jobs
        assert a.summary["avg_jct"] == b.summary["avg_jct"]
