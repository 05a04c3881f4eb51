"""Skew-aware consolidation (``--placement tiresias``) and YARN-CS placement (``--placement yarn``)."""

from __future__ import annotations

import numpy as np
import pytest

from support.specs import job
from tesserae.config import RunSpec
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.placement.base import make_placement, placement_names
from tesserae.placement.tiresias import TiresiasPlacement
from tesserae.placement.yarn import yarn_layout
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.metrics import job_records
from tesserae.sim.runner import simulate

MODEL = DefaultModel()


def test_registered_and_options() -> None:
    assert {"tiresias", "yarn"} <= set(placement_names())
    p = make_placement("tiresias", {"skew_threshold": "0.8"})
    assert isinstance(p, TiresiasPlacement) and p.skew_threshold == 0.8
    assert make_placement("tiresias").skew_threshold == 0.4
    with pytest.raises(InputError, match="skew"):
        TiresiasPlacement(-0.1)
    with pytest.raises(InputError, match="placement 'tiresias', option 'skew_threshold'"):
        make_placement("tiresias", {"skew_threshold": -0.1})
    with pytest.raises(InputError, match="placement 'tiresias' has no option 'queues'"):
        make_placement("tiresias", {"queues": (1.0,)})


def _fragmented(new_type: str, gpus: int = 2):
    """2 nodes x 4 GPUs; two 3-GPU jobs hold GPUs 0-2 and 4-6, leaving one GPU free on each node."""
    table = JobTable([job(0, 0, 3, 1000), job(1, 0, 3, 1000), job(2, 0, gpus, 100, new_type)])
    previous = {0: Assignment(0, (0, 1, 2)), 1: Assignment(1, (4, 5, 6))}
    return parse_cluster_spec("2x4"), table, previous


def test_high_skew_job_is_not_spread_and_waits() -> None:
    cluster, table, previous = _fragmented("vgg19")  # skew 0.72 > 0.4
    policy = TiresiasPlacement()
    placer = policy.begin(cluster, table, previous, MODEL)
    assert placer.try_admit(0) and placer.try_admit(1)
    assert placer.assigned[0].gpus == (0, 1, 2) and placer.assigned[1].gpus == (4, 5, 6)
    assert not placer.try_admit(2)
    assert policy.summary()["consolidation_waits"] == 1
    assert policy.summary()["high_skew_types"] == ["vgg19"]


def test_low_skew_job_accepts_to_spread() -> None:
    cluster, table, previous = _fragmented("resnet50")  # skew 0.11 <= 0.4
    policy = TiresiasPlacement()
    placer = policy.begin(cluster, table, previous, MODEL)
    assert placer.try_admit(0) and placer.try_admit(1)
    assert placer.try_admit(2)
    assert placer.assigned[2].gpus == (3, 7)
    assert policy.summary()["spread_placements"] == 1


def test_threshold_is_configurable() -> None:
    cluster, table, previous = _fragmented("vgg19")
    placer = TiresiasPlacement(skew_threshold=0.75).begin(cluster, table, previous, MODEL)
    assert placer.try_admit(0) and placer.try_admit(1) and placer.try_admit(2)  # 0.72 <= 0.75: may spread


def test_low_skew_prefers_consolidation_when_possible() -> None:
    cluster = parse_cluster_spec("2x4")
    table = JobTable([job(0, 0, 1, 100), job(1, 0, 2, 100)])
    placer = TiresiasPlacement().begin(cluster, table, {0: Assignment(0, (0,))}, MODEL)
    assert placer.try_admit(0)
    assert placer.try_admit(1)
    assert placer.assigned[1].gpus == (1, 2)  # best fit on node 0, not spread


def test_unknown_skew_types_count_as_low_skew_and_are_reported() -> None:
    cluster, table, previous = _fragmented("mystery-model")
    policy = TiresiasPlacement()
    placer = policy.begin(cluster, table, previous, MODEL)
    assert placer.try_admit(0) and placer.try_admit(1) and placer.try_admit(2)
    s = policy.summary()
    assert s["unknown_skew_types"] == 1 and s["unknown_skew_type_names"] == ["mystery-model"]


def test_new_job_avoids_running_jobs_gpus_and_running_jobs_stay() -> None:
    # A high-priority 4-GPU vgg19 job arrives while a 1-GPU job runs on node 0: it takes node 1
    # (the only consolidated layout on GPUs nobody holds) and the running job keeps GPU 0.
    cluster = parse_cluster_spec("2x4")
    table = JobTable([job(0, 0, 1, 1000), job(1, 10, 4, 100, "vgg19")])
    placer = TiresiasPlacement().begin(cluster, table, {0: Assignment(0, (0,))}, MODEL)
    assert placer.try_admit(1) and placer.try_admit(0)
    assert placer.assigned[1].gpus == (4, 5, 6, 7) and placer.assigned[0].gpus == (0,)


def test_displaced_running_job_is_placed_again() -> None:
    # A higher-priority 3-GPU job runs on node 1; a lower-priority 1-GPU job holds GPU 0. The 4-GPU
    # vgg19 job can only be consolidated on node 0: it takes node 0, and the displaced 1-GPU job is
    # placed again on the one free GPU of node 1 (a migration rather than a preemption).
    cluster = parse_cluster_spec("2x4")
    table = JobTable([job(0, 0, 3, 1000), job(1, 0, 1, 1000), job(2, 10, 4, 100, "vgg19")])
    previous = {0: Assignment(0, (4, 5, 6)), 1: Assignment(1, (0,))}
    placer = TiresiasPlacement().begin(cluster, table, previous, MODEL)
    assert placer.try_admit(0) and placer.try_admit(2) and placer.try_admit(1)
    assert placer.assigned[2].gpus == (0, 1, 2, 3)
    assert placer.assigned[1].gpus == (7,)


def _sim(jobs, placement: str, **kw):
    run = RunSpec.flat(policy="fifo", placement=placement, round_seconds=10, restart_overhead=0, **kw)
    result, summary = simulate(jobs, parse_cluster_spec("2x4"), MODEL, run)
    return {r["job_id"]: r for r in job_records(result)}, summary


def test_skew_aware_placement_end_to_end() -> None:
    # Two 3-GPU resnet50 jobs (1000 s) leave one GPU free per node. A 2-GPU vgg19 job (100 s) must
    # wait for a consolidated pair: it starts at 1000 and ends at 1100. A 2-GPU resnet50 job (100 s)
    # spreads at once and runs at 1 / (1 + 0.11) speed: 111 s.
    jobs = [job(0, 0, 3, 1000), job(1, 0, 3, 1000), job(2, 0, 2, 100, "vgg19"), job(3, 0, 2, 100)]
    recs, summary = _sim(jobs, "tiresias")
    assert recs[2]["jct"] == pytest.approx(1100.0)
    assert recs[3]["jct"] == pytest.approx(111.0)
    assert summary["unknown_skew_types"] == 0 and summary["spread_placements"] == 1
    # First-fit spreads the vgg19 job instead: 100 x 1.72 = 172 s.
    recs, _ = _sim([jobs[0], jobs[2]], "first-fit")
    assert recs[2]["jct"] == pytest.approx(172.0)


# ----------------------------------------------------------------------------------- yarn
def test_yarn_layout_first_fit_and_whole_nodes_first() -> None:
    nodes = np.array([10, 11, 12, 13])
    cap = np.full(4, 4)
    assert yarn_layout(nodes, np.array([1, 3, 4, 2]), cap, 2) == [(11, 2)]  # first fit, not best fit
    assert yarn_layout(nodes, np.array([4, 3, 4, 4]), cap, 6) == [(10, 4), (11, 2)]
    assert yarn_layout(nodes, np.array([4, 3, 3, 3]), cap, 9) is None  # needs 2 whole nodes
    assert yarn_layout(nodes, np.array([4, 4, 0, 1]), cap, 8) == [(10, 4), (11, 4)]
    assert yarn_layout(nodes, np.array([0, 1, 0, 1]), cap, 3) is None


def test_yarn_takes_all_gpus_from_one_rack_or_nothing() -> None:
    # 4 nodes x 4 GPUs in racks of 2 nodes. Rack 0 has 3 free GPUs, rack 1 has 3 free GPUs: a 6-GPU
    # job has 6 free GPUs but no rack that holds it, so it waits; a 3-GPU job goes to rack 0.
    cluster = parse_cluster_spec("4x4", nodes_per_rack=2)
    table = JobTable([job(0, 0, 4, 1000), job(1, 0, 1, 1000), job(2, 0, 4, 1000), job(3, 0, 1, 1000),
                      job(4, 0, 6, 100), job(5, 0, 3, 100)])
    previous = {0: Assignment(0, (0, 1, 2, 3)), 1: Assignment(1, (4,)), 2: Assignment(2, (8, 9, 10, 11)),
                3: Assignment(3, (12,))}
    placer = make_placement("yarn").begin(cluster, table, previous, MODEL)
    for r in range(4):
        assert placer.try_admit(r)
    assert not placer.try_admit(4)
    assert placer.try_admit(5)
    assert placer.assigned[5].gpus == (5, 6, 7)


def test_yarn_large_job_whole_nodes_in_one_rack() -> None:
    cluster = parse_cluster_spec("4x4", nodes_per_rack=2)
    table = JobTable([job(0, 0, 3, 1000), job(1, 0, 6, 100), job(2, 0, 5, 100)])
    placer = make_placement("yarn").begin(cluster, table, {0: Assignment(0, (0, 1, 2))}, MODEL)
    assert placer.try_admit(0) and placer.try_admit(1)
    # Rack 0 has one whole node (node 1) and 1 GPU on node 0: no room for 4 + 2. Rack 1: whole
    # node 2, then 2 GPUs on node 3.
    assert placer.assigned[1].gpus == (8, 9, 10, 11, 12, 13)
    # A 5-GPU job now fits rack 0: whole node 1 plus the last GPU of node 0.
    assert placer.try_admit(2)
    assert placer.assigned[2].gpus == (3, 4, 5, 6, 7)


def test_yarn_cs_baseline_end_to_end() -> None:
    # fifo --no-backfill + yarn: the 4-GPU job at the head blocks the small one behind it.
    jobs = [job(0, 0, 6, 100), job(1, 0, 4, 50), job(2, 0, 2, 30)]
    recs, summary = _sim(jobs, "yarn", no_backfill=True)
    assert {k: v["jct"] for k, v in recs.items()} == pytest.approx({0: 100.0, 1: 150.0, 2: 130.0})
    assert summary["migrations"] == 0 and summary["preemptions"] == 0
