"""Restart costs that reach the round length: the warning, the refusal, and the minimum run quantum."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.plans import CheckingScheduler
from support.specs import job
from tesserae.allocator import Allocator
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.engine import SimConfig, Simulator
from tesserae.sim.runner import simulate

TIME_SLICING = ["las", "tiresias-las", "tiresias-gittins", "themis", "gavel-maxmin", "gavel-fifo"]


class QuantumChecker(CheckingScheduler):
    """Also asserts that no running job inside its quantum is stopped, and records who runs when."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[float, set[int]]] = []

    def decide(self, now: float, table: JobTable, active: np.ndarray,
               previous: Mapping[int, Assignment]) -> Plan:
        plan = super().decide(now, table, active, previous)
        held = {r for r in previous if table.hold_until[r] > now + 1e-9}
        assert held <= set(plan.assignments), f"preempted inside the quantum at {now}: {held - set(plan.assignments)}"
        self.log.append((now, set(plan.assignments)))
        return plan


def _sim(jobs, policy: str, placement: str = "consolidated", cluster: str = "1x1", **config) -> Simulator:
    cl = parse_cluster_spec(cluster)
    model = DefaultModel()
    inner = build_scheduler(cl, model, RunSpec(policy=policy, placement=placement))
    sched = QuantumChecker(cl, inner.policy, inner.placement, model, inner.config)
    gavel = inner.policy.gavel_rounds
    return Simulator(jobs, cl, sched, SimConfig(gavel_rounds=gavel, **config))


def test_time_slicing_policies_are_refused_when_a_restart_reaches_the_round() -> None:
    jobs = [job(0, 0, 1, 1000), job(1, 1, 1, 1000)]
    for policy in TIME_SLICING:
        refused = rf"restart cost at or above the round length.*'{policy}'.*--min-run-quantum"
        with pytest.raises(InputError, match=refused):
            _sim(jobs, policy, round_seconds=100, restart_overhead=100)
    # Policies that never preempt a running job by priority only warn.
    sim = _sim(jobs, "fifo", round_seconds=100, restart_overhead=100)
    assert sim.warnings and "2 of 2 jobs" in sim.warnings[0]
    res = sim.run()
    assert (res.table.status == 3).all() and res.warnings == sim.warnings
    # Below the round length: nothing to say.
    assert not _sim(jobs, "las", round_seconds=100, restart_overhead=99.0).warnings


def test_without_a_quantum_las_livelocks_and_with_one_it_finishes() -> None:
    jobs = [job(0, 0, 1, 1000), job(1, 1, 1, 1000)]
    thrash = _sim(jobs, "las", round_seconds=100, restart_overhead=100, allow_thrashing=True)
    res = thrash.run(until=20_000)
    t = res.table
    assert (t.progress == 0).all() and t.preemptions.sum() >= 150, "each round restarts a job that then loses its GPU"
    assert thrash.warnings
    fixed = _sim(jobs, "las", round_seconds=100, restart_overhead=100, min_run_quantum=1)
    res = fixed.run(until=20_000)
    assert (res.table.status == 3).all()
    assert fixed.warnings and "thrash" not in fixed.warnings[0]


def test_a_restarted_job_keeps_its_gpus_for_its_quantum() -> None:
    # LAS would swap the two jobs every round (the waiting one has less service). With a restart
    # cost of 100 s and K = 2, a job that starts at t runs until t + 100 x (1 + 2) before it may go.
    jobs = [job(0, 0, 1, 1000), job(1, 1, 1, 1000)]
    sim = _sim(jobs, "las", round_seconds=100, restart_overhead=100, min_run_quantum=2)
    sim.run()
    running = dict(sim.scheduler.log)
    assert running[0] == {0}
    assert running[100] == running[200] == {0}, "job 0 is inside its quantum until 300"
    assert running[300] == {1}, "then LAS prefers job 1, which has run less"
    assert running[400] == running[500] == {1}
    assert running[600] == {0}


def test_held_jobs_go_first_in_their_order() -> None:
    table = JobTable([job(i, 0, 1, 100) for i in range(5)])
    table.hold_until[[1, 3]] = 50.0
    previous = {r: Assignment(r, (r,)) for r in (0, 1, 3)}
    order = np.array([4, 3, 2, 0], dtype=np.int64)  # a policy that left row 1 out (Gavel orders only whom it runs)
    assert Allocator(table, previous, 10.0, False).held_first(order).tolist() == [3, 1, 4, 2, 0]
    assert Allocator(table, previous, 50.0, False).held_first(order).tolist() == order.tolist(), "quantum ended"
    assert Allocator(table, {}, 10.0, False).held_first(order).tolist() == order.tolist()


workloads = st.lists(
    st.tuples(st.integers(0, 1500), st.sampled_from([1, 1, 1, 2, 3, 4, 8]), st.integers(1, 2000),
              st.sampled_from(["resnet50", "vgg19"])),
    min_size=1, max_size=20)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, st.sampled_from([("las", "consolidated"), ("las", "tesserae"), ("tiresias-las", "tiresias"),
                                   ("themis", "first-fit"), ("gavel-maxmin", "gavel")]),
       st.sampled_from(["2x4", "3x2", "1x8"]), st.sampled_from([0.5, 1.0, 3.0]), st.sampled_from([30.0, 60.0, 90.0]))
def test_quantum_invariants(raw, pair, cluster, quantum, overhead):
    """No job is preempted inside its quantum, gangs stay whole, no GPU is used twice, every job finishes."""
    jobs = [job(i, s, g, d, ty) for i, (s, g, d, ty) in enumerate(raw)]
    policy, placement = pair
    sim = _sim(jobs, policy, placement, cluster, round_seconds=60, restart_overhead=overhead, min_run_quantum=quantum)
    res = sim.run()
    t = res.table
    num_gpus = sim.cluster.num_gpus
    fits = t.num_gpus <= num_gpus
    assert (t.status[fits] == 3).all(), "a quantum ends every restart with progress: every job finishes"
    assert (res.timeline["gpus_in_use"] <= num_gpus).all()


def test_summary_reports_the_quantum_and_the_warning() -> None:
    cl = parse_cluster_spec("1x2")
    jobs = [job(i, 10 * i, 1, 500) for i in range(4)]
    _, s = simulate(jobs, cl, DefaultModel(), RunSpec(policy="las", round_seconds=100, restart_overhead=150,
                                                      min_run_quantum=1))
    assert s["completed"] == 4 and s["min_run_quantum"] == 1
    assert s["restart_cost"] == "fixed" and s["restart_cost_kind"] == "fixed (configured)"
    assert s["restart_overhead"] == 150 and s["restart_seconds_max"] == 150
    assert len(s["warnings"]) == 1 and "at or above the round length (100 s" in s["warnings"][0]
