"""``yarn``: YARN-CS placement as in Tiresias' simulator (``ms_yarn_placement``).

All of a job's GPUs come from one rack (switch) and one GPU type, all or nothing. A job that fits
on one node gets the first node of the rack with enough free GPUs (first fit); a larger job gets
whole free nodes first (``k // node size`` of them) and one more node with enough free GPUs for
the rest. Racks are tried in order; if no rack can hold the job, it waits.

Running jobs keep their GPUs; a new job uses free GPUs whenever such a layout exists, and
otherwise may evict running jobs of lower priority, lowest first (see ``ReservingPlacer`` in
``tesserae.placement.tiresias``). Paired with ``fifo --no-backfill`` this is the YARN-CS baseline of the Tiresias paper.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tesserae.core.advice import Advice
from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import PlacementPolicy, RoundPlacer, register
from tesserae.placement.tiresias import ReservingPlacer


def yarn_layout(nodes: np.ndarray, avail: np.ndarray, cap: np.ndarray, k: int) -> list[tuple[int, int]] | None:
    """First-fit layout of ``k`` GPUs on the nodes of one rack (``avail``/``cap`` per entry of ``nodes``)."""
    if k <= 0 or avail.sum() < k:
        return None
    if k <= cap.max():
        fits = np.flatnonzero(avail >= k)
        return [(int(nodes[fits[0]]), k)] if fits.size else None
    layout: list[tuple[int, int]] = []
    used = np.zeros(nodes.size, dtype=bool)
    need = k
    for i in np.flatnonzero(avail == cap).tolist():
        if need < cap[i]:
            continue
        layout.append((int(nodes[i]), int(cap[i])))
        used[i] = True
        need -= int(cap[i])
        if need == 0:
            return layout
    fits = np.flatnonzero((avail >= need) & ~used)
    if fits.size == 0:
        return None
    layout.append((int(nodes[fits[0]]), need))
    return layout


class YarnPlacer(ReservingPlacer):
    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, groups: list[tuple[int, np.ndarray]], node_of: list[int],
                 advice: Advice | None = None) -> None:
        super().__init__(cluster, table, previous, model, advice, node_of)
        self.groups = groups  # (gpu type, nodes of one rack with that type), racks in order

    def _layout(self, row: int, counts: np.ndarray) -> list[tuple[int, int]] | None:
        k = int(self.table.num_gpus[row])
        cap = self.cluster.node_num_gpus
        ok = set(self.type_order(row))
        for t, nodes in self.groups:
            if t not in ok:
                continue
            layout = yarn_layout(nodes, counts[nodes], cap[nodes], k)
            if layout is not None:
                return layout
        return None

    def try_admit(self, row: int) -> bool:
        if self.keep_previous(row):
            return True
        layout = self._layout(row, self.counts(False))
        if layout is None and self.may_displace(row):
            layout = self._layout(row, self.counts(True))
        if layout is None:
            return False
        self.take_layout(row, layout)
        return True


@register("yarn")
class Yarn(PlacementPolicy):
    def __init__(self) -> None:
        self._cluster: Cluster | None = None
        self._groups: list[tuple[int, np.ndarray]] = []
        self._node_of: list[int] = []

    def _groups_for(self, cluster: Cluster) -> list[tuple[int, np.ndarray]]:
        if cluster is not self._cluster:
            self._cluster = cluster
            groups = []
            for rack in np.unique(cluster.node_rack).tolist():
                for t in range(len(cluster.gpu_types)):
                    nodes = np.flatnonzero((cluster.node_rack == rack) & (cluster.node_type == t))
                    if nodes.size:
                        groups.append((t, nodes))
            self._groups = groups
            self._node_of = cluster.gpu_node.tolist()
        return self._groups

    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        groups = self._groups_for(cluster)
        return YarnPlacer(cluster, table, previous, model, groups, self._node_of, advice)
