"""Heterogeneous allocation (DESIGN §4.3): jobs matched to GPU-type slots by normalised throughput."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.plans import CheckingScheduler
from support.specs import decide, job, spec
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobStatus
from tesserae.placement._hetero import assign_types
from tesserae.profiles.table_model import TableModel
from tesserae.sim.engine import SimConfig, Simulator

# 'fast' runs 10x faster on a v100 than on a k80, 'flat' 1.33x, 'meh' 1.2x. 'k80-oom' cannot run on a k80.
MODEL = TableModel(
    name="hetero-toy", reference_gpu_type="v100",
    alone={("fast", 1, "v100", True): 10.0, ("fast", 1, "k80", True): 1.0,
           ("flat", 1, "v100", True): 2.0, ("flat", 1, "k80", True): 1.5,
           ("k80-oom", 1, "v100", True): 1.0, ("k80-oom", 1, "k80", True): 0.0,
           ("meh", 1, "v100", True): 1.2, ("meh", 1, "k80", True): 1.0,
           ("fast", 2, "v100", True): 18.0, ("fast", 2, "k80", True): 2.0},
    measured=True)
CLUSTER = "1x1:v100,1x1:k80"


def test_job_that_gains_most_gets_the_fast_type() -> None:
    # 'flat' comes first in priority and would take the v100 greedily; the type-slot matching gives
    # it to 'fast' (10x) and 'flat' runs on the k80, losing only 25%.
    plan, sched, _ = decide(CLUSTER, [spec(0, 1, "flat"), spec(1, 1, "fast")], model=MODEL)
    cl = sched.cluster
    kind = {r: cl.gpu_types[int(cl.gpu_type[a.gpus[0]])] for r, a in plan.assignments.items()}
    assert kind == {0: "k80", 1: "v100"}
    s = sched.summary()
    assert s["hetero_throughput_gain"] > 1.0  # 10/1 + 1.5/1.5 ... over the type-blind 2/1.5 + 1/1


def test_job_that_cannot_run_on_a_type_never_goes_there() -> None:
    plan, sched, _ = decide(CLUSTER, [spec(0, 1, "fast"), spec(1, 1, "k80-oom")], model=MODEL)
    cl = sched.cluster
    assert cl.gpu_types[int(cl.gpu_type[plan.assignments[1].gpus[0]])] == "v100"
    assert cl.gpu_types[int(cl.gpu_type[plan.assignments[0].gpus[0]])] == "k80"


def test_running_job_changes_type_only_when_the_gain_pays_for_the_move() -> None:
    # 'flat' runs on the v100; 'fast' arrives. Moving 'flat' to the k80 (1.33 -> 1.0) lets 'fast' run
    # 10x faster: 'flat' migrates.
    plan, _, _ = decide(CLUSTER, [spec(0, 1, "flat"), spec(1, 1, "fast")], {0: (0,)}, model=MODEL)
    assert plan.migrated == [0]
    assert plan.assignments[1].gpus == (0,)
    # 'meh' runs on the k80 and the v100 is free: 1.2x is below the switch penalty (1 / 0.8): it stays.
    plan, _, _ = decide(CLUSTER, [spec(0, 1, "meh")], {0: (1,)}, model=MODEL)
    assert plan.assignments[0].gpus == (1,) and plan.migrated == []
    # 'flat' on the k80 with the v100 free: 1.33x pays for the move.
    plan, _, _ = decide(CLUSTER, [spec(0, 1, "flat")], {0: (1,)}, model=MODEL)
    assert plan.assignments[0].gpus == (0,) and plan.migrated == [0]


def test_assign_types_respects_capacity_and_gangs() -> None:
    # Classes: 2-GPU 'fast' (weight 9 on v100), 1-GPU 'flat' (1.33); v100 has 2 GPUs, k80 has 3.
    sizes = np.array([2, 1])
    counts = np.array([1, 2])
    weight = np.array([[9.0, 1.0], [1.333, 1.0]])
    x = assign_types(sizes, counts, weight, weight > 0, np.array([2, 3]))
    assert x.tolist() == [[1, 0], [0, 2]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(30, 1500), st.sampled_from(["fast", "flat", "k80-oom"])),
                min_size=1, max_size=20), st.booleans())
def test_heterogeneous_runs_keep_invariants(raw, packing) -> None:
    jobs = [job(i, s, 1, d, ty) for i, (s, d, ty) in enumerate(raw)]
    cluster = parse_cluster_spec("1x2:v100,2x1:k80")
    inner = build_scheduler(cluster, MODEL, RunSpec(policy="las", placement="tesserae", packing=packing))
    sched = CheckingScheduler(cluster, inner.policy, inner.placement, MODEL, inner.config)
    res = Simulator(jobs, cluster, sched, SimConfig(round_seconds=60, restart_overhead=5)).run()
    assert np.isin(res.table.status, [JobStatus.DONE, JobStatus.REJECTED]).all()
