"""``tiresias``: profile-guided, skew-aware consolidation (Tiresias, NSDI 2019; DESIGN §4).

A model's skew is its largest tensor's share of all parameters (from the throughput profile).
High-skew models (skew > threshold) are communication-heavy when spread over machines, so such a
job must get a consolidated layout (fewest nodes, best fit: ``consolidated_layout``) or it waits.
Low-skew jobs prefer a consolidated layout but take any free GPUs (fewest nodes first) rather
than wait; a spread job runs slower by the throughput model's unconsolidated factor. Job types
the profile has no skew for count as low skew and are counted in the summary.

The default threshold, 0.4, sits in the wide gap between the skews Tiresias profiled: VGG
(0.72-0.77) and AlexNet (0.61) consolidate; ResNet (0.06-0.11) and Inception (0.044-0.14) may
spread. Any value in (0.14, 0.61) splits these models the same way; 0.4 is mid-gap.

Running jobs keep their GPUs. New jobs take free GPUs whenever a layout of their kind exists
there, so that running jobs are not displaced needlessly; otherwise they may evict running jobs
the allocator has not reached yet (lower in priority) and take their GPUs, lowest in the policy's
rank first (``_evict``). An evicted job is placed again under the same rule but on free GPUs only
(a migration), or waits: evictions do not cascade (see ``ReservingPlacer``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from tesserae.core.advice import Advice
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.plugins import PluginOptions
from tesserae.core.throughput import ThroughputModel
from tesserae.placement._evict import EvictsByRank, HeldGpus, type_positions
from tesserae.placement.base import PlacementPolicy, PooledPlacer, RoundPlacer, register
from tesserae.placement.consolidated import consolidated_layout

DEFAULT_SKEW_THRESHOLD = 0.4


def fewest_nodes_layout(nodes: np.ndarray, avail: np.ndarray, k: int) -> list[tuple[int, int]] | None:
    """Any ``k`` GPUs over ``nodes``, from the nodes with most free GPUs first (ties: lowest id)."""
    if avail.sum() < k or k <= 0:
        return None
    order = np.argsort(-avail, kind="stable")
    cs = np.cumsum(avail[order])
    last = int(np.searchsorted(cs, k))
    take = avail[order[: last + 1]].copy()
    take[last] -= cs[last] - k
    return [(int(nodes[i]), int(c)) for i, c in zip(order[: last + 1], take, strict=True) if c > 0]


class ReservingPlacer(EvictsByRank, PooledPlacer):
    """Base of the Tiresias and YARN placers: running jobs' GPUs are *held* for them.

    When the decision begins, the GPUs of every running job leave the free pool in one vectorised
    step and are held (counted per node) for their owner. A running job the allocator admits keeps
    exactly its GPUs at O(1) cost. A job that was not running may, when no layout of its kind fits
    the free GPUs, take held GPUs: their owners -- running jobs the allocator has not reached yet,
    hence of lower priority -- are *evicted*, lowest in the policy's rank first, and their GPUs
    freed. An evicted job, when its turn comes, is placed again on free GPUs only (a migration) or
    waits: evictions never cascade. ``free`` counts held GPUs, so the allocator's gang-size test
    sees the whole cluster.
    """

    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, advice: Advice | None = None, node_of: list[int] | None = None,
                 type_pos: np.ndarray | None = None) -> None:
        super().__init__(cluster, table, previous, model, advice)
        self.type_nodes = [np.flatnonzero(cluster.node_type == t) for t in range(len(cluster.gpu_types))]
        self.node_of = node_of if node_of is not None else cluster.gpu_node.tolist()
        self.owner = np.full(cluster.num_gpus, -1, dtype=np.int64)
        self.held_node = [0] * cluster.num_nodes
        self.held_total = 0
        self.evicted: set[int] = set()
        self._type_pos = type_pos
        self._held_view: HeldGpus | None = None
        if previous:
            rows = np.fromiter(previous, dtype=np.int64, count=len(previous))
            sizes = np.fromiter((len(a.gpus) for a in previous.values()), dtype=np.int64, count=len(previous))
            gpus = np.fromiter((g for a in previous.values() for g in a.gpus), dtype=np.int64,
                               count=int(sizes.sum()))
            self.owner[gpus] = np.repeat(rows, sizes)
            self.pool.take(gpus)
            self.held_node = np.bincount(cluster.gpu_node[gpus], minlength=cluster.num_nodes).tolist()
            self.held_total = int(gpus.size)

    @property
    def free(self) -> int:
        return self.pool.total_free + self.held_total

    def _unhold(self, gpus: tuple[int, ...]) -> None:
        node_of, held = self.node_of, self.held_node
        for g in gpus:
            held[node_of[g]] -= 1
        self.release_held(gpus)
        self.held_total -= len(gpus)

    def keep_previous(self, row: int) -> bool:
        """Keep a running job on its GPUs unless a higher-priority job evicted it."""
        prev = self.previous.get(row)
        if prev is None or row in self.evicted:
            return False
        self._unhold(prev.gpus)  # ``owner`` keeps naming it: eviction skips admitted jobs
        self.assigned[row] = Assignment(row, prev.gpus)
        return True

    def _evict(self, row: int) -> None:
        gpus = self.previous[row].gpus
        self._unhold(gpus)
        self.owner[list(gpus)] = -1
        self.pool.release(gpus)
        self.evicted.add(row)

    def may_displace(self, row: int) -> bool:
        """Only jobs that were not running may evict running ones."""
        return row not in self.previous

    def counts(self, displace: bool) -> np.ndarray:
        """GPUs per node a job may use: free ones, plus held ones when it may evict their owners."""
        if not displace:
            return self.pool.node_free
        return self.pool.node_free + np.asarray(self.held_node, dtype=np.int64)

    def take_layout(self, row: int, layout: list[tuple[int, int]]) -> None:
        """Take ``layout``: free GPUs first, then GPUs of held owners, lowest in the policy's rank first."""
        self.evict_for(layout)
        self.assigned[row] = Assignment(row, self.pool.take_nodes(layout))

    def consolidated_for(self, row: int, counts: np.ndarray) -> list[tuple[int, int]] | None:
        """``consolidated_layout`` on the first GPU type that holds the job (free GPUs only)."""
        k = int(self.table.num_gpus[row])
        cap = self.cluster.node_num_gpus
        for t in self.type_order(row):
            nodes = self.type_nodes[t]
            layout = consolidated_layout(nodes, counts[nodes], cap[nodes], k)
            if layout is not None:
                return layout
        return None


class TiresiasPlacer(ReservingPlacer):
    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, high_skew: np.ndarray, policy: TiresiasPlacement,
                 advice: Advice | None = None, node_of: list[int] | None = None,
                 type_pos: np.ndarray | None = None) -> None:
        super().__init__(cluster, table, previous, model, advice, node_of, type_pos)
        self.high_skew = high_skew  # per job-type index
        self.policy = policy

    def _spread(self, row: int, counts: np.ndarray) -> list[tuple[int, int]] | None:
        k = int(self.table.num_gpus[row])
        for t in self.type_order(row):
            nodes = self.type_nodes[t]
            layout = fewest_nodes_layout(nodes, counts[nodes], k)
            if layout is not None:
                return layout
        return None

    def try_admit(self, row: int) -> bool:
        if self.keep_previous(row):
            return True
        high = bool(self.high_skew[self.table.type_idx[row]])
        layout, spread = None, False
        for displace in (False, True) if self.may_displace(row) else (False,):
            counts = self.counts(displace)
            layout = self.evicting_layout(row) if displace else self.consolidated_for(row, counts)
            if layout is None and not high:
                layout = self._spread(row, counts)
                spread = layout is not None
            if layout is not None:
                break
        if layout is None:
            if high:
                self.policy.consolidation_waits += 1
            return False
        if spread:
            per_node = self._type_node_size(row, layout)
            spread = len(layout) > math.ceil(int(self.table.num_gpus[row]) / per_node)
            self.policy.spread_placements += int(spread)
        self.take_layout(row, layout)
        return True

    def _type_node_size(self, row: int, layout: list[tuple[int, int]]) -> int:
        t = int(self.cluster.node_type[layout[0][0]])
        return int(self.cluster.node_num_gpus[self.type_nodes[t]].max())


class SkewOptions(PluginOptions):
    skew_threshold: float | None = Field(None, ge=0, allow_inf_nan=False, description="model skew above which "
                                         f"a job must be consolidated (default {DEFAULT_SKEW_THRESHOLD})")


@register("tiresias")
class TiresiasPlacement(PlacementPolicy):
    """Skew-aware consolidation (see module docstring)."""

    Options: ClassVar[type[PluginOptions]] = SkewOptions

    def __init__(self, skew_threshold: float | None = None) -> None:
        thr = DEFAULT_SKEW_THRESHOLD if skew_threshold is None else float(skew_threshold)
        if not math.isfinite(thr) or thr < 0:
            raise InputError(f"skew threshold {thr} must be a finite number >= 0", field="skew-threshold")
        self.skew_threshold = thr
        self._table: JobTable | None = None
        self._cluster: Cluster | None = None
        self._node_of: list[int] = []
        self._type_pos = np.zeros(0, dtype=np.int64)
        self._high = np.zeros(0, dtype=bool)
        self.unknown_types: list[str] = []
        self.high_skew_types: list[str] = []
        self.consolidation_waits = 0
        self.spread_placements = 0

    def _classify(self, table: JobTable, model: ThroughputModel) -> np.ndarray:
        # A table's type list may grow between decisions (learned class keys are appended, never
        # changed): the classification is extended then.
        if table is not self._table or len(table.types) != self._high.size:
            if table is not self._table:
                self.consolidation_waits = 0
                self.spread_placements = 0
            self._table = table
            skews = [model.skew(t) for t in table.types]
            self.unknown_types = [t for t, s in zip(table.types, skews, strict=True) if s is None]
            self._high = np.array([s is not None and s > self.skew_threshold for s in skews], dtype=bool)
            self.high_skew_types = [t for t, h in zip(table.types, self._high, strict=True) if h]
        return self._high

    def high_skew(self, table: JobTable, model: ThroughputModel) -> np.ndarray:
        """Per job-type index of ``table.types``: must this type be consolidated?"""
        return self._classify(table, model)

    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        if cluster is not self._cluster:
            self._cluster, self._node_of = cluster, cluster.gpu_node.tolist()
            self._type_pos = type_positions(cluster.node_type, cluster.gpu_node)
        return TiresiasPlacer(cluster, table, previous, model, self._classify(table, model), self, advice,
                              self._node_of, self._type_pos)

    def summary(self) -> dict[str, Any]:
        return {
            "skew_threshold": self.skew_threshold,
            "high_skew_types": list(self.high_skew_types),
            "unknown_skew_types": len(self.unknown_types),
            "unknown_skew_type_names": list(self.unknown_types),
            "consolidation_waits": self.consolidation_waits,
            "spread_placements": self.spread_placements,
        }
