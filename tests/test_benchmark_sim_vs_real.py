"""``benchmarks/sim_vs_real.py``: its simulator half replays a real run's jobs under each policy it compares
(the real half needs a server, or Slurm's daemons: the benchmark's, not a test's)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

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
