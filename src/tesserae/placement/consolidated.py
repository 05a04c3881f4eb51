"""Consolidated (Blox default): fewest nodes, best fit, and never move a running job.

A job that fits on one node gets the fullest node that still holds it; a larger job gets whole
free nodes plus one best-fit node for the rest. If no such layout exists the job waits. A job
that ran last round keeps exactly its GPUs; it is preempted only when a higher-priority job
could be laid out in no other way than over those GPUs (new jobs use unheld GPUs first). Then the
running jobs that lose their GPUs are chosen in the policy's rank order, lowest first (``_evict``),
so that a comparison with another placement changes only the placement.
Continuing jobs cost O(1) each: their GPUs are held for them in bulk when the round begins.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain

import numpy as np

from tesserae.core.advice import Advice
from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.throughput import ThroughputModel
from tesserae.placement._evict import EvictsByRank, HeldGpus, type_positions
from tesserae.placement.base import PlacementPolicy, PooledPlacer, RoundPlacer, register


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


class ConsolidatedPlacer(EvictsByRank, PooledPlacer):
    """Best-fit consolidation that holds running jobs' GPUs for them (see module docstring).

    ``pool`` holds the GPUs nobody claims; GPUs of continuing jobs not yet admitted are *held*
    (counted per node in ``node_reserved_free``) and can be taken only by evicting their owner.
    """

    #: Whether a running job may be moved when its GPUs were taken (False = preempt instead).
    move_running = False

    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, advice: Advice | None = None,
                 type_pos: np.ndarray | None = None) -> None:
        super().__init__(cluster, table, previous, model, advice)
        self.type_nodes = [np.flatnonzero(cluster.node_type == t) for t in range(len(cluster.gpu_types))]
        self.owner = np.full(cluster.num_gpus, -1, dtype=np.int64)
        self.held_total = 0
        self.evicted: set[int] = set()
        self._type_pos = type_pos
        self._held_view: HeldGpus | None = None
        # Gang shapes (size, runnable types) that found no layout this round. Taking GPUs and keeping
        # running jobs only shrink what is available, so a failure stays a failure; only an eviction
        # (held GPUs returned to the pool) can make the unheld-only layout feasible again.
        self._failed_unheld: set[tuple[int, tuple[int, ...]]] = set()
        self._failed_any: set[tuple[int, tuple[int, ...]]] = set()
        if previous:
            rows = np.fromiter(previous, dtype=np.int64, count=len(previous))
            sizes = np.fromiter((len(a.gpus) for a in previous.values()), dtype=np.int64, count=len(previous))
            gpus = np.fromiter(chain.from_iterable(a.gpus for a in previous.values()), dtype=np.int64,
                               count=int(sizes.sum()))
            self.owner[gpus] = np.repeat(rows, sizes)
            self.pool.take(gpus)
            self.held_total = int(gpus.size)
            self._node_held = np.bincount(cluster.gpu_node[gpus], minlength=cluster.num_nodes).tolist()
        else:
            self._node_held = [0] * cluster.num_nodes
        self._gpu_node = cluster.gpu_node_list

    @property
    def free(self) -> int:
        return self.pool.total_free + self.held_total

    def _unhold(self, row: int) -> tuple[int, ...]:
        gpus = self.previous[row].gpus
        held, gpu_node = self._node_held, self._gpu_node
        for g in gpus:
            held[gpu_node[g]] -= 1
        self.release_held(gpus)
        self.held_total -= len(gpus)
        return gpus

    @property
    def node_reserved_free(self) -> np.ndarray:
        """GPUs per node held for continuing jobs not admitted yet."""
        return np.array(self._node_held, dtype=np.int64)

    def _evict(self, row: int) -> None:
        gpus = self._unhold(row)
        self.owner[list(gpus)] = -1
        self.pool.release(gpus)
        self.evicted.add(row)
        self._failed_unheld.clear()

    def _take(self, row: int, layout: list[tuple[int, int]], mask: np.ndarray | None = None) -> None:
        """Take ``layout`` (unheld GPUs first, then GPUs of held owners, lowest rank first)."""
        self.evict_for(layout)
        self.assigned[row] = Assignment(row, self.pool.take_nodes(layout, mask))

    def keep_running(self, rows: np.ndarray) -> int:
        """``BulkKeeper``: admit jobs that ran last round and come first in priority order, all at once
        (all of them).

        Called before any other admission: nothing has been evicted yet, so each keeps its GPUs.
        """
        prev, assigned = self.previous, self.assigned
        kept = [prev[r] for r in rows.tolist()]
        for a in kept:
            assigned[a.row] = a if a.partner is None else Assignment(a.row, a.gpus)
        gpus = np.fromiter(chain.from_iterable(a.gpus for a in kept), dtype=np.int64)
        held = np.asarray(self._node_held) - np.bincount(self.cluster.gpu_node[gpus], minlength=self.cluster.num_nodes)
        self._node_held = held.tolist()
        self.release_held(gpus)
        self.held_total -= int(gpus.size)
        return int(rows.size)

    def _keep_previous(self, row: int) -> bool | None:
        """True: kept its GPUs; False: preempted; None: not a continuing job (or may move)."""
        if row not in self.previous:
            return None
        if row in self.evicted:
            return None if self.move_running else False
        self._unhold(row)
        prev = self.previous[row]
        self.assigned[row] = prev if prev.partner is None else Assignment(row, prev.gpus)
        return True

    def layout_for(self, row: int, counts: np.ndarray) -> list[tuple[int, int]] | None:
        k = int(self.table.num_gpus[row])
        for t in self.type_order(row):
            nodes = self.type_nodes[t]
            if self.pool.free_by_type[t] + self.held_total < k:
                continue
            layout = consolidated_layout(nodes, counts[nodes], self.cluster.node_num_gpus[nodes], k)
            if layout is not None:
                return layout
        return None

    def try_admit(self, row: int) -> bool:
        kept = self._keep_previous(row)
        if kept is not None:
            return kept
        shape = (int(self.table.num_gpus[row]), self.runnable_types(row))
        layout = None
        if shape not in self._failed_unheld:
            layout = self.layout_for(row, self.pool.node_free)
            if layout is None:
                self._failed_unheld.add(shape)
        if layout is None:
            if shape in self._failed_any:
                return False
            layout = self.evicting_layout(row)
            if layout is None:
                self._failed_any.add(shape)
                return False
        self._take(row, layout)
        return True


@register("consolidated")
class Consolidated(PlacementPolicy):
    def __init__(self) -> None:
        self._cluster: Cluster | None = None
        self._type_pos = np.zeros(0, dtype=np.int64)

    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        if cluster is not self._cluster:
            self._cluster, self._type_pos = cluster, type_positions(cluster.node_type, cluster.gpu_node)
        return ConsolidatedPlacer(cluster, table, previous, model, advice, self._type_pos)
