"""The simulator's stop latency: a preempted or migrating job keeps its GPUs without progress until it
has stopped, the decision's starts wait for it, and no decision is taken meanwhile."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.plans import CheckingScheduler
from support.specs import job
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.engine import SimConfig, Simulator
from tesserae.sim.runner import simulate


class Recorder(CheckingScheduler):
    """Records every decision: its time, the plan, and each row's progress and attained service then."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[float, Plan, np.ndarray, np.ndarray]] = []

    def decide(self, now: float, table: JobTable, active: np.ndarray,
               previous: Mapping[int, Assignment]) -> Plan:
        plan = super().decide(now, table, active, previous)
        self.log.append((now, plan, table.progress.copy(), table.attained.copy()))
        return plan


def _sim(jobs, policy: str = "las", cluster: str = "1x1", placement: str = "consolidated", packing: bool = False,
         **config) -> tuple[Simulator, Recorder]:
    cl = parse_cluster_spec(cluster)
    model = DefaultModel()
    inner = build_scheduler(cl, model, RunSpec(policy=policy, placement=placement, packing=packing))
    sched = Recorder(cl, inner.policy, inner.placement, model, inner.config)
    return Simulator(jobs, cl, sched, SimConfig(**config)), sched


def _at(sim: Simulator, when: float) -> tuple[float, float]:
    """(GPUs in use, running jobs) the timeline recorded at ``when``."""
    tl = sim._result(0.0).timeline
    i = int(np.flatnonzero(np.isclose(tl["time"], when))[-1])
    return float(tl["gpus_in_use"][i]), float(tl["running"][i])


def test_a_preempted_job_holds_its_gpus_without_progress_and_the_next_starts_after_it() -> None:
    # One GPU, LAS, rounds of 100 s, restart overhead 10 s, stop latency 5 s. Job 0 runs from 0 and has
    # 90 s of progress at t=100, when job 1 (no service yet) preempts it.
    sim, sched = _sim([job(0, 0, 1, 1000), job(1, 50, 1, 1000)], round_seconds=100, restart_overhead=10,
                      stop_latency=5)
    res = sim.run()
    t = res.table
    now, plan, _, _ = sched.log[1]
    assert now == 100 and plan.stopped == [0] and plan.started == [1]
    # Job 1 starts when job 0 has stopped, then pays its restart overhead.
    assert t.first_start[1] == 105
    # While stopping, job 0 held the GPU (in use, one job running) and made no progress; it is charged the
    # GPU-time it held, as the runtime charges a run until it has ended.
    assert _at(sim, 100) == (1, 1) and _at(sim, 105) == (1, 1)
    now2, _, progress, attained = sched.log[2]
    assert now2 == 200
    assert progress[0] == pytest.approx(90.0) and attained[0] == pytest.approx(105.0)
    assert progress[1] == pytest.approx(85.0) and attained[1] == pytest.approx(95.0)
    # Every GPU-second held is some job's service, the stops' included.
    assert res.busy_gpu_seconds == pytest.approx(float(t.attained.sum()))
    assert (t.status == JobStatus.DONE).all() and (t.progress == t.work).all()


def test_until_the_stop_reaches_it_a_preempted_job_makes_progress() -> None:
    # As above with a signal delay of 2 s: job 0 still progresses from 100 to 102 (92 s of progress), then
    # stops; the GPU is held until 105 all the same.
    sim, sched = _sim([job(0, 0, 1, 1000), job(1, 50, 1, 1000)], round_seconds=100, restart_overhead=10,
                      stop_latency=5, stop_signal_delay=2)
    res = sim.run()
    _, _, progress, attained = sched.log[2]
    assert res.table.first_start[1] == 105
    assert progress[0] == pytest.approx(92.0) and attained[0] == pytest.approx(105.0)
    assert res.busy_gpu_seconds == pytest.approx(float(res.table.attained.sum()))
    with pytest.raises(ValueError, match="stop_signal_delay"):
        SimConfig(stop_latency=1, stop_signal_delay=2)
    with pytest.raises(InputError, match="cannot exceed"):
        RunSpec(stop_latency=1, stop_signal_delay=2)


def test_without_a_stop_latency_the_start_is_at_the_decision() -> None:
    sim, _ = _sim([job(0, 0, 1, 1000), job(1, 50, 1, 1000)], round_seconds=100, restart_overhead=10)
    res = sim.run()
    assert res.table.first_start[1] == 100
    slow, _ = _sim([job(0, 0, 1, 1000), job(1, 50, 1, 1000)], round_seconds=100, restart_overhead=10,
                   stop_latency=5)
    assert slow.run().table.first_start[1] == 105


def test_no_decision_is_taken_while_stops_are_carried_out() -> None:
    # Event-driven LAS on one GPU: job 1 arrives at 10 and preempts job 0 (stop latency 4 s); job 2
    # arrives at 12, during the stop: the runtime decides once the plan is applied, at 14, and so does
    # the simulator.
    jobs = [job(0, 0, 1, 100), job(1, 10, 1, 100), job(2, 12, 1, 100)]
    sim, sched = _sim(jobs, round_seconds=100, restart_overhead=1, stop_latency=4, event_driven=True)
    res = sim.run()
    times = [now for now, *_ in sched.log]
    assert times[:3] == [0, 10, 14]
    stops = [(now, bool(plan.stopped or plan.migrated)) for now, plan, *_ in sched.log]
    for (d, stopped), (nxt, _) in itertools.pairwise(stops):
        assert not stopped or nxt >= d + 4 - 1e-9
    assert (res.table.status == JobStatus.DONE).all()


def test_a_job_ending_during_the_stops_is_left_out_of_the_plan_and_wakes_a_decision() -> None:
    # Two GPUs, event-driven LAS, no restart overhead, stop latency 3 s. Jobs 0 (long) and 1 (ends at 21)
    # run; job 2 arrives at 20 and preempts job 0 (the most service). Job 1 completes at 21, during job
    # 0's stop: no decision then; the plan is applied at 23 and, a job having ended, the run decides
    # again at once, which resumes job 0 on the GPU job 1 left.
    jobs = [job(0, 0, 1, 500), job(1, 1, 1, 20), job(2, 20, 1, 100)]
    sim, sched = _sim(jobs, cluster="1x2", round_seconds=100, restart_overhead=0, stop_latency=3,
                      event_driven=True)
    res = sim.run()
    t = res.table
    log = {now: plan for now, plan, *_ in sched.log}
    assert sorted(log)[:4] == [0, 1, 20, 23]
    assert log[20].stopped == [0] and log[20].started == [2]
    assert log[23].started == [0] and log[23].stopped == []
    assert t.finish[1] == pytest.approx(21.0) and t.first_start[2] == 23 and t.preemptions[0] == 1
    assert (t.status == JobStatus.DONE).all() and (t.progress == t.work).all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 300), st.sampled_from([1, 1, 2, 4]), st.integers(5, 400),
                          st.sampled_from(["resnet50", "lm", "cyclegan"])), min_size=2, max_size=12),
       st.sampled_from([("las", "consolidated", False), ("tiresias-las", "tiresias", False),
                        ("las", "tesserae", True), ("srtf", "consolidated", False)]),
       st.sampled_from([0.5, 3.0, 9.0]), st.booleans(), st.sampled_from([0.0, 0.5]))
def test_stop_latency_keeps_every_plan_valid_and_every_job_finishes(raw, config, latency, event, signal) -> None:
    # Jobs that end during stops, pairs whose partner ended, migrations: each plan still checked (CheckingScheduler).
    policy, placement, packing = config
    jobs = [job(i, float(s), g, float(d), kind) for i, (s, g, d, kind) in enumerate(raw)]
    sim, sched = _sim(jobs, policy=policy, cluster="2x2", placement=placement, packing=packing,
                      round_seconds=10, restart_overhead=1, stop_latency=latency, event_driven=event,
                      stop_signal_delay=signal * latency)
    res = sim.run()
    t = res.table
    assert (t.status == JobStatus.DONE).all()
    np.testing.assert_allclose(t.progress, t.work)
    times = [now for now, *_ in sched.log]
    assert times == sorted(times)
    for (d, plan, *_), (nxt, *_) in itertools.pairwise(sched.log):
        if plan.stopped or plan.migrated:
            assert nxt >= d + latency - 1e-9, "a decision was taken while stops were carried out"
    assert res.busy_gpu_seconds <= 4 * (float(t.finish.max()) - float(t.submit.min())) + 1e-6


def test_the_stop_latency_is_checked() -> None:
    for bad in (-1.0, math.nan, math.inf, 300.0, 301.0):
        with pytest.raises(ValueError, match="stop_latency"):
            SimConfig(round_seconds=300, stop_latency=bad)
    with pytest.raises(ValueError, match="Gavel's rounds"):
        SimConfig(gavel_rounds=True, stop_latency=1)
    with pytest.raises(InputError, match=r"stop latency .*300 s.* below the round length"):
        RunSpec(round_seconds=300, stop_latency=300)
    with pytest.raises(ValueError):
        RunSpec(stop_latency=-1)
    cl = parse_cluster_spec("1x1")
    with pytest.raises(InputError, match=r"Gavel's rounds.*--fixed-rounds"):
        simulate([job(0, 0, 1, 10)], cl, DefaultModel(), RunSpec(policy="gavel-fifo", placement="gavel",
                                                                  stop_latency=1))
