"""``smallest-first``: the smallest gang first (it fits soonest and blocks least), with a starvation
guard: a job that has waited longer than ``starvation_seconds`` goes ahead of every job that has not,
oldest first, so large gangs are not held back forever.

A job's waiting time is its time in the system less the time it has run. Ties: earliest submit,
then job id, so the order is the same on every machine.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from tesserae.core.jobs import JobTable
from tesserae.core.plugins import PluginOptions
from tesserae.scheduling.base import SchedulingPolicy, by_keys


class SmallestFirstOptions(PluginOptions):
    starvation_seconds: float | None = Field(None, gt=0, allow_inf_nan=False, description="a job that has "
                                             "waited longer than this goes first, oldest first (default: never)")


class SmallestFirst(SchedulingPolicy):
    """Smallest gang first, with a starvation guard (see module docstring)."""

    #: Its options: ``--policy-opt starvation_seconds=3600``. The constructor takes them by name.
    Options = SmallestFirstOptions
    #: It only orders jobs, so it may also order the jobs inside a tenant queue.
    orders_inside_queues = True

    def __init__(self, starvation_seconds: float | None = None) -> None:
        self.starvation_seconds = starvation_seconds
        self.starved_decisions = 0

    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        waited = now - table.submit[active] - table.executed[active]
        starved = waited > self.starvation_seconds if self.starvation_seconds is not None else \
            np.zeros(active.size, dtype=bool)
        self.starved_decisions += bool(starved.any())
        # Starved jobs first (by submit); then the rest by gang size, then submit.
        size = np.where(starved, 0, table.num_gpus[active])
        return by_keys(active, ~starved, size, table.submit[active], table.job_id[active])

    def summary(self) -> dict[str, float | int | None]:
        return {"starvation_seconds": self.starvation_seconds, "starved_decisions": self.starved_decisions}
