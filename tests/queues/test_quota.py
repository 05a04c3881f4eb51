"""The queue-level allocation: guarantees, weighted max-min lending, limits, reclaim, priority classes."""

from __future__ import annotations

import numpy as np
import pytest

from support.specs import job
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobSpec, JobStatus, JobTable
from tesserae.core.queues import build_tree, parse_config
from tesserae.profiles.default_model import DefaultModel
from tesserae.scheduling.quota import queue_budgets, split, water_fill


def tree_of(*queues: dict, gpus: int = 16):
    return build_tree(parse_config({"queues": list(queues)}), gpus_by_type={"v100": gpus})


def test_water_fill_is_weighted_max_min() -> None:
    # Level L with extras min(room, w L): 2 saturates, then 8 left split 1:2.
    assert np.allclose(water_fill(10, np.array([2.0, 8, 8]), np.array([1.0, 1, 2])), [2, 8 / 3, 16 / 3])
    assert np.allclose(water_fill(100, np.array([2.0, 8]), np.array([1.0, 1])), [2, 8])
    assert np.allclose(water_fill(0, np.array([2.0, 8]), np.array([1.0, 1])), [0, 0])


def test_split_serves_guarantees_then_lends_by_weight_within_limits() -> None:
    inf = np.inf
    # a idle: its 8 guaranteed GPUs are lent to b and c (c capped at 4 + 2).
    assert split(16, np.array([0, 20, 20]), np.array([8, 4, 4]), np.array([inf, inf, 6.0]),
                 np.array([1.0, 1, 1])).tolist() == [0, 10, 6]
    # a wants 2 of its 8: 6 lent, 2 : 4 by weight.
    assert split(16, np.array([2, 20, 20]), np.array([8, 4, 4]), np.array([inf, inf, inf]),
                 np.array([1.0, 1, 2])).tolist() == [2, 6, 8]
    # Everyone at full demand: exactly the guarantees.
    assert split(16, np.array([20, 20, 20]), np.array([8, 4, 4]), np.array([inf, inf, inf]),
                 np.array([1.0, 5, 5])).tolist() == [8, 4, 4]
    # Fewer GPUs than guarantees (a node died): shared in proportion to the guarantees.
    assert split(8, np.array([20, 20]), np.array([8, 8]), np.array([inf, inf]), np.array([1.0, 1])).tolist() == [4, 4]
    # Whole GPUs, remainder to the largest fraction, ties to config order.
    assert split(3, np.array([5, 5]), np.array([0, 0]), np.array([inf, inf]), np.array([1.0, 1])).tolist() == [2, 1]


def test_budgets_go_down_the_tree() -> None:
    tree = tree_of({"name": "org1", "guarantee": 8}, {"name": "t1", "parent": "org1", "guarantee": 6},
                   {"name": "t2", "parent": "org1", "guarantee": 2}, {"name": "org2", "guarantee": 8})
    # org2 idle: org1 borrows all 16; inside org1, t1 and t2 split the surplus evenly after guarantees.
    b = queue_budgets(tree, np.array([16, 16, 0]), 16)
    assert dict(zip(tree.names, b.tolist(), strict=True)) == {"org1": 16, "t1": 10, "t2": 6, "org2": 0}
    # org2 comes back: org1 falls to its guarantee, t1 and t2 to theirs.
    b = queue_budgets(tree, np.array([16, 16, 16]), 16)
    assert dict(zip(tree.names, b.tolist(), strict=True)) == {"org1": 8, "t1": 6, "t2": 2, "org2": 8}


def _table(specs: list[JobSpec]) -> JobTable:
    t = JobTable(specs)
    t.set_reference_rates(DefaultModel())
    t.status[:] = JobStatus.QUEUED
    return t


def _decide(sched, t: JobTable, previous=None, now: float = 0.0):
    active = np.flatnonzero((t.status == JobStatus.QUEUED) | (t.status == JobStatus.RUNNING))
    plan = sched.decide(now, t, active, previous or {})
    t.status[plan.stopped] = JobStatus.QUEUED
    t.status[list(plan.assignments)] = JobStatus.RUNNING
    return plan


def queued(i: int, gpus: int, user: str, cls: str = "normal", submit: float = 0.0) -> JobSpec:
    j = job(i, submit, gpus, 3600.0)
    return JobSpec(j.job_id, j.submit_time, j.num_gpus, j.job_type, j.work, j.duration, user=user,
                   priority_class=cls)


def test_idle_quota_is_lent_and_reclaimed_lowest_rank_first() -> None:
    cluster = parse_cluster_spec("4x4")
    tree = tree_of({"name": "a", "guarantee": 8}, {"name": "b", "guarantee": 8})
    sched = build_scheduler(cluster, DefaultModel(), RunSpec(policy="fifo", placement="first-fit"), tree)
    # b alone: its 4 jobs of 4 GPUs take the whole cluster (8 of them borrowed from a).
    specs = [queued(i, 4, "b", submit=float(i)) for i in range(4)] + [queued(4, 4, "a", submit=10.0),
                                                                       queued(5, 4, "a", submit=11.0)]
    t = _table(specs)
    t.status[4:] = JobStatus.PENDING
    plan = _decide(sched, t)
    assert sorted(plan.assignments) == [0, 1, 2, 3]
    assert sched.queues.borrowing.tolist() == [0, 8]
    # a's jobs arrive: b's two latest (lowest-ranked in FIFO) are reclaimed, a gets its guarantee.
    t.status[4:] = JobStatus.QUEUED
    plan = _decide(sched, t, plan.assignments, now=300.0)
    assert sorted(plan.assignments) == [0, 1, 4, 5]
    assert plan.stopped == [2, 3]
    assert sched.queues.reclaims.tolist() == [0, 2]
    assert sched.queues.reason(2) == "queue at its share; waiting for idle GPUs to borrow"


def test_borrowing_limit_and_strict_quotas() -> None:
    cluster = parse_cluster_spec("4x4")
    tree = tree_of({"name": "a", "guarantee": 8}, {"name": "b", "guarantee": 4, "borrow_limit": 4},
                   {"name": "c", "guarantee": 4})
    specs = [queued(i, 2, "b", submit=float(i)) for i in range(8)]
    sched = build_scheduler(cluster, DefaultModel(), RunSpec(policy="fifo", placement="first-fit"), tree)
    plan = _decide(sched, _table(specs))
    assert len(plan.assignments) == 4  # 4 guaranteed + 4 borrowed
    assert sched.queues.reason(7) == "queue at its borrowing limit"
    strict = build_scheduler(cluster, DefaultModel(), RunSpec(policy="fifo", placement="first-fit",
                                                              quotas="strict"), tree)
    assert len(_decide(strict, _table(specs)).assignments) == 2


def test_production_runs_only_within_guarantee_and_is_never_preempted() -> None:
    cluster = parse_cluster_spec("2x4")
    tree = tree_of({"name": "a", "guarantee": 4}, {"name": "b", "guarantee": 4}, gpus=8)
    sched = build_scheduler(cluster, DefaultModel(), RunSpec(policy="las", placement="first-fit"), tree)
    specs = [queued(0, 4, "a", "production"), queued(1, 4, "a", "production"), queued(2, 2, "a", "preemptible"),
             queued(3, 2, "a", "normal")]
    t = _table(specs)
    plan = _decide(sched, t)
    # One production job fits a's guarantee; the other may not borrow. b is idle, so a's normal job
    # borrows ahead of its preemptible one... both fit in the 4 GPUs b lends.
    assert sorted(plan.assignments) == [0, 2, 3]
    assert sched.queues.reason(1) == "production job beyond its queue's guarantee"
    # Under LAS the running production job has more attained service, yet keeps its GPUs.
    t.attained[0] = t.executed[0] = 1e6
    plan2 = _decide(sched, t, plan.assignments, now=300.0)
    assert 0 in plan2.assignments and 1 not in plan2.assignments


def test_per_queue_policies_order_inside_each_queue() -> None:
    cluster = parse_cluster_spec("1x4")
    tree = tree_of({"name": "a", "guarantee": 2, "policy": "las"}, {"name": "b", "guarantee": 2}, gpus=4)
    sched = build_scheduler(cluster, DefaultModel(), RunSpec(policy="fifo", placement="first-fit"), tree)
    specs = [queued(0, 2, "a", submit=0.0), queued(1, 2, "a", submit=1.0), queued(2, 2, "b", submit=0.0),
             queued(3, 2, "b", submit=1.0)]
    t = _table(specs)
    t.executed[0] = t.executed[2] = 500.0  # the older job of each queue has run
    plan = _decide(sched, t)
    assert sorted(plan.assignments) == [1, 2]  # LAS in a picks the fresh job; FIFO in b the older one
    assert sched.policy.summary()["queue_policies"] == ["fifo", "las"]


def test_policies_that_cannot_run_in_queues_are_refused() -> None:
    from tesserae.core.errors import InputError

    tree = tree_of({"name": "a", "guarantee": 2})
    with pytest.raises(InputError, match="cannot order jobs inside tenant queues"):
        build_scheduler(parse_cluster_spec("1x4"), DefaultModel(), RunSpec(policy="gavel-maxmin", placement="gavel"),
                        tree)


def test_a_reclaim_never_takes_a_job_inside_its_minimum_run_quantum() -> None:
    cluster = parse_cluster_spec("2x4")
    tree = tree_of({"name": "a", "guarantee": 4}, {"name": "b", "guarantee": 4}, gpus=8)
    sched = build_scheduler(cluster, DefaultModel(), RunSpec(policy="fifo", placement="first-fit"), tree)
    t = _table([queued(0, 4, "b"), queued(1, 4, "b", submit=1.0), queued(2, 4, "a", submit=2.0)])
    t.status[2] = JobStatus.PENDING
    plan = _decide(sched, t)
    assert sorted(plan.assignments) == [0, 1]  # b borrows a's 4 GPUs
    t.hold_until[1] = 600.0  # job 1 (re)started with a quantum up to t = 600
    t.status[2] = JobStatus.QUEUED
    plan = _decide(sched, t, plan.assignments, now=300.0)
    # a's job gets its guarantee at once: b gives back job 0, as job 1 is inside its quantum.
    assert sorted(plan.assignments) == [1, 2] and plan.stopped == [0]
    # Both of b's jobs held: a's job waits until a quantum ends.
    t2 = _table([queued(0, 4, "b"), queued(1, 4, "b", submit=1.0), queued(2, 4, "a", submit=2.0)])
    sched2 = build_scheduler(cluster, DefaultModel(), RunSpec(policy="fifo", placement="first-fit"), tree)
    t2.status[2] = JobStatus.PENDING
    plan = _decide(sched2, t2)
    t2.hold_until[[0, 1]] = 600.0
    t2.status[2] = JobStatus.QUEUED
    plan = _decide(sched2, t2, plan.assignments, now=300.0)
    assert sorted(plan.assignments) == [0, 1]
    plan = _decide(sched2, t2, plan.assignments, now=600.0)
    assert sorted(plan.assignments) == [0, 2] and plan.stopped == [1]
