"""Gavel's placement (the baseline of DESIGN §4.1): keep previous GPUs greedily, else fill in order.

As in Gavel's scheduler (``_schedule_jobs_on_workers``): per GPU type, the admitted jobs are taken
by decreasing GPU count; for each count, first every job that ran on this type last round keeps its
previous GPUs if none of them was claimed yet, then the others take the lowest free GPU ids in
node order (Gavel's server pointer), spreading over nodes when they must. A larger job placed
earlier may take a smaller running job's GPUs: that job then migrates.

The GPU type of a job follows the scheduling policy's advice when it gives one (``gavel-maxmin``
and ``gavel-fifo`` name the type Gavel's per-type queues chose), else the previous type, else the
fastest type with room. With ``--packing`` and a policy that names pairs (``gavel-maxmin
--packing``: the pairs its queues scheduled as units), each named partner shares its host's GPUs;
without such a policy, each overflow job (next in the policy's priority order, up to the cluster's
size) joins the admitted job of the same GPU count with the best sharing gain above the threshold.
What ran goes back to the policy through the scheduler (``tesserae.core.advice.RanReport``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

import numpy as np
from pydantic import Field

from tesserae.core.advice import Advice, AdviceKind
from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.plugins import PluginOptions, RunContext
from tesserae.core.throughput import ThroughputModel
from tesserae.placement._packing import DEFAULT_THRESHOLD
from tesserae.placement._rates import RateBook
from tesserae.placement.base import PlacementPolicy, PooledPlacer, RoundPlacer, register
from tesserae.placement.first_fit import lowest_free_nodes


class GavelPlacer(PooledPlacer):
    def __init__(self, owner: GavelPlacement, cluster: Cluster, table: JobTable,
                 previous: Mapping[int, Assignment], model: ThroughputModel, advice: Advice | None = None) -> None:
        super().__init__(cluster, table, previous, model, advice)
        self.owner = owner
        self.book = owner.rate_book(cluster, model)
        self.free_t = np.array([cluster.gpus_by_type[t] for t in cluster.gpu_types], dtype=np.int64)
        self._free = cluster.num_gpus
        self.hosts: list[int] = []
        self.type_of: dict[int, int] = {}
        self.partner: dict[int, int] = {}
        self.follow_types = AdviceKind.GPU_TYPE in self.advice.kinds
        self.follow_pairs = AdviceKind.PAIRS in self.advice.kinds

    @property
    def free(self) -> int:
        return self._free

    def try_admit(self, row: int) -> bool:
        jt, k = self.job_class(row)
        prefs = self.book.prefs(jt, k)
        if self.follow_types:
            a = self.advice.gpu_type.get(row)
            if a is None:
                # No advice (a job the scheduler keeps running inside its minimum run quantum): stay on its type.
                a = self.previous_type(row)
            order = ([a] if a in prefs else []) + [t for t in prefs if t != a]
        else:
            pt = self.previous_type(row)
            order = ([pt] if pt in prefs else []) + [t for t in prefs if t != pt]
        t = next((t for t in order if self.free_t[t] >= k), -1)
        if t < 0:
            return False
        self.free_t[t] -= k
        self._free -= k
        self.hosts.append(row)
        self.type_of[row] = t
        return True

    def pack(self, candidates: np.ndarray) -> None:
        if not self.owner.packing or not self.hosts:
            return
        t = self.table
        hosts = np.asarray(self.hosts, dtype=np.int64)
        rest = candidates[~np.isin(candidates, hosts)]
        overflow = rest[np.cumsum(t.num_gpus[rest]) <= self.cluster.num_gpus].tolist() if rest.size else []
        if not overflow and not self.follow_pairs:
            return
        host_set = set(self.hosts)
        paired: set[int] = set()

        def ok(h: int, o: int) -> bool:
            (a, ka), (b, kb) = self.job_class(h), self.job_class(o)
            return ka == kb and self.book.pair(a, ka, b, kb, self.type_of[h])[0] > 0

        if self.follow_pairs:
            # The policy's pairs are its decision (Gavel schedules a pair as one unit): the host was
            # admitted on the pair's type, the partner joins it whether or not it is in the overflow.
            for h, o in self.advice.pairs:
                if h in paired or o in paired or h not in host_set or o in host_set:
                    continue
                if ok(h, o):
                    self.partner[h], self.partner[o] = o, h
                    paired.update((h, o))
        else:
            for o in overflow:
                b, kb = self.job_class(o)
                best, best_gain = -1, self.owner.pack_threshold
                for h in reversed(self.hosts):
                    if h in paired:
                        continue
                    a, ka = self.job_class(h)
                    if ka != kb:
                        continue
                    g = self.book.gain(a, ka, b, kb, self.type_of[h])
                    if g > best_gain:
                        best, best_gain = h, g
                if best >= 0:
                    self.partner[best], self.partner[o] = o, best
                    paired.update((best, o))
        self.owner.pairs.append(len(paired) // 2)

    def finish(self) -> dict[int, Assignment]:
        cl, t, pool = self.cluster, self.table, self.pool
        type_nodes = [np.flatnonzero(cl.node_type == i) for i in range(len(cl.gpu_types))]
        out: dict[int, Assignment] = {}
        for ti, nodes in enumerate(type_nodes):
            rows = [r for r in self.hosts if self.type_of[r] == ti]
            if not rows:
                continue
            for k in sorted({int(t.num_gpus[r]) for r in rows}, reverse=True):
                same = [r for r in rows if int(t.num_gpus[r]) == k]
                todo = []
                for r in same:
                    a = self.previous.get(r)
                    if a is not None and self.previous_type(r) == ti and pool.all_free(a.gpus):
                        out[r] = self._assignment(r, pool.take(a.gpus))
                    else:
                        todo.append(r)
                for r in todo:
                    layout = lowest_free_nodes(pool, nodes, k)
                    assert layout is not None, "admission counted more GPUs than the type has"
                    out[r] = self._assignment(r, pool.take_nodes(layout))
        for h, o in list(self.partner.items()):
            if h in out and o not in out:
                out[o] = Assignment(o, out[h].gpus, h)
        prev = self.previous
        self.owner.migrations.append(sum(1 for r, a in out.items() if r in prev and prev[r].gpus != a.gpus))
        self.assigned = out
        return out

    def _assignment(self, row: int, gpus: tuple[int, ...]) -> Assignment:
        return Assignment(row, gpus, self.partner.get(row))


class PackOptions(PluginOptions):
    pack_threshold: float = Field(DEFAULT_THRESHOLD, allow_inf_nan=False, description="with --packing: least "
                                  "sharing gain, tput(a|b)/tput(a) + tput(b|a)/tput(b) - 1, for a pair to form")


@register("gavel")
class GavelPlacement(PlacementPolicy):
    honours_gpu_type = False  # it chooses GPU types by throughput
    Options: ClassVar[type[PluginOptions]] = PackOptions

    def __init__(self, packing: bool = False, pack_threshold: float = DEFAULT_THRESHOLD) -> None:
        self.packing = packing
        self.pack_threshold = pack_threshold
        self._book: RateBook | None = None
        self.migrations: list[int] = []
        self.pairs: list[int] = []

    @classmethod
    def from_options(cls, options: PackOptions, context: RunContext) -> Self:
        return cls(packing=context.packing, pack_threshold=options.pack_threshold)

    @property
    def honours(self) -> AdviceKind:
        """Gavel's per-job GPU type; with ``--packing``, the policy's pairs too."""
        return AdviceKind.GPU_TYPE | (AdviceKind.PAIRS if self.packing else AdviceKind.NONE)

    def rate_book(self, cluster: Cluster, model: ThroughputModel) -> RateBook:
        if self._book is None or self._book.model is not model or self._book.gpu_types != cluster.gpu_types:
            self._book = RateBook(model, cluster.gpu_types)
        return self._book

    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        return GavelPlacer(self, cluster, table, previous, model, advice)

    def summary(self) -> dict[str, Any]:
        m = np.asarray(self.migrations, dtype=np.float64)
        out: dict[str, Any] = {
            "migrations_per_round_mean": float(m.mean()) if m.size else 0.0,
            "migrations_per_round_max": int(m.max()) if m.size else 0,
        }
        if self.packing:
            p = np.asarray(self.pairs, dtype=np.float64)
            out["packed_pairs_per_round_mean"] = float(p.mean()) if p.size else 0.0
        return out
