"""Fences (issue 30): closed GPUs take no new run while their runs go on; a pinned job runs only on
its nodes. Checked around every registered placement, its bulk shortcuts included."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.plans import CheckingScheduler
from support.specs import spec
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.fences import Fences
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.core.plan import Assignment
from tesserae.fencing import part_of
from tesserae.placement.base import placement_names
from tesserae.profiles.default_model import DefaultModel

#: (placement, packing, policy): every placement, with the policy each is meant for.
SETUPS = [(name, False, "las") for name in placement_names() if name != "gavel"] + [
    ("tesserae", True, "las"), ("gavel", False, "gavel-maxmin"), ("gavel", True, "gavel-maxmin"),
    ("first-fit", False, "fifo"), ("consolidated", False, "tiresias-las")]


def scheduler(cluster_spec: str, placement: str, packing: bool, policy: str) -> CheckingScheduler:
    cluster, model = parse_cluster_spec(cluster_spec), DefaultModel()
    inner = build_scheduler(cluster, model, RunSpec(policy=policy, placement=placement, packing=packing))
    return CheckingScheduler(cluster, inner.policy, inner.placement, model, inner.config)


def table_of(gangs: list[int], types: list[str]) -> JobTable:
    table = JobTable([spec(i, g, t) for i, (g, t) in enumerate(zip(gangs, types, strict=True))])
    table.set_reference_rates(DefaultModel())
    table.status[:] = JobStatus.QUEUED
    return table


def closed_of(cluster_spec: str, nodes: set[int]) -> np.ndarray:
    cluster = parse_cluster_spec(cluster_spec)
    return np.isin(cluster.gpu_node, sorted(nodes))


def test_a_pinned_job_runs_on_its_node_only_and_waits_when_it_is_full() -> None:
    sched = scheduler("2x4", "tesserae", False, "fifo")
    table = table_of([4, 2], ["resnet50", "resnet50"])
    sched.fences = Fences(pinned={1: (0,)})  # job 1 may run on node 0 only; job 0 (ahead) fills a node
    plan = sched.decide(0.0, table, np.arange(2), {})
    assert set(plan.assignments[1].gpus) <= {0, 1, 2, 3}
    assert set(plan.assignments[0].gpus) == {4, 5, 6, 7}, "the unpinned job takes the other node"
    table = table_of([4, 2], ["resnet50", "resnet50"])
    sched = scheduler("2x4", "tesserae", False, "fifo")
    sched.fences = Fences(pinned={1: (0,)})
    plan = sched.decide(0.0, table, np.arange(2), {0: Assignment(0, (0, 1, 2, 3))})
    assert 1 not in plan.assignments, "node 0 is full: the pinned job waits, though node 1 is free"
    assert plan.assignments[0].gpus == (0, 1, 2, 3)


def test_priority_holds_a_pinned_job_behind_jobs_that_fill_the_cluster() -> None:
    sched = scheduler("2x4", "first-fit", False, "fifo")
    table = table_of([4, 4, 2], ["resnet50"] * 3)
    sched.fences = Fences(pinned={2: (1,)})
    plan = sched.decide(0.0, table, np.arange(3), {})
    assert set(plan.assignments) == {0, 1}, "two whole-node jobs ahead: the pinned one waits"


def test_a_closed_gpu_keeps_its_run_and_takes_no_new_one() -> None:
    sched = scheduler("2x4", "tesserae", False, "las")
    table = table_of([2, 4, 2], ["resnet50"] * 3)
    table.attained[0] = 1e6  # LAS would preempt job 0 for the others
    table.status[0] = JobStatus.RUNNING
    closed = closed_of("2x4", {0})
    sched.fences = Fences(closed=closed)
    prev = {0: Assignment(0, (0, 1))}
    plan = sched.decide(10.0, table, np.arange(3), prev)
    assert plan.assignments[0] is prev[0], "the run on the drained node goes on, untouched"
    others = [g for r, a in plan.assignments.items() if r != 0 for g in a.gpus]
    assert not closed[others].any()
    assert set(plan.assignments) == {0, 1}, "job 2 does not fit the open node once job 1 is there"


def test_the_part_of_a_cluster_keeps_type_numbers() -> None:
    cluster = parse_cluster_spec("1x4:a100,2x2:v100")
    part, ids = part_of(cluster, ~np.isin(cluster.gpu_node, [0]))
    assert part is not None and part.gpu_types == ("a100", "v100") and ids.tolist() == [4, 5, 6, 7]
    assert part.gpus_by_type == {"a100": 0, "v100": 4}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SETUPS), st.sampled_from(["2x4", "3x2", "2x4,1x4:k80"]),
       st.lists(st.tuples(st.sampled_from([1, 1, 2, 4]), st.sampled_from(["resnet50", "vgg19", "lm"]),
                          st.one_of(st.none(), st.sets(st.integers(0, 2), min_size=1, max_size=2))),
                min_size=1, max_size=14),
       st.lists(st.sets(st.integers(0, 2), max_size=2), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_no_placement_puts_a_pinned_job_elsewhere_or_a_new_run_on_a_closed_gpu(setup, cluster_spec, jobs, drains,
                                                                               rnd) -> None:
    placement, packing, policy = setup
    sched = scheduler(cluster_spec, placement, packing, policy)
    cluster = sched.cluster
    n_nodes = cluster.num_nodes
    table = table_of([g for g, _, _ in jobs], [t for _, t, _ in jobs])
    pinned = {r: tuple(sorted({x % n_nodes for x in p})) for r, (_, _, p) in enumerate(jobs) if p is not None}
    previous: dict[int, Assignment] = {}
    for step, drained in enumerate(drains):
        closed = np.isin(cluster.gpu_node, sorted(d % n_nodes for d in drained))
        sched.fences = Fences(closed=closed, pinned=pinned)
        for r in previous:
            table.attained[r] += rnd.choice([0.0, 5e3, 5e5])  # the policy reorders between rounds
        active = np.arange(table.n)
        plan = sched.decide(100.0 * step, table, active, previous)
        for r, a in plan.assignments.items():
            if r in pinned:
                assert set(cluster.gpu_node[list(a.gpus)].tolist()) <= set(pinned[r]), \
                    f"{placement}: pinned job {r} on {a.gpus}, outside node {pinned[r]}"
            old = previous.get(r)
            if old is None or old.gpus != a.gpus:
                assert not closed[list(a.gpus)].any(), f"{placement}: new run of {r} on a closed GPU {a.gpus}"
        for r, a in previous.items():
            if closed[list(a.gpus)].any():
                assert plan.assignments.get(r) == a, f"{placement}: the run of {r} on a closed GPU did not go on"
        previous = dict(plan.assignments)
        table.status[:] = JobStatus.QUEUED
        table.status[list(previous)] = JobStatus.RUNNING


def test_a_pinned_gang_stays_on_one_gpu_type_and_keeps_what_it_can_of_its_gpus() -> None:
    sched = scheduler("1x2,1x2:k80", "first-fit", False, "fifo")
    table = table_of([1, 1, 2], ["resnet50"] * 3)
    sched.fences = Fences(pinned={2: (0, 1)})  # two nodes of two types, one GPU free on each
    prev = {0: Assignment(0, (0,)), 1: Assignment(1, (2,))}
    plan = sched.decide(0.0, table, np.arange(3), prev)
    assert 2 not in plan.assignments, "a gang never spans two GPU types"
    sched = scheduler("1x4", "first-fit", False, "fifo")
    table = table_of([1, 2, 2], ["resnet50"] * 3)
    sched.fences = Fences(pinned={0: (0,), 1: (0,)})
    prev = {1: Assignment(1, (0, 1)), 2: Assignment(2, (2, 3))}
    plan = sched.decide(0.0, table, np.arange(3), prev)  # job 0 (first) takes GPU 0 of job 1
    assert plan.assignments[0].gpus == (0,)
    assert 1 in plan.assignments[1].gpus, "job 1 keeps the GPU it still can"
