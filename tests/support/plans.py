"""The plan checker: a scheduler that asserts the invariants of every plan it makes (gangs whole, no
GPU given twice, one GPU type per gang, partners on their host's GPUs and naming each other)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.scheduler import Scheduler


class CheckingScheduler(Scheduler):
    """Asserts the invariants of every plan, including those of shared GPUs."""

    def decide(self, now: float, table: JobTable, active: np.ndarray,
               previous: Mapping[int, Assignment]) -> Plan:
        plan = super().decide(now, table, active, previous)
        cl = self.cluster
        used: list[int] = []
        act = set(active.tolist())
        for row, a in plan.assignments.items():
            assert row in act
            assert len(a.gpus) == table.num_gpus[row], "a gang gets all its GPUs or none"
            assert len(set(a.gpus)) == len(a.gpus)
            assert len({int(cl.gpu_type[g]) for g in a.gpus}) == 1, "a gang stays on one GPU type"
            if a.partner is None:
                used.extend(a.gpus)
                continue
            host = plan.assignments[a.partner]
            assert host.partner == row, "partners name each other"
            if len(a.gpus) < len(host.gpus) or (len(a.gpus) == len(host.gpus) and row > a.partner):
                assert set(a.gpus) <= set(host.gpus), "a partner runs on its host's GPUs"
            else:
                used.extend(a.gpus)
        assert len(used) == len(set(used)), "two units on one GPU"
        assert sorted(plan.pairs) == sorted({tuple(sorted((r, a.partner))) for r, a in plan.assignments.items()
                                             if a.partner is not None})
        return plan
