"""SRTF: shortest remaining time first, from the true remaining work (an oracle baseline).

Remaining time is remaining iterations over the job's reference rate (consolidated, alone, on
the reference GPU type): the isolated time it still needs.
"""

from __future__ import annotations

import numpy as np

from tesserae.core.jobs import JobTable
from tesserae.scheduling.base import SchedulingPolicy, by_keys, register


def remaining_seconds(table: JobTable, rows: np.ndarray) -> np.ndarray:
    return table.remaining_work(rows) / table.ref_rate[rows]


@register("srtf")
class Srtf(SchedulingPolicy):
    oracle = True
    orders_inside_queues = True

    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        return by_keys(active, remaining_seconds(table, active), table.submit[active], table.job_id[active])


@register("srsf")
class Srsf(SchedulingPolicy):
    """Shortest remaining service (GPUs x remaining time) first: the 2D oracle of Tiresias."""

    oracle = True
    orders_inside_queues = True

    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        service = remaining_seconds(table, active) * table.num_gpus[active]
        return by_keys(active, service, table.submit[active], table.job_id[active])
