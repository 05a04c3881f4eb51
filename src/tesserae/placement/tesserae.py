"""Tesserae placement: migration-minimizing layout, type-slot matching and packing (DESIGN §4).

Per decision:

1. **Admission** (``try_admit``, called in priority order): a gang is admitted when one GPU type it
   can run on still has that many unclaimed GPUs. Under a policy that advises GPU types (Gavel's
   per-type fill) a job asks for the advised type; otherwise a running job asks for its previous
   type first, a new job for its fastest type (greedy; step 2 revisits it). No GPU is chosen yet.
2. **Heterogeneity** (§4.3, clusters with several GPU types). Under a policy that gives per-type
   shares realised over rounds (Gavel's X): the allocation-preserving assignment (``_shares``)
   keeps the policy's units and type counts and chooses which unit runs on which type so that each
   unit's deficit against X stays within a band, with as few type switches as possible. Under
   any other policy: all admitted jobs are re-assigned to type slots by maximising the sum of
   normalised throughput (``_hetero``); a running job that would change type counts at
   (1 - ``type_switch_penalty``) there, so it moves only when the gain pays for the restart. The
   gain over a type-blind choice is reported.
3. **Packing** (§4.2, with ``--packing``). Under a policy that names pairs (packed Gavel), its pairs
   run as units on the host's type. Otherwise overflow jobs (the policy's ranking of jobs that do
   not run alone) are paired with admitted ones by a maximum-weight matching solved over job
   classes (``_packing``). A pair is one unit: the partner gets (a subset of) its host's GPUs, both
   assignments name each other, and jobs whose profile has parallelism strategies record the
   strategy of best gain next to that partner (alone: the best solo strategy). A running job keeps
   its strategy unless the new one is faster by more than ``strategy_switch_gain`` (a strategy
   change relaunches the job, which the simulator charges as a restart).
4. **Layout** (§4.1): per GPU type, logical layout + matching to physical nodes + GPU indices, moving
   as few running jobs as possible (``_layout``). Migrations are counted per round.

Everything loops over jobs (or job classes), never over all GPUs or all job pairs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar, Self

import numpy as np
from pydantic import Field

from tesserae.core.advice import TYPE_ADVICE, Advice, AdviceKind, Unit
from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.plugins import PluginOptions, RunContext
from tesserae.core.throughput import ThroughputModel
from tesserae.placement import _hetero, _packing, _shares
from tesserae.placement._admit import fit_in_order
from tesserae.placement._layout import TypePlacer
from tesserae.placement._rates import RateBook
from tesserae.placement.base import PlacementPolicy, PlacerBase, RoundPlacer, register


class TesseraePlacer(PlacerBase):
    """One decision of the Tesserae placement (see module docstring); a ``BulkKeeper``.

    No GpuPool: capacity is tracked per type and GPUs are chosen in ``finish``.
    """

    def __init__(self, owner: TesseraePlacement, cluster: Cluster, table: JobTable,
                 previous: Mapping[int, Assignment], model: ThroughputModel, advice: Advice | None = None) -> None:
        super().__init__(cluster, table, previous, model, advice)
        self.owner = owner
        multi = len(cluster.gpu_types) > 1
        kinds = self.advice.kinds
        self.follow_types = multi and bool(kinds & TYPE_ADVICE)
        self.by_shares = self.follow_types and AdviceKind.TYPE_SHARES in kinds and owner.type_matching
        self.policy_pairs = AdviceKind.PAIRS in kinds
        self._pair_of = {h: o for h, o in self.advice.pairs} if self.policy_pairs else {}
        self.book = owner.rate_book(cluster, model)
        self.free_t = np.array([cluster.gpus_by_type[t] for t in cluster.gpu_types], dtype=np.int64)
        self._free = cluster.num_gpus
        self.hosts: list[int] = []
        self.type_of: dict[int, int] = {}
        self.partner: dict[int, int] = {}
        self._movable: dict[int, list[int]] = {}  # type -> admitted rows that did not run there before
        self._one_type = not multi
        self._runs: dict[tuple[int, int], bool] = {}  # (type index, GPU count) -> can run on the one type
        self._types_done = False

    # ------------------------------------------------------------------------------ admission
    @property
    def free(self) -> int:
        return self._free

    #: Admitted jobs examined when a gang finds no type with room (bounds the rebalancing work).
    REBALANCE_SCAN = 64
    #: A job on the GPUs, with the partner and the strategy it had keeps its Assignment object without
    #: going through ``_assignment`` (which would return that object).
    reuse_kept = True

    def keep_running(self, rows: np.ndarray) -> int:
        """``try_admit`` of the leading rows at once, up to the first that does not fit where it ran.

        Without type advice a running job asks for the type it ran on first; in the leading run of
        running jobs nothing else has claimed GPUs yet, so each is admitted there as long as that
        type's running demand so far fits (a pair's two members both count, as one by one).
        """
        if self.follow_types or rows.size == 0:
            return 0
        prev, t = self.previous, self.table
        if self._one_type:  # no need to look up where each ran
            types = np.zeros(rows.size, dtype=np.int64)
        else:
            first = np.fromiter((prev[r].gpus[0] for r in rows.tolist()), dtype=np.int64, count=rows.size)
            types = self.cluster.gpu_type[first].astype(np.int64)
        k = t.num_gpus[rows].astype(np.int64)
        demand = np.empty(rows.size, dtype=np.int64)
        for ti in np.unique(types).tolist():
            on = types == ti
            demand[on] = np.cumsum(k[on])
        ok = demand <= self.free_t[types]
        tidx = t.type_idx[rows]
        for ti, kk, ty in _distinct(tidx, k, types):
            if ty not in self.book.prefs(t.types[ti], kk):  # cannot run where it ran: one by one
                ok &= ~((tidx == ti) & (k == kk) & (types == ty))
        n = int(rows.size if ok.all() else np.argmin(ok))
        if n:
            self.free_t -= np.bincount(types[:n], weights=k[:n], minlength=self.free_t.size).astype(np.int64)
            self._free -= int(k[:n].sum())
            kept = rows[:n].tolist()
            self.hosts.extend(kept)
            self.type_of.update(zip(kept, types[:n].tolist(), strict=True))
        return n

    def try_admit(self, row: int) -> bool:
        if self._one_type:
            return self._admit_one_type(row)
        jt, k = self.job_class(row)
        prefs = self.book.prefs(jt, k)
        free_t = self.free_t
        t = self.advice.gpu_type.get(row, -1) if self.follow_types else self.previous_type(row)
        if t < 0 or t not in prefs or free_t[t] < k:
            t = next((p for p in prefs if free_t[p] >= k), -1)
            if t < 0:
                t = self._rebalance(prefs, k)
                if t < 0:
                    return False
        free_t[t] -= k
        self._free -= k
        self.hosts.append(row)
        self.type_of[row] = t
        if self.previous_type(row) != t:
            self._movable.setdefault(t, []).append(row)
        return True

    def _admit_one_type(self, row: int) -> bool:
        """``try_admit`` on a cluster of one GPU type: the gang fits or not, nothing to choose or move."""
        t = self.table
        key = (int(t.type_idx[row]), int(t.num_gpus[row]))
        ok = self._runs.get(key)
        if ok is None:
            ok = self._runs[key] = bool(self.book.prefs(t.types[key[0]], key[1]))
        k = key[1]
        if not ok or self._free < k:
            return False
        self.free_t[0] -= k
        self._free -= k
        self.hosts.append(row)
        self.type_of[row] = 0
        return True

    def _rebalance(self, prefs: tuple[int, ...], k: int) -> int:
        """Make room for a gang on one of ``prefs`` by moving jobs admitted this round (not running
        there before) to another type they can run on; -1 when no such move frees enough."""
        if len(self.cluster.gpu_types) < 2 or self._free < k:
            return -1
        free_t = self.free_t
        for t in prefs:
            moves: list[tuple[int, int]] = []
            freed = 0
            spare = free_t.copy()
            for r in reversed(self._movable.get(t, [])[-self.REBALANCE_SCAN:]):
                if free_t[t] + freed >= k:
                    break
                jr, kr = self.job_class(r)
                u = next((u for u in self.book.prefs(jr, kr) if u != t and spare[u] >= kr), -1)
                if u >= 0:
                    spare[u] -= kr
                    moves.append((r, u))
                    freed += kr
            if free_t[t] + freed >= k:
                for r, u in moves:
                    kr = int(self.table.num_gpus[r])
                    free_t[t] += kr
                    free_t[u] -= kr
                    self.type_of[r] = u
                    self._movable[t].remove(r)
                    self._movable.setdefault(u, []).append(r)
                return t
        return -1

    # ------------------------------------------------------------------------------ heterogeneity
    def _choose_types(self) -> None:
        """Type-slot matching over every admitted job (§4.3); a running job that changes type pays a penalty."""
        if self._types_done:
            return
        self._types_done = True
        if len(self.cluster.gpu_types) < 2 or not self.hosts:
            return
        if self.by_shares:
            self._match_shares()
            return
        if self.follow_types or not self.owner.hetero:
            return
        T = len(self.cluster.gpu_types)
        cap = np.array([self.cluster.gpus_by_type[t] for t in self.cluster.gpu_types], dtype=np.int64)
        # Classes: (job type, GPU count, type it ran on last round or -1); jobs of a class are interchangeable.
        classes: dict[tuple[str, int, int], list[int]] = {}
        for r in self.hosts:
            classes.setdefault((*self.job_class(r), self.previous_type(r)), []).append(r)
        keys = list(classes)
        sizes = np.array([k for _, k, _ in keys], dtype=np.int64)
        counts = np.array([len(classes[c]) for c in keys], dtype=np.int64)
        norm = np.array([self.book.normalized(jt, k) for jt, k, _ in keys]).reshape(len(keys), T)
        stay = 1.0 - self.owner.type_switch_penalty
        weight = norm.copy()
        for i, (_, _, cur) in enumerate(keys):
            if cur >= 0:
                weight[i, np.arange(T) != cur] *= stay
        allowed = norm > 0
        current = np.zeros((len(keys), T), dtype=np.int64)
        for i, c in enumerate(keys):
            for r in classes[c]:
                current[i, self.type_of[r]] += 1
        x = self.owner.solve_types(sizes, counts, weight, allowed, cap, keys)
        if x is None or (x * weight).sum() < (current * weight).sum() - 1e-9:
            x = current
        for i, c in enumerate(keys):
            cur = c[2]
            # The highest-priority jobs of the class get the best types; a running job stays on ties.
            order = sorted(range(T), key=lambda t, i=i, cur=cur: (-weight[i, t], t != cur, t))
            slots = [t for t in order for _ in range(int(x[i, t]))]
            for r, t in zip(classes[c], slots, strict=True):
                self.type_of[r] = t
        # Type-blind reference: the same jobs, in priority order, on the first type (cluster order) with room.
        rows = np.asarray(self.hosts)
        hnorm = np.array([self.book.normalized(*self.job_class(r)) for r in self.hosts]).reshape(len(self.hosts), T)
        blind = _hetero.type_blind(self.table.num_gpus[rows], hnorm > 0, cap)
        blind_w = float(hnorm[np.flatnonzero(blind >= 0), blind[blind >= 0]].sum())
        chosen_w = float(sum(hnorm[i, self.type_of[r]] for i, r in enumerate(self.hosts)))
        self.owner.note_hetero(chosen_w, blind_w, float((current * norm).sum()))

    def _match_shares(self) -> None:
        """Allocation-preserving assignment of the admitted units to types (``_shares``), per gang size."""
        adv, book, T = self.advice, self.book, len(self.cluster.gpu_types)
        host_set = set(self.hosts)
        units: list[tuple[int, Unit, tuple[int, ...]]] = []  # (host row, unit key, member rows)
        for h in self.hosts:
            o = self._pair_of.get(h)
            if o is not None and o not in host_set:
                units.append((h, (min(h, o), max(h, o)), (h, o)))
            else:
                units.append((h, h, (h,)))
        L = adv.round_seconds or self.owner.round_seconds
        tol = self.owner.share_tolerance * L
        m = len(units)
        deficit = np.zeros((m, T))
        shares = np.zeros((m, T))
        switched = np.zeros((m, T))
        allowed = np.zeros((m, T), dtype=bool)
        advised = np.empty(m, dtype=np.int64)
        sizes = np.empty(m, dtype=np.int64)
        for j, (h, key, members) in enumerate(units):
            advised[j] = self.type_of[h]
            sizes[j] = int(self.table.num_gpus[h])
            x = adv.shares.get(key)
            d = adv.deficit.get(key)
            if x is None or d is None:
                allowed[j, advised[j]] = True  # no allocation to track: the policy's type
                continue
            shares[j], deficit[j] = x / max(float(x.sum()), 1e-12), d
            if len(members) == 1:
                allowed[j] = book.alone(*self.job_class(h)) > 0
            else:
                (a, ka), (b, kb) = self.job_class(members[0]), self.job_class(members[1])
                allowed[j] = [book.pair(a, ka, b, kb, t)[0] > 0 for t in range(T)]
            allowed[j, advised[j]] = True
            for r in members:
                p = self.previous_type(r)
                if p >= 0:
                    switched[j] += np.arange(T) != p
        w = _shares.share_weights(deficit, shares, L, tol, switched, self.owner.restart_overhead, advised, allowed)
        chosen = _shares.assign_usage(w, sizes, advised)
        overrides = int((chosen != advised).sum())
        for j, (h, _, _) in enumerate(units):
            self.type_of[h] = int(chosen[j])
        self.owner.note_overrides(overrides, len(units))

    # ------------------------------------------------------------------------------ packing
    def pack(self, candidates: np.ndarray) -> None:
        """Between the allocator walk and finish(): the policy's pairs, or pair overflow jobs with hosts."""
        if not self.hosts:
            return
        if self.policy_pairs:
            self._choose_types()
            self._follow_pairs()
            return
        if not self.owner.packing:
            return
        self._choose_types()
        order = candidates
        t = self.table
        hosts = np.asarray(self.hosts, dtype=np.int64)
        rest = order[~np.isin(order, hosts)]
        if rest.size == 0:
            return
        cum = np.cumsum(t.num_gpus[rest])
        overflow = rest[cum <= self.cluster.num_gpus].tolist()
        if not overflow:
            return
        book, types = self.book, t.types
        kmax = int(t.num_gpus.max()) + 1
        n_types = len(self.cluster.gpu_types)
        # Classes in bulk: (job type, GPU count[, GPU type]) as one integer per row, grouped in the order
        # of each class's first row, rows of a class in priority order.
        type_h = np.zeros(hosts.size, dtype=np.int64) if self._one_type else \
            np.fromiter((self.type_of[r] for r in self.hosts), dtype=np.int64, count=hosts.size)
        hkey = (t.type_idx[hosts].astype(np.int64) * kmax + t.num_gpus[hosts]) * n_types + type_h
        hkeys, hgroups, hcls = _group(hosts, hkey)
        hclasses = [(types[key // n_types // kmax], key // n_types % kmax, key % n_types) for key in hkeys]
        host_rows = dict(zip(hclasses, hgroups, strict=True))
        over_rows_arr = np.asarray(overflow, dtype=np.int64)
        okey = t.type_idx[over_rows_arr].astype(np.int64) * kmax + t.num_gpus[over_rows_arr]
        okeys, ogroups, ocls = _group(over_rows_arr, okey)
        over_rows = dict(zip([(types[key // kmax], key % kmax) for key in okeys], ogroups, strict=True))
        cache = self.owner.gain_cache(book)

        def gain(hc: tuple[str, int, int], oc: tuple[str, int]) -> float:
            key = (hc, oc)
            g = cache.get(key)
            if g is None:
                g = -np.inf
                if oc[1] <= hc[1] and book.can_pair_counts(hc[1], oc[1]):
                    g = book.gain(hc[0], hc[1], oc[0], oc[1], hc[2])
                cache[key] = g
            return g

        prev_partner = {r: a.partner for r, a in self.previous.items() if a.partner is not None}
        host_class = dict(zip(self.hosts, [hclasses[c] for c in hcls], strict=True)) if prev_partner else {}
        pairs = _packing.pack_classes(host_rows, host_class, over_rows, overflow, ocls, gain,
                                      self.owner.pack_threshold, prev_partner)
        for h, o in pairs:
            self.partner[h] = o
            self.partner[o] = h
        self.owner.note_pairs(len(pairs))

    def _follow_pairs(self) -> None:
        """The policy's pairs, as units: each partner joins its host on the host's type."""
        host_set = set(self.hosts)
        n = 0
        for h, o in self.advice.pairs:
            if h not in host_set or o in host_set or h in self.partner or o in self.partner:
                continue
            (a, ka), (b, kb) = self.job_class(h), self.job_class(o)
            if kb <= ka and self.book.pair(a, ka, b, kb, self.type_of[h])[0] > 0:
                self.partner[h], self.partner[o] = o, h
                n += 1
        self.owner.note_pairs(n)

    # ------------------------------------------------------------------------------ layout
    def finish(self) -> dict[int, Assignment]:
        self._choose_types()
        t0 = time.perf_counter()
        cl, t = self.cluster, self.table
        hosts, type_of, prev = self.hosts, self.type_of, self.previous
        rows = np.asarray(hosts, dtype=np.int64)
        sizes = t.num_gpus[rows].tolist()
        size = dict(zip(hosts, sizes, strict=True))
        by_type: dict[int, list[int]] = {}
        if self._one_type:
            if hosts:
                by_type[0] = hosts
        else:
            for r in hosts:
                by_type.setdefault(type_of[r], []).append(r)
        # Continuing hosts keep their GPUs if they stay on the same type. Two of them that shared GPUs
        # last round (a pair) and are both hosts now cannot both keep them: the first in priority does.
        keep: dict[int, tuple[int, ...]] = {}
        claimed: set[int] = set()
        host_set = set(hosts)
        gpu_type = cl.gpu_type
        for r in hosts:
            a = prev.get(r)
            if a is None or (not self._one_type and int(gpu_type[a.gpus[0]]) != type_of[r]):
                continue
            if a.partner is not None and a.partner in host_set:
                if a.partner in claimed:
                    continue
                claimed.add(r)
            keep[r] = a.gpus
        gpus: dict[int, tuple[int, ...]] = {}
        spread = regrouped = evictions = 0
        for ti, trows in by_type.items():
            layout = self.owner.type_placer(cl, ti).place(trows, size, keep)
            gpus.update(layout.gpus)
            spread += len(layout.spread)
            regrouped += layout.method == "regrouped"
            evictions += layout.evictions
        out: dict[int, Assignment] = {}
        partner = self.partner
        types, num_gpus, type_idx = t.types, t.num_gpus, t.type_idx
        moved = 0
        # A job alone on the GPUs it held alone, with the strategy it has alone, keeps its Assignment
        # (``_keep_or_assign``'s first case, checked here without a call: most jobs, each round).
        host_ti = type_idx[rows].astype(np.int64)
        reuse = self.reuse_kept
        host_alone = self._alone_strategies(host_ti, rows) if reuse else [None] * len(hosts)
        for r, ti, k, s in zip(hosts, host_ti.tolist(), sizes, host_alone, strict=True):
            g = gpus[r]
            old = prev.get(r)
            if (reuse and old is not None and old.gpus is g and old.partner is None and old.strategy == s
                    and r not in partner):
                out[r] = old
                continue
            p = partner.get(r)
            cls = (types[ti], k)
            pc = None if p is None else (types[int(type_idx[p])], int(num_gpus[p]))
            out[r] = self._keep_or_assign(r, cls, g, p, pc, old)
            moved += old is not None and old.gpus != g
            if p is not None:
                kp = pc[1]
                old = prev.get(p)
                pg = g
                if kp < len(pg):
                    pg = old.gpus if old is not None and set(old.gpus) <= set(pg) and len(old.gpus) == kp \
                        else pg[:kp]
                out[p] = self._keep_or_assign(p, pc, pg, r, cls, old)
                moved += old is not None and old.gpus != pg
        self.owner.note_round(moved, spread, regrouped, evictions, time.perf_counter() - t0)
        self.assigned = out
        return out

    def _alone_strategies(self, host_ti: np.ndarray, rows: np.ndarray) -> list[str | None]:
        """The strategy of each host alone: one lookup per job class, spread to the hosts by NumPy."""
        t = self.table
        kmax = int(t.num_gpus.max()) + 1 if rows.size else 1
        classes, of_class = np.unique(host_ti * kmax + t.num_gpus[rows], return_inverse=True)
        by_class = np.empty(classes.size, dtype=object)
        for i, c in enumerate(classes.tolist()):
            by_class[i] = self.book.strategy(t.types[c // kmax], c % kmax, None)
        return by_class[of_class.ravel()].tolist()

    def _keep_or_assign(self, row: int, cls: tuple[str, int], gpus: tuple[int, ...], partner: int | None,
                        partner_cls: tuple[str, int] | None, old: Assignment | None) -> Assignment:
        """``_assignment``, except that a job on the same GPUs with the same partner and strategy keeps
        its Assignment object without the strategy-switch check (``_assignment`` would return it too)."""
        strategy = self.book.strategy(cls[0], cls[1], partner_cls)
        if (self.reuse_kept and old is not None and old.partner == partner and (old.gpus is gpus or old.gpus == gpus)
                and old.strategy == strategy):
            return old
        return self._assignment(row, gpus, partner, old, cls, partner_cls, strategy)

    def _assignment(self, row: int, gpus: tuple[int, ...], partner: int | None, old: Assignment | None,
                    cls: tuple[str, int], pc: tuple[str, int] | None, strategy: str | None) -> Assignment:
        """The job's Assignment; ``strategy`` is the book's for (``cls`` next to ``pc``)."""
        jt, k = cls
        if (old is not None and old.strategy is not None and strategy is not None and old.strategy != strategy
                and old.gpus == gpus):
            # Changing strategy relaunches the job: keep the running one unless the new one pays.
            t = int(self.cluster.gpu_type[gpus[0]])
            ps = None if pc is None else self.book.strategy(pc[0], pc[1], (jt, k))
            keep = self.book.rate_with(jt, k, t, pc, old.strategy, ps)
            best = self.book.rate_with(jt, k, t, pc, strategy, ps)
            if keep > 0 and best <= keep * (1.0 + self.owner.strategy_switch_gain):
                strategy = old.strategy
        if old is not None and old.gpus == gpus and old.partner == partner and old.strategy == strategy:
            return old
        return Assignment(row, gpus, partner, strategy)


class OneTypeTesseraePlacer(TesseraePlacer):
    """The Tesserae placer on a cluster of one GPU type, also a ``BulkAdmitter``: admission is a
    capacity check per gang, done for a whole walk at once."""

    def admit_in_order(self, rows: np.ndarray) -> None:
        """The allocator's walk on one GPU type: each gang that can run here and fits what is still
        free is admitted, in order (``_admit_one_type`` row by row, vectorised: ``fit_in_order``)."""
        t = self.table
        if rows.size == 0 or self._free <= 0:
            return
        k = t.num_gpus[rows].astype(np.int64)
        tidx = t.type_idx[rows]
        ok = k <= self._free
        for ti, kk in _distinct(tidx[ok], k[ok]):
            runs = self._runs.get((ti, kk))
            if runs is None:
                runs = self._runs[(ti, kk)] = bool(self.book.prefs(t.types[ti], kk))
            if not runs:
                ok &= ~((tidx == ti) & (k == kk))
        admitted, free = fit_in_order(np.where(ok, k, self._free + 1), self._free)
        if not admitted.size:
            return
        used = self._free - free
        self.free_t[0] -= used
        self._free = free
        kept = rows[admitted].tolist()
        self.hosts.extend(kept)
        self.type_of.update(dict.fromkeys(kept, 0))


def _distinct(*cols: np.ndarray) -> list[tuple[int, ...]]:
    """The distinct tuples of equal-length non-negative integer columns (one ``np.unique`` over a
    combined key instead of a set built element by element)."""
    if cols[0].size == 0:
        return []
    spans = [int(c.max()) + 1 for c in cols]
    key = np.zeros(cols[0].size, dtype=np.int64)
    for c, span in zip(cols, spans, strict=True):
        key = key * span + c
    uniq = np.unique(key)
    parts = []
    for span in reversed(spans):
        uniq, rem = np.divmod(uniq, span)
        parts.append(rem.tolist())
    return list(zip(*reversed(parts), strict=True))


def _group(rows: np.ndarray, keys: np.ndarray) -> tuple[list[int], list[list[int]], list[int]]:
    """Rows grouped by key: the keys in the order of their first row, each key's rows in their
    order, and each row's group index."""
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    rank = np.empty_like(by_first)
    rank[by_first] = np.arange(by_first.size)
    group = rank[inverse.ravel()]
    order = np.argsort(group, kind="stable")
    ends = np.flatnonzero(np.diff(group[order])).tolist()
    flat = rows[order].tolist()
    groups = [flat[a:b] for a, b in zip([0, *[e + 1 for e in ends]], [*[e + 1 for e in ends], len(flat)],
                                        strict=True)]
    return uniq[by_first].tolist(), groups, group.tolist()


#: A running job moves to another GPU type only if its normalised throughput there, discounted by this
#: fraction, beats staying: the move costs a restart and must pay for it (a 25% gain at 0.2).
DEFAULT_TYPE_SWITCH_PENALTY = 0.2
#: Under per-type shares (Gavel's X): the deficit band, in rounds, within which a unit is not moved.
DEFAULT_SHARE_TOLERANCE = 1.0
#: A running job is relaunched with a better strategy only if it runs this much faster with it.
DEFAULT_STRATEGY_SWITCH_GAIN = 0.1


class TesseraeOptions(PluginOptions):
    """The Tesserae placement's knobs (its packing is the run's ``--packing``)."""

    pack_threshold: float = Field(_packing.DEFAULT_THRESHOLD, allow_inf_nan=False, description="with --packing: "
                                  "least sharing gain, tput(a|b)/tput(a) + tput(b|a)/tput(b) - 1, for a pair")
    type_matching: bool = Field(True, description="match jobs to GPU types: under per-type shares the "
                                "allocation-preserving assignment, else type-slot matching (off: the policy's "
                                "advised types, or the previous type else the fastest with room)")
    strategy_choice: bool = Field(True, description="pick each pair's parallelism strategy (off: every job keeps "
                                  "its best strategy alone)")
    type_switch_penalty: float = Field(DEFAULT_TYPE_SWITCH_PENALTY, ge=0, le=1, description="a running job moves "
                                       "to another GPU type only if its normalised throughput there, discounted "
                                       "by this fraction, beats staying")
    share_tolerance: float = Field(DEFAULT_SHARE_TOLERANCE, ge=0, allow_inf_nan=False, description="under "
                                   "per-type shares: the deficit band, in rounds, within which a unit is not moved")
    strategy_switch_gain: float = Field(DEFAULT_STRATEGY_SWITCH_GAIN, ge=0, allow_inf_nan=False, description="a "
                                        "running job is relaunched with a better strategy only if it runs this "
                                        "much faster with it")

    def label_marks(self) -> list[str]:
        """The ablations show in a run's label."""
        return [m for m, off in (("no-type-matching", not self.type_matching),
                                 ("fixed-strategy", not self.strategy_choice)) if off]


@register("tesserae")
class TesseraePlacement(PlacementPolicy):
    """Migration-minimizing placement with optional packing (see module docstring); ``Replayable``."""

    honours_gpu_type = False  # it chooses GPU types by throughput
    Options: ClassVar[type[PluginOptions]] = TesseraeOptions

    def __init__(self, packing: bool = False, pack_threshold: float = _packing.DEFAULT_THRESHOLD,
                 hetero: bool = True, type_switch_penalty: float = DEFAULT_TYPE_SWITCH_PENALTY,
                 type_matching: bool = True, strategy_choice: bool = True,
                 share_tolerance: float = DEFAULT_SHARE_TOLERANCE, restart_overhead: float = 30.0,
                 round_seconds: float = 300.0, strategy_switch_gain: float = DEFAULT_STRATEGY_SWITCH_GAIN) -> None:
        self.packing = packing
        self.pack_threshold = pack_threshold
        #: Type-slot matching under policies without type advice (off: greedy fastest type with room).
        self.hetero = hetero
        self.type_switch_penalty = type_switch_penalty
        #: Allocation-preserving assignment under per-type shares (off: the policy's types as advised).
        self.type_matching = type_matching
        #: Choose the strategy of best gain for each pair (off: every job keeps its best solo strategy).
        self.strategy_choice = strategy_choice
        self.share_tolerance = share_tolerance
        self.restart_overhead = restart_overhead
        self.round_seconds = round_seconds
        self.strategy_switch_gain = strategy_switch_gain
        self.type_overrides = 0
        self.typed_units = 0
        self._book: RateBook | None = None
        self._book_key: tuple[int, tuple[str, ...]] | None = None
        self._type_placers: dict[tuple[int, int], TypePlacer] = {}
        self._gains: dict[Any, float] = {}
        self._type_solutions: dict[Any, np.ndarray | None] = {}
        self._gains_of: RateBook | None = None
        self.rounds = 0
        self.migrations: list[int] = []
        self.spread_jobs = 0
        self.regrouped_types = 0
        self.evictions = 0
        self.layout_seconds = 0.0
        self.pairs: list[int] = []
        self.hetero_chosen = 0.0
        self.hetero_blind = 0.0
        self.hetero_greedy = 0.0
        #: This round's calls of the note_* methods, repeated for a round the scheduler skips.
        self._notes: list[tuple[Any, tuple[Any, ...]]] = []

    @classmethod
    def from_options(cls, options: TesseraeOptions, context: RunContext) -> Self:
        """``type_matching`` switches both type assignments (``hetero`` and ``type_matching``); the
        restart overhead and round length weigh a type switch against the deficits it repays."""
        return cls(packing=context.packing, pack_threshold=options.pack_threshold, hetero=options.type_matching,
                   type_switch_penalty=options.type_switch_penalty, type_matching=options.type_matching,
                   strategy_choice=options.strategy_choice, share_tolerance=options.share_tolerance,
                   restart_overhead=context.restart_overhead, round_seconds=context.round_seconds,
                   strategy_switch_gain=options.strategy_switch_gain)

    @property
    def honours(self) -> AdviceKind:
        """The policy's GPU types and per-type shares; with ``--packing``, its pairs too."""
        kinds = AdviceKind.GPU_TYPE | AdviceKind.TYPE_SHARES
        return kinds | AdviceKind.PAIRS if self.packing else kinds

    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        self._notes = []
        placer = TesseraePlacer if len(cluster.gpu_types) > 1 else OneTypeTesseraePlacer
        return placer(self, cluster, table, previous, model, advice)

    def repeat_last_round(self) -> None:
        """The statistics of a skipped decision: those of the last one it repeats."""
        notes, self._notes = self._notes, []
        for note, args in notes:
            note(*args)

    # Caches that live across rounds (rates by job class, per-type node arrays).
    def rate_book(self, cluster: Cluster, model: ThroughputModel) -> RateBook:
        key = (id(model), cluster.gpu_types)
        if self._book is None or self._book_key != key or self._book.model is not model:
            self._book = RateBook(model, cluster.gpu_types, fixed_strategy=not self.strategy_choice)
            self._book_key = key
            self._type_solutions = {}  # weights come from the rates
        return self._book

    def solve_types(self, sizes: np.ndarray, counts: np.ndarray, weight: np.ndarray, allowed: np.ndarray,
                    cap: np.ndarray, keys: list[Any]) -> np.ndarray | None:
        """``_hetero.assign_types``, memoised: rounds without arrivals or departures repeat the problem."""
        key = (tuple(keys), counts.tobytes(), cap.tobytes(), self.type_switch_penalty)
        if key in self._type_solutions:
            x = self._type_solutions[key]
            return None if x is None else x.copy()
        x = _hetero.assign_types(sizes, counts, weight, allowed, cap)
        if len(self._type_solutions) >= 512:
            self._type_solutions.clear()
        self._type_solutions[key] = x
        return None if x is None else x.copy()

    def gain_cache(self, book: RateBook) -> dict[Any, float]:
        """Sharing gains by (host class, overflow class), valid as long as the rate book is."""
        if self._gains_of is not book:
            self._gains = {}
            self._gains_of = book
        return self._gains

    def type_placer(self, cluster: Cluster, type_index: int) -> TypePlacer:
        key = (id(cluster), type_index)
        tp = self._type_placers.get(key)
        if tp is None or tp.cluster is not cluster:
            tp = TypePlacer(cluster, type_index)
            self._type_placers[key] = tp
        return tp

    def note_round(self, moved: int, spread: int, regrouped: int, evictions: int, seconds: float) -> None:
        self._notes.append((self.note_round, (moved, spread, regrouped, evictions, 0.0)))  # a repeat lays out nothing
        self.rounds += 1
        self.migrations.append(moved)
        self.spread_jobs += spread
        self.regrouped_types += regrouped
        self.evictions += evictions
        self.layout_seconds += seconds

    def note_pairs(self, n: int) -> None:
        self._notes.append((self.note_pairs, (n,)))
        self.pairs.append(n)

    def note_overrides(self, overrides: int, units: int) -> None:
        self._notes.append((self.note_overrides, (overrides, units)))
        self.type_overrides += overrides
        self.typed_units += units

    def note_hetero(self, chosen: float, blind: float, greedy: float) -> None:
        self._notes.append((self.note_hetero, (chosen, blind, greedy)))
        self.hetero_chosen += chosen
        self.hetero_blind += blind
        self.hetero_greedy += greedy

    def summary(self) -> dict[str, Any]:
        m = np.asarray(self.migrations, dtype=np.float64)
        out: dict[str, Any] = {
            "placement_rounds": self.rounds,
            "migrations_per_round_mean": float(m.mean()) if m.size else 0.0,
            "migrations_per_round_max": int(m.max()) if m.size else 0,
            "spread_job_rounds": self.spread_jobs,
            "regrouped_layouts": self.regrouped_types,
            "evictions": self.evictions,
            "layout_seconds": self.layout_seconds,
        }
        if self.packing:
            p = np.asarray(self.pairs, dtype=np.float64)
            out["packed_pairs_per_round_mean"] = float(p.mean()) if p.size else 0.0
            out["packed_pairs_per_round_max"] = int(p.max()) if p.size else 0
        if self.hetero_blind > 0:
            out["hetero_throughput_gain"] = self.hetero_chosen / self.hetero_blind
        if self.typed_units:
            out["type_advice_overridden"] = self.type_overrides / self.typed_units
        return out
