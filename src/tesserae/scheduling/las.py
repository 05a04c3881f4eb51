"""LAS: least attained service, in time (wall seconds a job has held GPUs); ties by submit."""

from __future__ import annotations

import numpy as np

from tesserae.core.jobs import JobTable
from tesserae.scheduling.base import SchedulingPolicy, by_keys, register


@register("las")
class Las(SchedulingPolicy):
    time_slicing = True
    orders_inside_queues = True

    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        return by_keys(active, table.executed[active], table.submit[active], table.job_id[active])
