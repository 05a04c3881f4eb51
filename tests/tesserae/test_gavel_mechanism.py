"""Gavel's round mechanism, one behaviour per test (stanford-futuredata/gavel ``scheduler.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from support.specs import job, toy_model
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.advice import Ran, RanReport
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobSpec, JobStatus, JobTable
from tesserae.placement.gavel import GavelPlacement
from tesserae.profiles.table_model import TableModel
from tesserae.scheduler import Scheduler
from tesserae.scheduling._gavel_rounds import GavelRounds, Unit
from tesserae.scheduling.gavel_fifo import GavelFifo
from tesserae.scheduling.gavel_maxmin import GavelMaxMin
from tesserae.sim.engine import SimConfig, Simulator
from tesserae.sim.runner import simulate

TWO_TYPES = TableModel(
    name="two-types", reference_gpu_type="v100",
    alone={("a", 1, "v100", True): 4.0, ("a", 1, "k80", True): 1.0,
           ("b", 1, "v100", True): 4.0, ("b", 1, "k80", True): 1.0},
    pairs={("a", 1, "v100", True, "b", 1): (3.0, 3.0), ("a", 1, "k80", True, "b", 1): (0.8, 0.8),
           ("a", 1, "v100", True, "a", 1): (3.0, 3.0), ("a", 1, "k80", True, "a", 1): (0.8, 0.8)},
    measured=True)


class Fixed(GavelRounds):
    """The mechanism over a given allocation (unit -> X per type, in cluster type order)."""

    def __init__(self, alloc: dict[Unit, list[float]], **kw) -> None:
        super().__init__(**kw)
        self.given = alloc
        self.solved_at: list[float] = []

    def _allocate(self, table, jobs, units):
        self.solved_at.append(self._now)
        return {u: np.asarray(self.given.get(u, [0.0] * len(self.types)), dtype=float) for u in units}

    def order(self, table, active, now):
        self._now = now
        return super().order(table, active, now)


def _bound(policy: GavelRounds, cluster: str, model=TWO_TYPES) -> GavelRounds:
    policy.bind(parse_cluster_spec(cluster), model)
    return policy


def _table(jobs: list[JobSpec], model=TWO_TYPES) -> JobTable:
    t = JobTable(jobs)
    t.set_reference_rates(model)
    t.status[:] = JobStatus.QUEUED
    return t


def _jobs(n: int, submit: float = 0.0, jt: str = "a") -> list[JobSpec]:
    return [JobSpec(i, submit, 1, jt, 1e6, None) for i in range(n)]


def test_queues_are_filled_fastest_type_first() -> None:
    # Cluster order is k80, v100 (by name); Gavel fills the v100 queue first. Job 1's best priority
    # (0.9, on the k80) is higher than job 0's (0.5), but in the v100 queue job 0 ranks first, so
    # job 0 gets the v100 and job 1 the k80 (ranking by best priority would do the opposite).
    p = _bound(Fixed({0: [0.5, 0.5], 1: [0.9, 0.1]}, round_seconds=360), "1x1:k80,1x1:v100")
    assert p.types == ("k80", "v100")
    assert [p.types[t] for t in p.fill_order or p._fastest_first(_table(_jobs(2)))] == ["v100", "k80"]
    order = p.order(_table(_jobs(2)), np.arange(2), 0.0)
    assert order.tolist() == [0, 1]
    assert p.type_preference(0) == ("v100",) and p.type_preference(1) == ("k80",)


def test_fastest_first_for_other_type_names_follows_the_jobs_speed() -> None:
    model = TableModel(name="m", reference_gpu_type="h100",
                       alone={("a", 1, "h100", True): 9.0, ("a", 1, "a10", True): 2.0, ("a", 1, "l4", True): 3.0},
                       measured=True)
    p = _bound(Fixed({}), "1x1:a10,1x1:h100,1x1:l4", model)
    assert [p.types[t] for t in p._fastest_first(_table(_jobs(1), model))] == ["h100", "l4", "a10"]


def test_ties_go_to_the_larger_deficit_then_the_larger_allocation() -> None:
    p = _bound(Fixed({0: [0.0, 0.5], 1: [0.0, 0.5], 2: [0.0, 0.5]}), "1x1:v100")
    table = _table(_jobs(3))
    p.order(table, np.arange(3), 0.0)
    assert p.type_preference(0) == ("v100",)  # equal priorities and deficits: the first added
    p.deficit[2][:] = 10.0
    p.order(table, np.arange(3), 0.0)
    assert p.type_preference(2) == ("v100",)


def test_time_is_seeded_with_half_a_round_and_counted_since_the_last_reset() -> None:
    model = TWO_TYPES
    cluster = parse_cluster_spec("1x1:v100")
    policy = Fixed({0: [1.0], 1: [1.0]}, round_seconds=200, reset_interval=1000)
    sched = Scheduler(cluster, policy, GavelPlacement(), model)
    jobs = [JobSpec(0, 0.0, 1, "a", 1e6, None), JobSpec(1, 0.0, 1, "a", 1e6, None), JobSpec(2, 1.0, 1, "a", 1e6, None)]
    sim = Simulator(jobs, cluster, sched, SimConfig(round_seconds=200, restart_overhead=0, gavel_rounds=True))
    sim.run(until=650)
    # Seeds: half a round (100 s) each on add; the reset at t=0 keeps _last_reset_time at 0, so the
    # next change (job 2 at the round end, t=200) resets again, and re-seeds every unit with 100 s.
    assert policy.solved_at == [0.0, 200.0]
    assert policy.worker_time[0] == pytest.approx(3 * 100.0 + 2 * 200.0)  # seeds + two rounds since t=200
    received = {r: policy.time[r][0] - 100.0 for r in range(3)}
    assert sorted(received.values()) == pytest.approx([0.0, 200.0, 200.0])
    # Deficit at the t=200 reset: job 0 ran 200 s (allocation 1 x 200 s elapsed), job 1 did not.
    ran_first = 0 if policy.deficit[0][0] == pytest.approx(0.0) else 1
    assert policy.deficit[1 - ran_first][0] == pytest.approx(200.0)


def test_priority_is_allocation_over_share_since_reset_and_never_ran_is_huge() -> None:
    p = _bound(Fixed({0: [0.0, 0.6], 1: [0.0, 0.3]}), "1x1:k80,1x1:v100")
    table = _table(_jobs(2))
    p.order(table, np.arange(2), 0.0)
    p.time[0][1] = 300.0  # job 0 had 300 of the 480 s of v100 time, job 1 the 180 s seed
    p.worker_time[1] = 480.0
    prio = p._priorities(table)
    assert prio[0][1] == pytest.approx(0.6 / (300 / 480))
    assert prio[1][1] == pytest.approx(0.3 / (180 / 480))
    assert prio[0][0] == 0.0  # no allocation on the k80
    p.time[1][1] = 0.0
    assert p._priorities(table)[1][1] == pytest.approx(0.3 * 1e9)


def test_resolve_waits_for_the_minimum_interval_and_new_jobs_wait_without_allocation() -> None:
    table = _table([JobSpec(i, 0.0, 1, "a", 1e6, None) for i in range(3)])
    p = _bound(Fixed({0: [0.0, 1.0], 1: [0.0, 1.0], 2: [0.0, 1.0]}, round_seconds=360, reset_interval=1920),
               "2x1:k80,2x1:v100")
    p.order(table, np.array([0]), 0.0)  # reset at t=0 (Gavel's _last_reset_time stays 0)
    p.order(table, np.array([0, 1]), 100.0)  # job 1 arrived: reset again (the first at t > 0)
    assert p.solved_at == [0.0, 100.0]
    order = p.order(table, np.array([0, 1, 2]), 500.0)  # job 2 arrives 400 s after the reset
    assert p.solved_at == [0.0, 100.0], "no re-solve before 1920 s have passed"
    assert 2 not in order.tolist(), "a job that arrived since the last reset has no allocation and waits"
    p.order(table, np.array([0, 1, 2]), 2020.0)
    assert p.solved_at[-1] == 2020.0
    assert 2 in p.order(table, np.array([0, 1, 2]), 2020.0).tolist()


def test_reset_interval_zero_resolves_at_every_change() -> None:
    table = _table(_jobs(3))
    p = _bound(Fixed({0: [0.0, 1.0], 1: [0.0, 1.0], 2: [0.0, 1.0]}, reset_interval=0), "2x1:k80,2x1:v100")
    for n, now in ((1, 0.0), (2, 100.0), (3, 150.0), (3, 400.0)):
        p.order(table, np.arange(n), now)
    assert p.solved_at == [0.0, 100.0, 150.0]  # not at 400: the job set did not change


def test_pairs_are_units_with_their_own_time_and_run_together() -> None:
    table = _table(_jobs(3))
    pair = (0, 2)
    p = _bound(Fixed({0: [0.2], 1: [0.5], 2: [0.2], pair: [0.8]}, packing=True, round_seconds=360), "1x1:v100")
    order = p.order(table, np.arange(3), 0.0)
    # Units in Gavel's order: each job, then its pairs with the jobs before it; every unit, pairs
    # included, holds its own time, seeded with half a round at the reset.
    assert list(p.units) == [0, 1, (0, 1), 2, (0, 2), (1, 2)]
    assert all(p.time[u][0] == 180.0 for u in p.units)
    # The pair has the highest priority in the v100 queue: it takes the GPU as one unit.
    assert order.tolist() == [0] and p.pair_preference() == [pair]
    assert p.type_preference(2) == ("v100",)
    # What ran is credited to the pair, not to its jobs.
    p.credit(RanReport(0.0, 360.0, {0: Ran(0, 2, None, 360.0, 360.0), 2: Ran(0, 0, None, 350.0, 350.0)}))
    p.order(table, np.arange(3), 360.0)
    assert p.time[pair][0] == pytest.approx(180.0 + 360.0)
    assert p.time[0][0] == p.time[2][0] == 180.0


def test_packed_pair_shares_the_hosts_gpus_end_to_end() -> None:
    model = toy_model({("A", "B"): (0.8, 0.8)})
    jobs = [job(0, 0, 1, 2000, "A"), job(1, 0, 1, 2000, "B")]
    run = RunSpec(policy="gavel-maxmin", placement="gavel", packing=True, round_seconds=100, restart_overhead=0)
    res, summary = simulate(jobs, parse_cluster_spec("1x1"), model, run)
    assert summary["completed"] == 2
    assert summary["packed_pairs_per_round_mean"] > 0.5
    # Paired at 0.8 it/s each, both finish near 2000 / 0.8 = 2500 s (alone, one after the other: 4000).
    assert res.table.finish.max() < 3000


def test_gavel_rounds_end_with_the_last_micro_task_and_jump_to_arrivals() -> None:
    model = TableModel(name="m", reference_gpu_type="v100", alone={("a", 1, "v100", True): 2.5}, measured=True)
    cluster = parse_cluster_spec("1x1:v100")
    jobs = [JobSpec(0, 0.0, 1, "a", 600.0, None), JobSpec(1, 1000.0, 1, "a", 100.0, None)]
    sched = build_scheduler(cluster, model, RunSpec(policy="gavel-maxmin", placement="gavel"))
    res = Simulator(jobs, cluster, sched, SimConfig(round_seconds=101, restart_overhead=0, gavel_rounds=True)).run()
    # floor(2.5 x 101) = 252 iterations = 100.8 s a round; the last 96 take 38.4 s, and that round
    # ends with them at 240 s, where Gavel decides once more with no job (and so re-solves).
    # Then the idle cluster jumps to the arrival at 1000 s; job 1 arrived 760 s after that re-solve,
    # but nothing runs and nothing more arrives, so Gavel forces a re-solve and runs it at once.
    assert res.timeline["time"].tolist() == pytest.approx([0.0, 100.8, 201.6, 240.0, 1000.0, 1000.0, 1040.0, 1040.0])
    assert res.timeline["running"].tolist() == [1, 1, 1, 0, 0, 1, 0, 0]
    assert res.table.finish.tolist() == pytest.approx([240.0, 1040.0])


def test_gavel_rounds_are_the_default_only_for_the_gavel_baselines() -> None:
    assert GavelMaxMin.gavel_rounds and GavelFifo.gavel_rounds
    model = TableModel(name="m", reference_gpu_type="v100", alone={("a", 1, "v100", True): 2.5}, measured=True)
    jobs = [JobSpec(0, 0.0, 1, "a", 600.0, None), JobSpec(1, 1000.0, 1, "a", 100.0, None)]
    res, _ = simulate(jobs, parse_cluster_spec("1x1:v100"), model,
                      RunSpec(policy="fifo", placement="gavel", round_seconds=101, restart_overhead=0))
    assert res.timeline["time"].tolist() == pytest.approx([0.0, 101.0, 202.0, 1010.0])
    with pytest.raises(ValueError):
        SimConfig(event_driven=True, gavel_rounds=True)


def test_gavel_fifo_holds_an_allocation_until_the_next_reset() -> None:
    # Two 1-GPU jobs, one GPU: the first runs; the second waits. When the first finishes at 360 s
    # the GPU stays idle until a reset may happen (1920 s after the first one after t = 0).
    model = TableModel(name="m", reference_gpu_type="v100", alone={("a", 1, "v100", True): 1.0}, measured=True)
    jobs = [JobSpec(0, 0.0, 1, "a", 300.0, None), JobSpec(1, 10.0, 1, "a", 300.0, None),
            JobSpec(2, 20.0, 1, "a", 10.0, None), JobSpec(3, 5000.0, 1, "a", 10.0, None)]
    res, _ = simulate(jobs, parse_cluster_spec("1x1:v100"), model,
                      RunSpec(policy="gavel-fifo", placement="gavel", round_seconds=360, restart_overhead=0))
    start = res.table.first_start.tolist()
    assert start[0] == 0.0
    assert start[1] == pytest.approx(300.0)  # job 1 arrived while no reset had happened after t = 0
    assert start[2] >= 300.0 + 1920.0 - 1e-6  # job 2 arrived after that reset: waits out the interval
