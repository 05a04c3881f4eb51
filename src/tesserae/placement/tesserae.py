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
   gain over a type-blind choice is reported (``_type_choice``).
3. **Packing** (§4.2, with ``--packing``). Under a policy that names pairs (packed Gavel), its pairs
   run as units on the host's type. Otherwise overflow jobs (the policy's ranking of jobs that do
   not run alone) are paired with admitted ones by a maximum-weight matching solved over job
   classes (``_pairs``, ``_packing``). A pair is one unit: the partner gets (a subset of) its host's GPUs, both
   assignments name each other, and jobs whose profile has parallelism strategies record the
   strategy of best gain next to that partner (alone: the best solo strategy). A running job keeps
   its strategy unless the new one is faster by more than ``strategy_switch_gain`` (a strategy
   change relaunches the job, which the simulator charges as a restart; ``_assignments``).
4. **Layout** (§4.1): per GPU type, logical layout + matching to physical nodes + GPU indices, moving
   as few running jobs as possible (``_layout``). Migrations are counted per round (``_stats``).

Everything loops over jobs (or job classes: ``_classes``), never over all GPUs or all job pairs. The
shortcuts that make a decision fast without changing it are fixed per placement (``_shortcuts``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar, Self

import numpy as np
from pydantic import Field

from tesserae.core.advice import TYPE_ADVICE, Advice, AdviceKind
from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.plugins import PluginOptions, RunContext
from tesserae.core.throughput import ThroughputModel
from tesserae.placement import _hetero, _packing, _pairs, _type_choice
from tesserae.placement._admit import fit_in_order
from tesserae.placement._assignments import Assigner, kept_gpus
from tesserae.placement._classes import HostClass, JobClass, distinct
from tesserae.placement._layout import TypeLayout, TypePlacer
from tesserae.placement._rates import RateBook
from tesserae.placement._shortcuts import Shortcuts
from tesserae.placement._stats import TesseraeStats
from tesserae.placement._type_choice import RanClass
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
        shortcuts = owner.shortcuts
        self._one_type = not multi and shortcuts.one_type
        self._keep_in_bulk = shortcuts.keep_running_in_bulk
        self._runs: dict[tuple[int, int], bool] = {}  # (type index, GPU count) -> can run on the one type
        self._types_done = False

    # ------------------------------------------------------------------------------ admission
    @property
    def free(self) -> int:
        return self._free

    #: Admitted jobs examined when a gang finds no type with room (bounds the rebalancing work).
    REBALANCE_SCAN = 64

    def keep_running(self, rows: np.ndarray) -> int:
        """``try_admit`` of the leading rows at once, up to the first that does not fit where it ran.

        Without type advice a running job asks for the type it ran on first; in the leading run of
        running jobs nothing else has claimed GPUs yet, so each is admitted there as long as that
        type's running demand so far fits (a pair's two members both count, as one by one). With
        ``Shortcuts.keep_running_in_bulk`` off it admits none: the allocator offers them one by one.
        """
        if not self._keep_in_bulk or self.follow_types or rows.size == 0:
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
        for ti, kk, ty in distinct(tidx, k, types):
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

    # ------------------------------------------------------------------------------ GPU types
    def _choose_types(self) -> None:
        """Revisit admission's GPU types once every job is admitted (``_type_choice``)."""
        if self._types_done:
            return
        self._types_done = True
        if len(self.cluster.gpu_types) < 2 or not self.hosts:
            return
        owner = self.owner
        if self.by_shares:
            overrides, units = _type_choice.by_shares(self, self.advice, self._pair_of, owner.round_seconds,
                                                      owner.share_tolerance, owner.restart_overhead)
            owner.stats.note_overrides(overrides, units)
        elif not self.follow_types and owner.hetero:
            owner.stats.note_hetero(*_type_choice.by_throughput(self, owner.type_switch_penalty, owner.solve_types))

    # ------------------------------------------------------------------------------ packing
    def pack(self, candidates: np.ndarray) -> None:
        """Between the allocator walk and finish(): the policy's pairs, or pair overflow jobs with hosts."""
        if not self.hosts:
            return
        stats = self.owner.stats
        if self.policy_pairs:
            self._choose_types()
            stats.note_pairs(_pairs.follow_policy_pairs(self, self.advice.pairs, self.partner))
            return
        if not self.owner.packing:
            return
        self._choose_types()
        overflow = _pairs.overflow(self, candidates)
        if not overflow:
            return
        pairs = _pairs.pair_overflow(self, overflow, self._one_type, self.owner.gain_cache(self.book),
                                     self.owner.pack_threshold, self.previous)
        for h, o in pairs:
            self.partner[h] = o
            self.partner[o] = h
        stats.note_pairs(len(pairs))

    # ------------------------------------------------------------------------------ layout
    def finish(self) -> dict[int, Assignment]:
        """Lay out each GPU type (``_layout``), then write every job's Assignment (``_assignments``)."""
        self._choose_types()
        t0 = time.perf_counter()
        hosts = self.hosts
        sizes = self.table.num_gpus[np.asarray(hosts, dtype=np.int64)].tolist()
        keep = kept_gpus(hosts, self.previous, self.type_of, self._one_type, self.cluster.gpu_type)
        layouts = self._lay_out(dict(zip(hosts, sizes, strict=True)), keep)
        gpus: dict[int, tuple[int, ...]] = {}
        for layout in layouts:
            gpus.update(layout.gpus)
        owner = self.owner
        assigner = Assigner(self.cluster, self.book, owner.strategy_switch_gain, owner.shortcuts.reuse_kept)
        out, moved = assigner.write(self.table, hosts, sizes, gpus, self.partner, self.previous)
        owner.stats.note_layout(moved, sum(len(layout.spread) for layout in layouts),
                                sum(layout.method == "regrouped" for layout in layouts),
                                sum(layout.evictions for layout in layouts), time.perf_counter() - t0)
        self.assigned = out
        return out

    def _lay_out(self, size: dict[int, int], keep: dict[int, tuple[int, ...]]) -> list[TypeLayout]:
        """Each GPU type's layout of the hosts given that type (those in ``keep`` keep their GPUs if they can)."""
        by_type: dict[int, list[int]] = {}
        if self._one_type:
            if self.hosts:
                by_type[0] = self.hosts
        else:
            for r in self.hosts:
                by_type.setdefault(self.type_of[r], []).append(r)
        return [self.owner.type_placer(self.cluster, ti).place(trows, size, keep) for ti, trows in by_type.items()]


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
        for ti, kk in distinct(tidx[ok], k[ok]):
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
                 round_seconds: float = 300.0, strategy_switch_gain: float = DEFAULT_STRATEGY_SWITCH_GAIN,
                 *, shortcuts: Shortcuts | None = None) -> None:
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
        #: The shortcuts taken (all by default; a test switches one off to check it changes nothing).
        self.shortcuts = shortcuts if shortcuts is not None else Shortcuts()
        self.stats = TesseraeStats()
        self._book: RateBook | None = None
        self._book_key: tuple[int, tuple[str, ...]] | None = None
        self._type_placers: dict[tuple[int, int], TypePlacer] = {}
        self._gains: dict[tuple[HostClass, JobClass], float] = {}
        self._type_solutions: dict[Any, np.ndarray | None] = {}
        self._gains_of: RateBook | None = None

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
        self.stats.begin_round()
        bulk_walk = len(cluster.gpu_types) == 1 and self.shortcuts.admit_in_bulk
        placer = OneTypeTesseraePlacer if bulk_walk else TesseraePlacer
        return placer(self, cluster, table, previous, model, advice)

    def repeat_last_round(self) -> None:
        """The statistics of a skipped decision: those of the last one it repeats."""
        self.stats.repeat_last_round()

    # Caches that live across rounds (rates by job class, per-type node arrays).
    def rate_book(self, cluster: Cluster, model: ThroughputModel) -> RateBook:
        key = (id(model), cluster.gpu_types)
        if self._book is None or self._book_key != key or self._book.model is not model:
            self._book = RateBook(model, cluster.gpu_types, fixed_strategy=not self.strategy_choice)
            self._book_key = key
            self._type_solutions = {}  # weights come from the rates
        return self._book

    def solve_types(self, sizes: np.ndarray, counts: np.ndarray, weight: np.ndarray, allowed: np.ndarray,
                    cap: np.ndarray, keys: list[RanClass]) -> np.ndarray | None:
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

    def gain_cache(self, book: RateBook) -> dict[tuple[HostClass, JobClass], float]:
        """Sharing gains by (host class, overflow class), valid as long as the rate book is."""
        if self._gains_of is not book:
            self._gains = {}
            self._gains_of = book
        return self._gains

    def type_placer(self, cluster: Cluster, type_index: int) -> TypePlacer:
        key = (id(cluster), type_index)
        tp = self._type_placers.get(key)
        if tp is None or tp.cluster is not cluster:
            tp = TypePlacer(cluster, type_index, self.shortcuts)
            self._type_placers[key] = tp
        return tp

    def summary(self) -> dict[str, Any]:
        return self.stats.summary(self.packing)
