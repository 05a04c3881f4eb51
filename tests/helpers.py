"""Small builders for tests: jobs with durations on the built-in model (1 iteration = 1 s), and a
scheduler that checks the invariants of every plan it makes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tesserae.core.jobs import JobSpec, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.scheduler import Scheduler


def job(job_id: int, submit: float, gpus: int, duration: float, job_type: str = "resnet50") -> JobSpec:
    return JobSpec(job_id, float(submit), gpus, job_type, float(duration), float(duration))


class CheckingScheduler(Scheduler):
    """Asserts the invariants on every plan the wrapped scheduler makes."""

    def decide(self, now: float, table: JobTable, active: np.ndarray,
               previous: Mapping[int, Assignment]) -> Plan:
        plan = super().decide(now, table, active, previous)
        used: list[int] = []
        for row, a in plan.assignments.items():
            assert row in set(active.tolist())
            assert len(a.gpus) == table.num_gpus[row], "a gang must get all its GPUs or none"
            assert len(set(a.gpus)) == len(a.gpus)
            if a.partner is None:
                used.extend(a.gpus)
        assert len(used) == len(set(used)), "two unpaired jobs on one GPU"
        assert all(0 <= g < self.cluster.num_gpus for g in used)
        return plan
