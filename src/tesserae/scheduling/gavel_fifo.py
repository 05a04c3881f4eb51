"""Gavel's heterogeneity-aware FIFO (``fifo_perf``, Gavel's ``FIFOPolicyWithPerf``) as a baseline.

Not our ``fifo``: Gavel's FIFO is an allocation realised by Gavel's round mechanism
(``_gavel_rounds``). On each allocation reset the jobs, in arrival order, each get the GPU type
with the highest throughput among those with room for their gang (X = 1 there), until a job fits
on no type (strict FIFO: the walk stops). Between resets the allocation is fixed: a job that
arrives waits for the next reset (at least ``reset_interval`` after the last), and GPUs a finished
job leaves stay idle until then, because Gavel never schedules a unit of priority 0 under FIFO.
"""

from __future__ import annotations

from typing import ClassVar, Self

import numpy as np

from tesserae.core.jobs import JobTable
from tesserae.core.plugins import PluginOptions, RunContext
from tesserae.scheduling._gavel_rounds import GavelRounds, ResetOptions, Unit
from tesserae.scheduling.base import register


@register("gavel-fifo")
class GavelFifo(GavelRounds):
    skip_zero_priority: ClassVar[bool] = True
    Options: ClassVar[type[PluginOptions]] = ResetOptions

    @classmethod
    def from_options(cls, options: ResetOptions, context: RunContext) -> Self:
        """Gavel's FIFO does not pack; its rounds are the run's."""
        return cls(reset_interval=options.gavel_reset_interval, round_seconds=context.round_seconds)

    def _allocate(self, table: JobTable, jobs: list[int], units: list[Unit]) -> dict[Unit, np.ndarray]:
        T = len(self.types)
        avail = self.cap.astype(np.int64).copy()
        by_name = sorted(range(T), key=lambda t: self.types[t])  # Gavel iterates its types by name
        out: dict[Unit, np.ndarray] = {r: np.zeros(T) for r in jobs}
        for r in jobs:
            if not (avail > 0).any():
                break
            k = int(table.num_gpus[r])
            room = [t for t in by_name if avail[t] > 0 and avail[t] >= k]
            if not room:
                break
            rates = self.alone(table.job_type(r), k)
            best = room[0]
            for t in room[1:]:
                if rates[t] > rates[best]:
                    best = t
            if rates[best] > 0:
                out[r][best] = 1.0
                avail[best] -= k
        return out
