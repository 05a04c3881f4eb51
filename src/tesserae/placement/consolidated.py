"""Consolidated (Blox default): fewest nodes, best fit, and never move a running job.

A job that fits on one node gets the fullest node that still holds it; a larger job gets whole
free nodes plus one best-fit node for the rest. If no such layout exists the job waits. A job
that ran last round keeps exactly its GPUs, or is preempted when a higher-priority job took
them; new jobs avoid the GPUs of running jobs whenever another layout exists.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import PlacementPolicy, RoundPlacer, register


def consolidated_layout(nodes: np.ndarray, avail: np.ndarray, cap: np.ndarray, k: int
                        ) -> list[tuple[int, int]] | None:
    """Fewest-node, best-fit layout of ``k`` GPUs; ``avail``/``cap`` are per entry of ``nodes``."""
    if avail.sum() < k:
        return None
    if k <= cap.max():
        fits = np.flatnonzero(avail >= k)
        if fits.size == 0:
            return None
        best = fits[np.argmin(avail[fits])]  # argmin keeps the lowest index among ties
        return [(int(nodes[best]), k)]
    whole = np.flatnonzero(avail == cap)
    whole = whole[np.argsort(-cap[whole], kind="stable")]
    layout: list[tuple[int, int]] = []
    need = k
    used = np.zeros(nodes.size, dtype=bool)
    for i in whole:
        if need < cap[i]:
            break
        layout.append((int(nodes[i]), int(cap[i])))
        used[i] = True
        need -= int(cap[i])
    if need > 0:
        fits = np.flatnonzero((avail >= need) & ~used)
        if fits.size == 0:
            return None
        best = fits[np.argmin(avail[fits])]
        layout.append((int(nodes[best]), need))
    return layout


class ConsolidatedPlacer(RoundPlacer):
    """Best-fit consolidation that protects running jobs' GPUs (see module docstring)."""

    #: Whether a running job may be moved when its GPUs were taken (False = preempt instead).
    move_running = False

    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel) -> None:
        super().__init__(cluster, table, previous, model)
        self.type_nodes = [np.flatnonzero(cluster.node_type == t) for t in range(len(cluster.gpu_types))]
        self.reserved = np.zeros(cluster.num_gpus, dtype=bool)
        for a in previous.values():
            self.reserved[list(a.gpus)] = True
        self.node_reserved_free = np.bincount(cluster.gpu_node[self.reserved], minlength=cluster.num_nodes)

    def _take(self, row: int, layout: list[tuple[int, int]], mask: np.ndarray | None) -> None:
        gpus = self.pool.take_nodes(layout, mask)
        idx = np.asarray(gpus, dtype=np.int64)
        hit = idx[self.reserved[idx]]
        if hit.size:
            np.subtract.at(self.node_reserved_free, self.cluster.gpu_node[hit], 1)
            self.reserved[hit] = False
        self.assigned[row] = Assignment(row, gpus)

    def _keep_previous(self, row: int) -> bool | None:
        prev = self.previous.get(row)
        if prev is None:
            return None
        if self.pool.all_free(prev.gpus):
            self.pool.take(prev.gpus)
            idx = np.asarray(prev.gpus, dtype=np.int64)
            np.subtract.at(self.node_reserved_free, self.cluster.gpu_node[idx], 1)
            self.reserved[idx] = False
            self.assigned[row] = Assignment(row, prev.gpus)
            return True
        return None if self.move_running else False

    def layout_for(self, row: int, counts: np.ndarray) -> list[tuple[int, int]] | None:
        k = int(self.table.num_gpus[row])
        for t, nodes in enumerate(self.type_nodes):
            if self.pool.free_by_type[t] < k:
                continue
            layout = consolidated_layout(nodes, counts[nodes], self.cluster.node_num_gpus[nodes], k)
            if layout is not None:
                return layout
        return None

    def try_admit(self, row: int) -> bool:
        kept = self._keep_previous(row)
        if kept is not None:
            return kept
        unreserved = self.pool.node_free - self.node_reserved_free
        layout = self.layout_for(row, unreserved)
        if layout is not None:
            self._take(row, layout, ~self.reserved)
            return True
        layout = self.layout_for(row, self.pool.node_free)
        if layout is None:
            return False
        self._take(row, layout, None)
        return True


@register("consolidated")
class Consolidated(PlacementPolicy):
    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel) -> RoundPlacer:
        return ConsolidatedPlacer(cluster, table, previous, model)
