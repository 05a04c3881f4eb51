"""First-fit: every decision lays jobs out from scratch on the lowest free GPU ids.

A gang stays on one GPU type but may spread over nodes. It never tries to keep a running job
where it was, so it is the migration-heavy baseline that migration-minimizing placement beats.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tesserae.core.advice import Advice
from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import GpuPool, PlacementPolicy, PooledPlacer, RoundPlacer, register


def lowest_free_nodes(pool: GpuPool, nodes: np.ndarray, k: int, counts: np.ndarray | None = None
                      ) -> list[tuple[int, int]] | None:
    """(node, count) pairs covering ``k`` GPUs over ``nodes`` in order, or None if too few."""
    avail = (pool.node_free if counts is None else counts)[nodes]
    cs = np.cumsum(avail)
    if cs.size == 0 or cs[-1] < k:
        return None
    last = int(np.searchsorted(cs, k))
    take = avail[: last + 1].copy()
    take[last] -= cs[last] - k
    return [(int(n), int(c)) for n, c in zip(nodes[: last + 1], take, strict=True) if c > 0]


class FirstFitPlacer(PooledPlacer):
    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, advice: Advice | None = None) -> None:
        super().__init__(cluster, table, previous, model, advice)
        self.type_nodes = [np.flatnonzero(cluster.node_type == t) for t in range(len(cluster.gpu_types))]

    def try_admit(self, row: int) -> bool:
        k = int(self.table.num_gpus[row])
        for t in self.type_order(row):
            nodes = self.type_nodes[t]
            if self.pool.free_by_type[t] < k:
                continue
            layout = lowest_free_nodes(self.pool, nodes, k)
            if layout is not None:
                self.assigned[row] = Assignment(row, self.pool.take_nodes(layout))
                return True
        return False


@register("first-fit")
class FirstFit(PlacementPolicy):
    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        return FirstFitPlacer(cluster, table, previous, model, advice)
