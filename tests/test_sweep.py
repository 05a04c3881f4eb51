"""Sweeps: configurations x seeds x loads; the same sweep on Ray gives identical results."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

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


# Student's t quantile for 97.5% with 2 degrees of freedom (tables): the 95% interval of 3 seeds.
T_975_2 = 4.302652729911275


def test_spread_over_seeds_is_mean_sd_and_a_t_interval() -> None:
    from tesserae.sim.seed_spread import ratio_spread, spread

    s = spread([10.0, 12.0, 14.0])
    assert s is not None and (s.n, s.mean, s.sd) == (3, 12.0, 2.0)
    half = T_975_2 * 2.0 / math.sqrt(3)
    assert (s.low, s.high) == (pytest.approx(12 - half), pytest.approx(12 + half))
    wide = spread([1.0, 2.0, 3.0])  # t's interval reaches below 0: a JCT's starts at 0
    assert wide is not None and wide.low == 0.0 and wide.high == pytest.approx(2 + T_975_2 / math.sqrt(3))
    one = spread([5.0, math.nan])
    assert one is not None and (one.n, one.mean, one.sd, one.low, one.high) == (1, 5.0, None, None, None)
    assert spread([]) is None
    r = ratio_spread([1.0, 2.0, 4.0])  # geometric mean 2; logs' sd ln 2
    half = T_975_2 * math.log(2) / math.sqrt(3)
    assert r is not None and r.mean == pytest.approx(2.0)
    assert (r.low, r.high) == (pytest.approx(2 * math.exp(-half)), pytest.approx(2 * math.exp(half)))


def test_compare_seeds_reports_spread_and_interval(tmp_path: Path) -> None:
    """Issue 30: 'compare --seeds 0,1,2' gave a bare mean; now sd, a 95% interval and the paired ratio,
    in the table and in sweep.csv, from the same per-seed values compare.csv holds."""
    from typer.testing import CliRunner

    from tesserae.cli import app

    res = CliRunner().invoke(app, ["compare", "--run", "fifo", "--run", "las", "--seeds", "0,1,2", "--jobs", "25",
                                   "--cluster", "2x4", "-q", "--out", str(tmp_path)], env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "over 3 seed(s): mean, sd, 95% interval (Student's t)" in " ".join(res.output.split())
    assert "95% interval" in res.output and "x first 95%" in res.output
    per_seed: dict[str, list[float]] = {}
    with (tmp_path / "compare.csv").open() as f:
        for row in csv.DictReader(f):
            per_seed.setdefault(row["label"], []).append(float(row["avg_jct"]))
    with (tmp_path / "sweep.csv").open() as f:
        rows = {r["label"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["fifo:consolidated", "las:consolidated"]
    for label, vals in per_seed.items():
        row = rows[label]
        mean, sd = sum(vals) / 3, statistics.stdev(vals)
        assert row["seeds"] == "3" and float(row["mean"]) == pytest.approx(mean)
        assert float(row["sd"]) == pytest.approx(sd) and float(row["ci_high"]) == pytest.approx(
            mean + T_975_2 * sd / math.sqrt(3))
        assert float(row["ci_low"]) == pytest.approx(max(0.0, mean - T_975_2 * sd / math.sqrt(3)))
    ratios = [b / a for a, b in zip(per_seed["fifo:consolidated"], per_seed["las:consolidated"], strict=True)]
    assert rows["fifo:consolidated"]["ratio"] == ""
    assert float(rows["las:consolidated"]["ratio"]) == pytest.approx(statistics.geometric_mean(ratios))
    assert f"{statistics.geometric_mean(ratios):.2f}x" in res.output


def test_a_sweep_in_several_processes_gives_the_same_results() -> None:
    """compare runs its configurations in one process per core (make demo's wall time); the results are those
    of one process, in the same order."""
    cluster = parse_cluster_spec("2x4")
    one = run_sweep(_points(), WorkloadSpec(jobs=30), cluster, DefaultModel())
    done: list[int] = []
    two = run_sweep(_points(), WorkloadSpec(jobs=30), cluster, DefaultModel(), workers=2,
                    on_done=lambda r: done.append(r.point.seed))
    assert [r.point for r in two] == [r.point for r in one] and len(done) == len(one)
    for a, b in zip(one, two, strict=True):
        assert a.jobs == b.jobs and a.summary["avg_jct"] == b.summary["avg_jct"]
        assert (a.jct == b.jct).all()
