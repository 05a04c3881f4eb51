"""Gavel's heterogeneity-aware max-min fairness (OSDI 2020) as a baseline: an LP solved with HiGHS.

Allocation. Over the runnable jobs j and the cluster's GPU types t, time fractions X[j, t] solve

    maximize  min_j  k_j * sum_t X[j, t] * tput[j, t] / (w_j * tput_prop[j])
    s.t.      sum_t X[j, t] <= 1  (a job runs at most all the time),
              sum_j k_j * X[j, t] <= GPUs of type t,  X >= 0,  X[j, t] = 0 where j cannot run on t,

where k_j is the job's GPU count (Gavel's scale factor: it makes max-min share GPU-time, not job
time), w_j its priority weight (a job of weight 2 gets twice the share) and tput_prop[j] its
throughput with every GPU type in proportion to its share of the cluster (Gavel's normalisation by
an isolated, heterogeneity-agnostic allocation; the contention factor of Gavel's isolated policy is
common to all jobs and dropped). The epigraph LP (maximize z, z <= each job's term) is solved by
``scipy.optimize.linprog(method="highs")``; a second LP then maximises the sum of the normalised
throughputs with z held at its optimum (the max-min optimum leaves the non-bottleneck jobs
undetermined; HiGHS would return an arbitrary vertex, often idling GPUs; Gavel's later water-filling
policy addresses the same gap).

Packing (``--packing``, Gavel's "MaxMinFairness_Packing"): one more variable Y[p, t] per pair p of
jobs with the same GPU count that can share type t (both pair rates > 0). A pair uses k GPUs and
counts toward both jobs' time and throughput. The number of variables grows with the square of the
active jobs: this is the formulation that does not scale, kept as the baseline it is.

Mechanism (Gavel's round-based priorities): the allocation is recomputed when the set of runnable
jobs changes. Each decision, priority[j, t] = A[j, t] / (fraction of its time in the system the
job has actually run on t), A = X plus its pairs' Y (never run: a large priority scaled by A). Jobs
are ordered by their best priority; their GPU types are advised in priority order
(``type_preference``) to placements that follow advice (``--placement gavel``), and pairs with LP
time are ranked by the same rule (``pair_preference``). The time each job ran on each type is
credited from the placement's report (``record_round``) or, without one, to the advised type.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.throughput import ThroughputModel
from tesserae.scheduling.base import SchedulingPolicy, by_keys, register

NEVER_RAN_PRIORITY = 1e9
_TOL = 1e-9


@dataclass
class LpSolution:
    """The last LP solution: X of each job (rows, types), and each pair variable (rows a, b, type, Y)."""

    rows: list[int]
    single: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_type: np.ndarray
    pair_time: np.ndarray
    min_share: float


def _rate(model: ThroughputModel, jt: str, k: int, g: str, partner: tuple[str, int] | None = None) -> float:
    try:
        r = float(model.rate(jt, k, g, True, partner))
    except Exception:
        return 0.0
    return r if r > 0 else 0.0


@register("gavel-maxmin")
class GavelMaxMin(SchedulingPolicy):
    def __init__(self, packing: bool = False) -> None:
        self.packing = packing
        self.cluster: Cluster | None = None
        self.model: ThroughputModel | None = None
        self.types: tuple[str, ...] = ()
        self.cap = np.zeros(0)
        self._alone: dict[tuple[str, int], np.ndarray] = {}
        self._pair: dict[tuple[str, str, int], np.ndarray] = {}
        self._key: bytes | None = None
        self.alloc: dict[int, np.ndarray] = {}  # row -> A[row, t] (singles plus pairs)
        self.pair_alloc: dict[tuple[int, int], float] = {}  # (a, b), a < b -> total Y over types
        self.received: dict[int, np.ndarray] = {}  # row -> seconds run on each type
        self.pair_received: dict[tuple[int, int], float] = {}
        self._last_exec: dict[int, float] = {}
        self._placed: dict[int, tuple[str, int | None]] = {}
        self._advised: dict[int, tuple[str, ...]] = {}
        self._priority_pairs: list[tuple[int, int]] = []
        self.last: LpSolution | None = None
        self.solves = 0
        self.solve_seconds: list[float] = []
        self.variables: list[int] = []

    @classmethod
    def from_options(cls, **options: Any) -> GavelMaxMin:
        return cls(packing=bool(options.get("packing", False)))

    def bind(self, cluster: Cluster, model: ThroughputModel) -> None:
        """Scheduler hook: the LP needs the GPU types, their counts and the throughputs."""
        self.cluster, self.model = cluster, model
        self.types = cluster.gpu_types
        self.cap = np.array([cluster.gpus_by_type[t] for t in self.types], dtype=np.float64)

    # --------------------------------------------------------------------------------- rates
    def alone(self, jt: str, k: int) -> np.ndarray:
        key = (jt, k)
        r = self._alone.get(key)
        if r is None:
            assert self.model is not None
            r = np.array([_rate(self.model, jt, k, g) for g in self.types])
            self._alone[key] = r
        return r

    def pair_rates(self, a: str, b: str, k: int) -> np.ndarray:
        """(T, 2): a's rate next to b and b's next to a per type; a row of zeros where they cannot share."""
        key = (a, b, k)
        r = self._pair.get(key)
        if r is None:
            assert self.model is not None
            r = np.array([[_rate(self.model, a, k, g, (b, k)), _rate(self.model, b, k, g, (a, k))]
                          for g in self.types]).reshape(len(self.types), 2)
            r[(r <= 0).any(axis=1)] = 0.0
            self._pair[key] = r
        return r

    # --------------------------------------------------------------------------------- mechanism
    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        if self.cluster is None:
            raise RuntimeError("gavel-maxmin needs the cluster and the throughput model: use it through "
                               "tesserae.scheduler.Scheduler, which binds them")
        self._credit(table, active)
        key = np.sort(active).tobytes()
        if key != self._key:
            self._solve(table, active)
            self._key = key
        T = len(self.types)
        m = active.size
        age = np.maximum(now - table.submit[active], _TOL)
        A = np.zeros((m, T))
        R = np.zeros((m, T))
        for i, r in enumerate(active.tolist()):
            a = self.alloc.get(r)
            if a is not None:
                A[i] = a
            R[i] = self.received.get(r, 0.0)
        frac = R / age[:, None]
        prio = np.where(A > _TOL, A / np.maximum(frac, 1.0 / NEVER_RAN_PRIORITY), 0.0)
        best = prio.max(axis=1) if T else np.zeros(m)
        self._advised = {}
        for i, r in enumerate(active.tolist()):
            jt, k = table.job_type(r), int(table.num_gpus[r])
            rates = self.alone(jt, k)
            ranked = sorted(range(T), key=lambda t, i=i: (-prio[i, t], -rates[t], t))
            self._advised[r] = tuple(self.types[t] for t in ranked if rates[t] > 0)
        if self.packing:
            self._rank_pairs(table, now)
        return by_keys(active, -best, table.submit[active], table.job_id[active])

    def type_preference(self, row: int) -> tuple[str, ...]:
        """GPU types for ``row``, most deserving first (the placement's advice)."""
        return self._advised.get(row, self.types)

    def pair_preference(self) -> list[tuple[int, int]]:
        """Pairs with LP time, highest priority first."""
        return self._priority_pairs

    def record_round(self, placed: dict[int, tuple[str, int | None]]) -> None:
        """Placement hook: where every running job runs until the next decision (type, partner)."""
        self._placed = dict(placed)

    def _credit(self, table: JobTable, active: np.ndarray) -> None:
        T = len(self.types)
        index = {g: i for i, g in enumerate(self.types)}
        for r, last in self._last_exec.items():
            delta = float(table.executed[r]) - last
            if delta <= 0:
                continue
            placed = self._placed.get(r)
            if placed is not None:
                t, partner = index[placed[0]], placed[1]
            else:
                adv = self._advised.get(r)
                t, partner = (index[adv[0]] if adv else 0), None
            self.received.setdefault(r, np.zeros(T))[t] += delta
            if partner is not None and r < partner:
                self.pair_received[(r, partner)] = self.pair_received.get((r, partner), 0.0) + delta
        alive = set(active.tolist())
        for store in (self.received, self.alloc):
            for r in [r for r in store if r not in alive]:
                del store[r]
        self.pair_received = {p: v for p, v in self.pair_received.items() if p[0] in alive and p[1] in alive}
        self._last_exec = {r: float(table.executed[r]) for r in alive}

    def _rank_pairs(self, table: JobTable, now: float) -> None:
        items = []
        for (a, b), y in self.pair_alloc.items():
            age = max(now - max(table.submit[a], table.submit[b]), _TOL)
            frac = self.pair_received.get((a, b), 0.0) / age
            items.append((-(y / max(frac, 1.0 / NEVER_RAN_PRIORITY)), a, b))
        items.sort()
        self._priority_pairs = [(a, b) for _, a, b in items]

    # --------------------------------------------------------------------------------- the LP
    def _solve(self, table: JobTable, active: np.ndarray) -> None:
        t0 = time.perf_counter()
        T = len(self.types)
        rows = active.tolist()
        R = np.array([self.alone(table.job_type(r), int(table.num_gpus[r])) for r in rows]).reshape(len(rows), T)
        runnable = R.max(axis=1) > 0 if rows else np.zeros(0, dtype=bool)
        rows = [r for r, ok in zip(rows, runnable.tolist(), strict=True) if ok]
        R = R[runnable]
        self.alloc, self.pair_alloc = {}, {}
        m = len(rows)
        if m == 0:
            return
        k = table.num_gpus[np.asarray(rows)].astype(np.float64)
        w = table.weight[np.asarray(rows)]
        w = np.where(w > 0, w, 1.0)
        prop = R @ (self.cap / self.cap.sum())
        scale = k / (w * np.maximum(prop, _TOL))
        C = R * scale[:, None]
        # Singles: one variable per (job, type) it can run on.
        sj, st = np.nonzero(R > 0)
        # Pairs: one variable per (pair of same-GPU-count jobs, type where both rates are > 0).
        if self.packing:
            pa, pb, pt, ca, cb = self._pair_variables(table, rows, k, scale)
        else:
            pa = pb = pt = np.zeros(0, dtype=np.int64)
            ca = cb = np.zeros(0)
        nS, nP = sj.size, pa.size
        nV = nS + nP
        z = nV  # index of the epigraph variable
        # (1) z - eff_j <= 0 ; (2) time_j <= 1 ; (3) GPUs of t <= cap_t
        r1 = np.concatenate([sj, pa, pb, np.arange(m)])
        c1 = np.concatenate([np.arange(nS), nS + np.arange(nP), nS + np.arange(nP), np.full(m, z)])
        v1 = np.concatenate([-C[sj, st], -ca, -cb, np.ones(m)])
        r2 = np.concatenate([sj, pa, pb]) + m
        c2 = np.concatenate([np.arange(nS), nS + np.arange(nP), nS + np.arange(nP)])
        v2 = np.ones(nS + 2 * nP)
        r3 = np.concatenate([st, pt]) + 2 * m
        c3 = np.concatenate([np.arange(nS), nS + np.arange(nP)])
        v3 = np.concatenate([k[sj], k[pa]])
        A = coo_matrix((np.concatenate([v1, v2, v3]), (np.concatenate([r1, r2, r3]), np.concatenate([c1, c2, c3]))),
                       shape=(2 * m + T, nV + 1)).tocsr()
        b = np.concatenate([np.zeros(m), np.ones(m), self.cap])
        bounds = np.zeros((nV + 1, 2))
        bounds[:, 1] = 1.0
        bounds[z, 1] = np.inf
        cost = np.zeros(nV + 1)
        cost[z] = -1.0
        res = linprog(cost, A_ub=A, b_ub=b, bounds=bounds, method="highs")
        x = None
        if res.status == 0:
            zstar = float(res.x[z])
            # Stage 2: the same constraints with z fixed at (just under) its optimum; maximise the total.
            bounds[z] = (zstar * (1 - 1e-7), zstar * (1 - 1e-7))
            cost2 = np.zeros(nV + 1)
            cost2[:nS] = -C[sj, st]
            cost2[nS:nV] = -(ca + cb)
            res2 = linprog(cost2, A_ub=A, b_ub=b, bounds=bounds, method="highs")
            x = res2.x if res2.status == 0 else res.x
        self.solves += 1
        self.variables.append(nV + 1)
        self.solve_seconds.append(time.perf_counter() - t0)
        if x is None:
            return
        x = np.clip(x[:nV], 0.0, 1.0)
        single = np.zeros((m, T))
        single[sj, st] = x[:nS]
        self.last = LpSolution(rows=rows, single=single, pair_a=np.asarray(rows)[pa] if nP else pa,
                               pair_b=np.asarray(rows)[pb] if nP else pb, pair_type=pt, pair_time=x[nS:],
                               min_share=float(res.x[z]))
        alloc = single.copy()
        if nP:
            y = x[nS:]
            np.add.at(alloc, (pa, pt), y)
            np.add.at(alloc, (pb, pt), y)
            live = y > 1e-6
            tot: dict[tuple[int, int], float] = {}
            for a, bb, yy in zip(pa[live].tolist(), pb[live].tolist(), y[live].tolist(), strict=True):
                ra, rb = rows[a], rows[bb]
                key = (ra, rb) if ra < rb else (rb, ra)
                tot[key] = tot.get(key, 0.0) + yy
            self.pair_alloc = tot
        self.alloc = {r: alloc[i] for i, r in enumerate(rows)}

    def _pair_variables(self, table: JobTable, rows: list[int], k: np.ndarray, scale: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Indices (into rows) of every pair, its type, and both objective coefficients."""
        T = len(self.types)
        types = [table.job_type(r) for r in rows]
        names = sorted(set(types))
        cls = np.array([names.index(t) for t in types], dtype=np.int64)
        out_a, out_b, out_t, out_ca, out_cb = [], [], [], [], []
        for kk in np.unique(k).tolist():
            idx = np.flatnonzero(k == kk)
            if idx.size < 2:
                continue
            # Class-level table of pair rates for this GPU count: (classes, classes, T, 2).
            here = np.unique(cls[idx])
            table_r = np.zeros((len(names), len(names), T, 2))
            for i in here.tolist():
                for j in here.tolist():
                    table_r[i, j] = self.pair_rates(names[i], names[j], int(kk))
            iu, ju = np.triu_indices(idx.size, 1)
            a, b = idx[iu], idx[ju]
            rr = table_r[cls[a], cls[b]]  # (P, T, 2)
            p, t = np.nonzero(rr[:, :, 0] > 0)
            out_a.append(a[p])
            out_b.append(b[p])
            out_t.append(t)
            out_ca.append(rr[p, t, 0] * scale[a[p]])
            out_cb.append(rr[p, t, 1] * scale[b[p]])
        if not out_a:
            e = np.zeros(0, dtype=np.int64)
            return e, e, e, np.zeros(0), np.zeros(0)
        return (np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_t), np.concatenate(out_ca),
                np.concatenate(out_cb))

    def summary(self) -> dict[str, Any]:
        s = np.asarray(self.solve_seconds)
        return {"lp_solves": self.solves,
                "lp_seconds_total": float(s.sum()) if s.size else 0.0,
                "lp_seconds_max": float(s.max()) if s.size else 0.0,
                "lp_variables_max": int(max(self.variables)) if self.variables else 0}
