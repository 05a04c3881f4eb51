"""``benchmarks/sim_vs_real.py``: its simulator half replays a real run's jobs under each policy it compares
(the real half needs a server, or Slurm's daemons: the benchmark's, not a test's)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from _sim_vs_real_state import start_overheads
from sim_vs_real import run_sim, workload


def test_the_simulator_half_replays_plain_las_and_tiresias_with_its_queues() -> None:
    jobs = workload(8, 1, 0.05, 1.5)
    for k, job in enumerate(jobs):
        job["id"] = k + 1
    real = {job["id"]: {"submit_time": 1000.0 + job["at"]} for job in jobs}
    for policy, queues in (("las", None), ("tiresias-las", "10")):
        args = argparse.Namespace(spi=0.05, gpus=4, policy=policy, placement="consolidated", round_seconds=5.0,
                                  event_driven=True, queues=queues)
        jct, preemptions = run_sim(jobs, real, args, 0.5)
        work = {job["id"]: job["iterations"] * 0.05 for job in jobs}
        assert sorted(jct) == sorted(work) and all(jct[i] >= work[i] + 0.5 - 1e-9 for i in jct), (policy, jct)
        assert preemptions >= 0


def test_the_simulator_half_takes_the_stop_latency_apart_from_the_restart_overhead() -> None:
    # Plain LAS preempts at arrivals; a stop latency delays the starts after them.
    jobs = workload(16, 1, 0.05, 1.5)
    for k, job in enumerate(jobs):
        job["id"] = k + 1
    real = {job["id"]: {"submit_time": 1000.0 + job["at"]} for job in jobs}
    args = argparse.Namespace(spi=0.05, gpus=4, policy="las", placement="consolidated", round_seconds=5.0,
                              event_driven=True, queues=None)
    at_once, preempted = run_sim(jobs, real, args, 0.5)
    slow, _ = run_sim(jobs, real, args, 0.5, 0.3)
    assert preempted > 0 and sum(slow.values()) > sum(at_once.values())


def test_the_restart_overhead_counts_from_the_end_of_the_stops_its_decision_waited_for() -> None:
    decisions = [10.0, 20.0]
    # Run 1 starts at 10.01 on free GPUs and iterates at 10.51; run 3 was asked to stop at 20.01 and ended at
    # 20.40, and run 2 started at 20.41 (the runtime starts nothing before a decision's stops are done); run 4
    # never iterated.
    starts = [(1, 10.01), (2, 20.41), (4, 20.42)]
    asked, ends = {3: 20.01}, {3: 20.40}
    first_iter = {1: 10.51, 2: 20.90}
    overheads, from_decision = start_overheads(decisions, starts, asked, ends, first_iter)
    assert overheads == pytest.approx([0.51, 0.50]) and from_decision == pytest.approx([0.51, 0.90])
