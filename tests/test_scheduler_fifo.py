"""FIFO with and without backfill on a two-node cluster, every JCT worked out by hand."""

from __future__ import annotations

import pytest

from support.specs import job
from tesserae.config import RunSpec
from tesserae.core.cluster import parse_cluster_spec
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.metrics import job_records
from tesserae.sim.runner import simulate

# Two nodes of 4 GPUs. J0 (6 GPUs, 100 s) takes one whole node and 2 GPUs of the other. J1 (4 GPUs)
# cannot fit beside it; J2 (2 GPUs, 30 s) can. No restart overhead, 10 s rounds, arrivals on the grid.
JOBS = [job(0, 0, 6, 100), job(1, 0, 4, 50), job(2, 0, 2, 30)]


def _jcts(no_backfill: bool, placement: str = "consolidated") -> dict[int, float]:
    run = RunSpec(policy="fifo", placement=placement, round_seconds=10, restart_overhead=0,
                  no_backfill=no_backfill)
    result, summary = simulate(JOBS, parse_cluster_spec("2x4"), DefaultModel(), run)
    assert summary["completed"] == 3
    return {r["job_id"]: r["jct"] for r in job_records(result)}


@pytest.mark.parametrize("placement", ["consolidated", "first-fit"])
def test_fifo_backfill_lets_small_job_through(placement: str) -> None:
    # J2 backfills at t=0 and ends at 30; J1 waits for J0 (ends 100) and runs 100..150.
    assert _jcts(False, placement) == pytest.approx({0: 100.0, 1: 150.0, 2: 30.0})


def test_fifo_no_backfill_blocks_behind_head() -> None:
    # YARN-CS: J1 blocks the queue, so J2 starts with J1 at t=100.
    assert _jcts(True) == pytest.approx({0: 100.0, 1: 150.0, 2: 130.0})


def test_restart_overhead_delays_completion() -> None:
    run = RunSpec(policy="fifo", round_seconds=10, restart_overhead=30)
    _, summary = simulate([job(0, 0, 1, 100)], parse_cluster_spec("1x4"), DefaultModel(), run)
    assert summary["avg_jct"] == pytest.approx(130.0)
    assert summary["avg_queueing_delay"] == pytest.approx(0.0)


def test_arrival_waits_for_round_boundary() -> None:
    run = RunSpec(policy="fifo", round_seconds=100, restart_overhead=0)
    _, summary = simulate([job(0, 0, 1, 10), job(1, 150, 1, 10)], parse_cluster_spec("1x4"), DefaultModel(), run)
    # J1 arrives at 150 and is first decided on at the 200 s round: queueing 50 s, JCT 60 s.
    assert summary["avg_queueing_delay"] == pytest.approx(25.0)
    assert summary["makespan"] == pytest.approx(210.0)


def test_too_large_job_is_rejected_and_counted() -> None:
    run = RunSpec(policy="fifo", round_seconds=10, restart_overhead=0)
    _, summary = simulate([job(0, 0, 1, 10), job(1, 0, 16, 10)], parse_cluster_spec("2x4"), DefaultModel(), run)
    assert summary["rejected"] == 1
    assert summary["completed"] == 1


def test_spread_job_runs_slower_by_skew() -> None:
    # vgg19 (skew 0.72) spread over two nodes under first-fit: rate 1 / (1 + 0.72).
    run = RunSpec(policy="fifo", placement="first-fit", round_seconds=1000, restart_overhead=0)
    jobs = [job(0, 0, 3, 100, "resnet50"), job(1, 0, 2, 100, "vgg19")]
    result, _ = simulate(jobs, parse_cluster_spec("2x4"), DefaultModel(), run)
    recs = {r["job_id"]: r for r in job_records(result)}
    assert recs[0]["jct"] == pytest.approx(100.0)
    assert recs[1]["jct"] == pytest.approx(172.0)


def test_las_and_srtf_order() -> None:
    # One GPU; a long job arrives first, a short one next round. SRTF runs the short one first.
    jobs = [job(0, 0, 1, 1000), job(1, 10, 1, 20)]
    run = RunSpec(policy="srtf", round_seconds=10, restart_overhead=0)
    result, _ = simulate(jobs, parse_cluster_spec("1x1"), DefaultModel(), run)
    recs = {r["job_id"]: r for r in job_records(result)}
    assert recs[1]["jct"] == pytest.approx(20.0)
    assert recs[0]["preemptions"] == 1
    # LAS: the new job has attained nothing and goes first too.
    result, _ = simulate(jobs, parse_cluster_spec("1x1"), DefaultModel(), run.model_copy(update={"policy": "las"}))
    recs = {r["job_id"]: r for r in job_records(result)}
    assert recs[1]["jct"] <= 40.0


def test_job_without_throughput_data_is_rejected_not_hung() -> None:
    # A profile that gives this job type no rate on the cluster's GPU type: rejected and counted.
    from tesserae.profiles.default_model import DefaultModelConfig

    model = DefaultModel(DefaultModelConfig(gpu_speed={"v100": 1.0, "k80": 0.0}, unknown_gpu_speed=1.0))
    run = RunSpec(policy="fifo", round_seconds=10, restart_overhead=0)
    _, summary = simulate([job(0, 0, 1, 10)], parse_cluster_spec("1x4:k80"), model, run)
    assert summary["rejected"] == 1 and summary["rejected_reasons"]["no_throughput_data"] == 1
    # Mixed cluster: the type-blind placements keep the job off the type it cannot run on.
    for placement in ("first-fit", "consolidated", "tiresias", "yarn"):
        _, summary = simulate([job(i, 0, 2, 10) for i in range(6)], parse_cluster_spec("1x4:k80,1x4:v100"), model,
                              run.model_copy(update={"placement": placement}))
        assert summary["completed"] == 6 and summary["rejected"] == 0, placement
