"""FIFO: submit order. The no-backfill (YARN-CS) variant is the allocator's ``no_backfill``."""

from __future__ import annotations

import numpy as np

from tesserae.core.jobs import JobTable
from tesserae.scheduling.base import SchedulingPolicy, by_keys, register


@register("fifo")
class Fifo(SchedulingPolicy):
    orders_inside_queues = True

    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        return by_keys(active, table.submit[active], table.job_id[active])
