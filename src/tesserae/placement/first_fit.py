"""First-fit: a running job keeps its GPUs; a starting job takes the lowest free GPU ids of its type.

Admission only counts GPUs: a gang fits when its GPU type has that many GPUs unclaimed, on one
node or spread over several, as in Tiresias' simulator (``--scheme count``, where a job holds the
GPUs it started on until it ends or is preempted). A job that ran last round asks for its type
first; when it runs again there it keeps its GPUs (the same ``Assignment``, not laid out again).
After the walk, every other admitted job (a new one, a resumed one, one that changed type) takes
the lowest free GPU ids of its type in priority order, spreading over nodes when it must. So on a
one-type cluster first-fit never migrates a job; a spread job runs at the model's spread rate.

GPU types: a job that ran asks for the type it ran on, then, as a job that did not run, for the
type with the most free GPUs (``PooledPlacer.type_order``).

Cost: one decision is a count per admitted job (in bulk for the running jobs that lead the order,
and for the whole walk on one GPU type) and one NumPy pass that hands the free GPUs of each type
to the jobs that need new ones; no per-job NumPy call on per-node arrays.
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
from tesserae.placement._admit import fit_in_order
from tesserae.placement.base import GpuPool, PlacementPolicy, PlacerBase, RoundPlacer, register, runnable


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


class FirstFitPlacer(PlacerBase):
    """One decision of first-fit; a ``BulkKeeper`` (the leading running jobs kept at once)."""

    def __init__(self, owner: FirstFit, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, advice: Advice | None = None) -> None:
        super().__init__(cluster, table, previous, model, advice)
        self.owner = owner
        self.free_t = [int(cluster.gpus_by_type[t]) for t in cluster.gpu_types]
        self._free = int(cluster.num_gpus)
        self._one_type = len(self.free_t) == 1
        self.admitted: list[int] = []  # in the order of admission
        self.kept_in_bulk = 0  # the first rows of ``admitted``, each on the type it ran on
        self.type_of: dict[int, int] = {}  # the GPU type of each admitted row (all 0 on one type: not kept)

    @property
    def free(self) -> int:
        return self._free

    def try_admit(self, row: int) -> bool:
        k = int(self.table.num_gpus[row])
        if k > self._free:
            return False
        types = self.runnable_types(row)
        pt = -1 if self._one_type else self.previous_type(row)
        if pt in types and self.free_t[pt] >= k:
            t = pt
        else:
            t = next((t for t in (types if self._one_type else self.type_order(row)) if self.free_t[t] >= k), -1)
            if t < 0:
                return False
        self.free_t[t] -= k
        self._free -= k
        self.admitted.append(row)
        if not self._one_type:
            self.type_of[row] = t
        return True

    def type_order(self, row: int) -> list[int]:
        """``PooledPlacer.type_order`` on this placer's counts: most free GPUs first, ties in cluster order."""
        return sorted(self.runnable_types(row), key=lambda t: -self.free_t[t])

    def keep_running(self, rows: np.ndarray) -> int:
        """The leading rows at once, each on the type it ran on, up to the first that cannot run there.

        Nothing has claimed GPUs before them, and together they held these GPUs last round, so each
        fits its type as ``try_admit`` one by one would find (checked, by running demand per type).
        """
        if rows.size == 0 or self.admitted:
            return 0
        k = self.table.num_gpus[rows].astype(np.int64)
        if self._one_type:
            types = np.zeros(rows.size, dtype=np.int64)
            ok = (np.cumsum(k) <= self.free_t[0]) & self._runnable_on(rows, types)
        else:
            prev = self.previous
            first = np.fromiter((prev[r].gpus[0] for r in rows.tolist()), dtype=np.int64, count=rows.size)
            types = self.cluster.gpu_type[first].astype(np.int64)
            demand = np.empty(rows.size, dtype=np.int64)
            for ti in np.unique(types).tolist():
                on = types == ti
                demand[on] = np.cumsum(k[on])
            ok = (demand <= np.asarray(self.free_t)[types]) & self._runnable_on(rows, types)
        n = int(rows.size if ok.all() else np.argmin(ok))
        if n:
            kept = rows[:n].tolist()
            used = np.bincount(types[:n], weights=k[:n], minlength=len(self.free_t)).astype(np.int64).tolist()
            self.free_t = [f - u for f, u in zip(self.free_t, used, strict=True)]
            self._free -= int(k[:n].sum())
            self.admitted.extend(kept)
            self.kept_in_bulk = n
            if not self._one_type:
                self.type_of.update(zip(kept, types[:n].tolist(), strict=True))
        return n

    def _runnable_on(self, rows: np.ndarray, types: np.ndarray) -> np.ndarray:
        """Whether each row can run on the GPU type beside it."""
        return self.owner.runnable(self.table, self.model, self.cluster)[rows, types]

    def finish(self) -> dict[int, Assignment]:
        prev, gpu_type, type_of = self.previous, self.cluster.gpu_type, self.type_of
        # The rows kept in bulk ran on their type: each keeps its Assignment (first-fit never pairs).
        kept = {r: prev[r] for r in self.admitted[:self.kept_in_bulk]}
        rest = self.admitted[self.kept_in_bulk:]
        if any(a.partner is not None for a in kept.values()):  # a plan this placement did not make
            rest = [r for r in kept if kept[r].partner is not None] + rest
            kept = {r: a for r, a in kept.items() if a.partner is None}
        new: list[list[int]] = [[] for _ in self.free_t]
        for r in rest:
            a = prev.get(r)
            t = type_of.get(r, 0)
            if a is not None and a.partner is None and (self._one_type or int(gpu_type[a.gpus[0]]) == t):
                kept[r] = a
            else:
                new[t].append(r)
        placed: dict[int, Assignment] = {}
        if any(new):
            held = np.zeros(self.cluster.num_gpus, dtype=bool)
            held[np.fromiter(chain.from_iterable(a.gpus for a in kept.values()), dtype=np.int64)] = True
            for t, rows in enumerate(new):
                if not rows:
                    continue
                ids = self.owner.type_gpus(self.cluster)[t]
                free_ids = ids[~held[ids]].tolist()
                ends = np.cumsum(self.table.num_gpus[np.asarray(rows)]).tolist()
                assert ends[-1] <= len(free_ids), "admission counted more GPUs than the type has"
                start = 0
                for r, end in zip(rows, ends, strict=True):
                    placed[r] = Assignment(r, tuple(free_ids[start:end]))
                    start = end
        self.assigned = kept if not placed else {r: kept[r] if r in kept else placed[r] for r in self.admitted}
        return self.assigned


class OneTypeFirstFitPlacer(FirstFitPlacer):
    """First-fit on a cluster of one GPU type, also a ``BulkAdmitter``: admission is a count of
    GPUs, done for a whole walk at once."""

    def admit_in_order(self, rows: np.ndarray) -> None:
        """The allocator's walk (skip and continue) on one GPU type, as ``try_admit`` row by row."""
        if rows.size == 0 or self._free <= 0:
            return
        gangs = np.where(self._runnable_on(rows, np.zeros(rows.size, dtype=np.int64)),
                         self.table.num_gpus[rows].astype(np.int64), self._free + 1)
        taken, free = fit_in_order(gangs, self._free)
        if taken.size:
            self.admitted.extend(rows[taken].tolist())
            self.free_t[0] -= self._free - free
            self._free = free


@register("first-fit")
class FirstFit(PlacementPolicy):
    def __init__(self) -> None:
        self._type_gpus: tuple[Cluster, list[np.ndarray]] | None = None
        self._runnable: tuple[tuple[JobTable, ThroughputModel, Cluster], np.ndarray] | None = None

    def type_gpus(self, cluster: Cluster) -> list[np.ndarray]:
        """The GPU ids of each type, ascending (node order: a node's GPUs have consecutive ids)."""
        if self._type_gpus is None or self._type_gpus[0] is not cluster:
            self._type_gpus = (cluster, [np.flatnonzero(cluster.gpu_type == t) for t in range(len(cluster.gpu_types))])
        return self._type_gpus[1]

    def runnable(self, table: JobTable, model: ThroughputModel, cluster: Cluster) -> np.ndarray:
        """(rows, GPU types): whether each job can run on each type (``PlacerBase.runnable_types``),
        computed once per table, one model lookup per distinct (job type, GPU count)."""
        key = (table, model, cluster)
        if self._runnable is None or any(a is not b for a, b in zip(self._runnable[0], key, strict=True)):
            width = int(table.num_gpus.max(initial=0)) + 1
            classes, first, inverse = np.unique(table.type_idx * width + table.num_gpus, return_index=True,
                                                return_inverse=True)
            names = cluster.gpu_types
            ok = np.array([[runnable(model, table.types[int(table.type_idx[i])], int(table.num_gpus[i]), g)
                            for g in names] for i in first.tolist()], dtype=bool).reshape(classes.size, len(names))
            ok = ok[inverse.reshape(-1)]
            for r, g in enumerate(table.gpu_type_req):
                if g is not None:
                    ok[r] &= np.array([name == g for name in names])
            self._runnable = (key, ok)
        return self._runnable[1]

    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        one_type = len(cluster.gpu_types) == 1
        return (OneTypeFirstFitPlacer if one_type else FirstFitPlacer)(self, cluster, table, previous, model, advice)
