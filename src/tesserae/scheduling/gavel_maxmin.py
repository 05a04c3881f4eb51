"""Gavel's heterogeneity-aware max-min fairness (OSDI 2020) as a baseline, realised as Gavel does it.

Allocation. Over the jobs j and the cluster's GPU types t, time fractions X[j, t] solve

    maximize  min_j  k_j * sum_t X[j, t] * tput[j, t] / (w_j * tput_prop[j])
    s.t.      sum_t X[j, t] <= 1  (a job runs at most all the time),
              sum_j k_j * X[j, t] <= GPUs of type t,  X >= 0,

where k_j is the job's GPU count (Gavel's scale factor: it makes max-min share GPU-time, not job
time), w_j its priority weight and tput_prop[j] its throughput with every GPU type in proportion to
its share of the cluster (Gavel's ``ProportionalPolicy`` normalisation).

Which optimal point. The max-min optimum fixes only the bottleneck jobs. Gavel takes the point
ECOS, an interior-point solver, returns; by default (``lp="center"``) this policy takes the analytic
centre of the optimal face (``_lp_center``), the point interior-point methods tend to, over the same
variables as Gavel's LP (every job on every type, every pair on every type). ``lp="max-total"``
instead takes a HiGHS vertex and then, with the minimum held at its optimum, maximises the sum of
the normalised throughputs (our earlier variant: it never idles a GPU a job could use).

Packing (``--packing``, Gavel's ``MaxMinFairnessPolicyWithPacking``): one more variable Y[p, t] per
pair p of jobs with the same GPU count. A pair uses k GPUs and counts toward both jobs' time and
throughput. The number of variables grows with the square of the active jobs, which is why Gavel's
packed policy does not scale. Its centre is symmetric in jobs of one class (job type, GPU count,
weight), so with ``lp="center"`` it is found from the LP over classes and pairs of classes instead
(``_gavel_classes``: the same central path, a few hundred variables), then expanded to every job
and pair; ``lp="max-total"`` (a vertex, not symmetric) solves the LP over every pair.

Mechanism: ``_gavel_rounds`` (per-type priority queues, the re-solve interval, pairs as units).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

import numpy as np
from pydantic import Field

from tesserae.core.jobs import JobTable
from tesserae.core.plugins import PluginOptions, RunContext
from tesserae.scheduling._gavel_classes import Classes, ClassPairs, central_by_classes, pairs_complete
from tesserae.scheduling._gavel_rounds import DEFAULT_RESET_INTERVAL, GavelRounds, ResetOptions, Unit
from tesserae.scheduling._lp_center import central_max_min
from tesserae.scheduling.base import register

_TOL = 1e-9
LP_MODES = ("center", "max-total")


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


class MaxMinOptions(ResetOptions):
    gavel_lp: Literal["center", "max-total"] = Field("center", description="which optimum: center (the "
                                                     "interior-point solution Gavel takes) or max-total")


@register("gavel-maxmin")
class GavelMaxMin(GavelRounds):
    Options: ClassVar[type[PluginOptions]] = MaxMinOptions

    def __init__(self, packing: bool = False, reset_interval: float = DEFAULT_RESET_INTERVAL,
                 round_seconds: float = 360.0, lp: str = "center") -> None:
        super().__init__(packing=packing, reset_interval=reset_interval, round_seconds=round_seconds)
        if lp not in LP_MODES:
            raise ValueError(f"lp must be one of {', '.join(LP_MODES)}")
        self.lp = lp
        #: Solve the packed LP's centre through its class LP (``_gavel_classes``; the same point). Off
        #: only to measure or check against the LP over every job and pair.
        self.by_classes = True
        self.last: LpSolution | None = None
        self.solves = 0
        self.solve_seconds: list[float] = []
        self.variables: list[int] = []

    @classmethod
    def from_options(cls, options: MaxMinOptions, context: RunContext) -> Self:
        """With ``--packing`` the LP has pair variables; its rounds are the run's."""
        return cls(packing=context.packing, reset_interval=options.gavel_reset_interval,
                   round_seconds=context.round_seconds, lp=options.gavel_lp)

    def _allocate(self, table: JobTable, jobs: list[int], units: list[Unit]) -> dict[Unit, np.ndarray]:
        pairs = [u for u in units if isinstance(u, tuple)] if self.packing else []
        return self.solve(table, jobs, pairs)

    def solve(self, table: JobTable, rows: list[int], pairs: list[tuple[int, int]] | None = None
              ) -> dict[Unit, np.ndarray]:
        """X of every job in ``rows`` and Y of every pair, per GPU type."""
        from scipy.sparse import coo_matrix, csr_matrix  # only here: a run without Gavel's LP never loads SciPy

        t0 = time.perf_counter()
        T = len(self.types)
        pairs = pairs or []
        center = self.lp == "center"
        m = len(rows)
        if m == 0:
            return {}
        R = np.array([self.alone(table.job_type(r), int(table.num_gpus[r])) for r in rows]).reshape(m, T)
        pos = {r: i for i, r in enumerate(rows)}
        k = table.num_gpus[np.asarray(rows)].astype(np.float64)
        w = table.weight[np.asarray(rows)]
        w = np.where(w > 0, w, 1.0)
        prop = (R * (self.cap / self.cap.sum())).sum(axis=1)  # not R @ ...: BLAS sums by CPU
        scale = k / (w * np.maximum(prop, _TOL))
        C = R * scale[:, None]
        if center and pairs and self.by_classes:
            by_class = self._solve_by_classes(table, rows, pairs, pos, k, w, scale, C, t0)
            if by_class is not None:
                return by_class
        sj, st = np.nonzero(np.ones_like(R, dtype=bool) if center else R > 0)
        pa, pb, pt, ca, cb = self._pair_variables(table, pairs, pos, scale, center)
        nS, nP = sj.size, pa.size
        nV = nS + nP
        z = nV
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
        if center:
            xv, zstar = central_max_min(csr_matrix(A), b, border=T)  # the last T rows: capacities
            x: np.ndarray | None = xv
        else:
            x, zstar = self._max_total(A, b, C, sj, st, ca, cb, nS, nV)
        self.solves += 1
        self.variables.append(nV + 1)
        self.solve_seconds.append(time.perf_counter() - t0)
        if x is None:
            return {}
        x = np.clip(x[:nV], 0.0, 1.0)
        single = np.zeros((m, T))
        single[sj, st] = x[:nS]
        arows = np.asarray(rows)
        self.last = LpSolution(rows=list(rows), single=single, pair_a=arows[pa] if nP else pa,
                               pair_b=arows[pb] if nP else pb, pair_type=pt, pair_time=x[nS:], min_share=zstar)
        out: dict[Unit, np.ndarray] = {r: single[i] for i, r in enumerate(rows)}
        for p in pairs:
            out[p] = np.zeros(T)
        for a, bb, tt, y in zip(pa.tolist(), pb.tolist(), pt.tolist(), x[nS:].tolist(), strict=True):
            out[(rows[a], rows[bb])][tt] = y
        return out

    def _solve_by_classes(self, table: JobTable, rows: list[int], pairs: list[tuple[int, int]], pos: dict[int, int],
                          k: np.ndarray, w: np.ndarray, scale: np.ndarray, C: np.ndarray, t0: float
                          ) -> dict[Unit, np.ndarray] | None:
        """The packed LP's centre through its class LP (``_gavel_classes``): the same point, from a
        problem with a variable per class and pair of classes instead of per job and pair of jobs.
        None when the pairs are not every pair of equal GPU counts (the full LP is solved then)."""
        T = len(self.types)
        arows = np.asarray(rows)
        classes = Classes.group(np.stack([table.type_idx[arows].astype(np.float64), k, w], axis=1))
        first = classes.first
        kc = k[first]
        cpairs = ClassPairs.of(classes, kc)
        kept = [p for p in pairs if p[0] in pos and p[1] in pos]
        pair_pos = np.array([(pos[a], pos[b]) for a, b in kept], dtype=np.int64).reshape(-1, 2)
        if not pairs_complete(classes, cpairs, pair_pos):
            return None
        coef = np.zeros((cpairs.a.size, T, 2))
        names = [table.job_type(int(arows[i])) for i in first.tolist()]
        for q, (ca, cb) in enumerate(zip(cpairs.a.tolist(), cpairs.b.tolist(), strict=True)):
            rr = self.pair_rates(names[ca], names[cb], int(kc[ca]))
            coef[q, :, 0] = rr[:, 0] * scale[first[ca]]
            coef[q, :, 1] = rr[:, 1] * scale[first[cb]]
        X, Y, zstar = central_by_classes(C[first], kc, self.cap, classes, cpairs, coef)
        self.solves += 1
        self.variables.append(X.size + Y.size + 1)
        self.solve_seconds.append(time.perf_counter() - t0)
        single = np.clip(X, 0.0, 1.0)[classes.of_row]
        at = cpairs.index(first.size)[classes.of_row[pair_pos[:, 0]], classes.of_row[pair_pos[:, 1]]]
        pair_time = np.clip(Y, 0.0, 1.0)[at]  # (pairs, T)
        n_pairs = pair_pos.shape[0]
        self.last = LpSolution(rows=list(rows), single=single, pair_a=np.repeat(arows[pair_pos[:, 0]], T),
                               pair_b=np.repeat(arows[pair_pos[:, 1]], T), pair_type=np.tile(np.arange(T), n_pairs),
                               pair_time=pair_time.reshape(-1), min_share=zstar)
        out: dict[Unit, np.ndarray] = {r: single[i] for i, r in enumerate(rows)}
        for p in pairs:
            out[p] = np.zeros(T)
        for p, y in zip(kept, pair_time, strict=True):
            out[p] = y
        return out

    def _max_total(self, A: Any, b: np.ndarray, C: np.ndarray, sj: np.ndarray, st: np.ndarray, ca: np.ndarray,
                   cb: np.ndarray, nS: int, nV: int) -> tuple[np.ndarray | None, float]:
        """A HiGHS vertex of the max-min optimum, then the largest total at that minimum."""
        from scipy.optimize import linprog

        z = nV
        bounds = np.zeros((nV + 1, 2))
        bounds[:, 1] = 1.0
        bounds[z, 1] = np.inf
        cost = np.zeros(nV + 1)
        cost[z] = -1.0
        res = linprog(cost, A_ub=A, b_ub=b, bounds=bounds, method="highs")
        if res.status != 0:
            return None, 0.0
        zstar = float(res.x[z])
        bounds[z] = (zstar * (1 - 1e-7), zstar * (1 - 1e-7))
        cost2 = np.zeros(nV + 1)
        cost2[:nS] = -C[sj, st]
        cost2[nS:nV] = -(ca + cb)
        res2 = linprog(cost2, A_ub=A, b_ub=b, bounds=bounds, method="highs")
        return (res2.x if res2.status == 0 else res.x), zstar

    def _pair_variables(self, table: JobTable, pairs: list[tuple[int, int]], pos: dict[int, int],
                        scale: np.ndarray, every_type: bool
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Indices (into rows) of every pair variable, its type, and both objective coefficients.

        Gavel's LP has a variable for every pair on every type, even where the pair cannot run
        (its coefficients are then 0); ``every_type=False`` keeps only types where both rates are > 0.
        """
        T = len(self.types)
        out_a, out_b, out_t, out_ca, out_cb = [], [], [], [], []
        for a, b in pairs:
            if a not in pos or b not in pos:
                continue
            k = int(table.num_gpus[a])
            rr = self.pair_rates(table.job_type(a), table.job_type(b), k)
            for t in range(T):
                if not every_type and not (rr[t] > 0).all():
                    continue
                ia, ib = pos[a], pos[b]
                out_a.append(ia)
                out_b.append(ib)
                out_t.append(t)
                out_ca.append(rr[t, 0] * scale[ia])
                out_cb.append(rr[t, 1] * scale[ib])
        ints = (np.asarray(v, dtype=np.int64) for v in (out_a, out_b, out_t))
        pa, pb, pt = ints
        return pa, pb, pt, np.asarray(out_ca, dtype=np.float64), np.asarray(out_cb, dtype=np.float64)

    def summary(self) -> dict[str, Any]:
        s = np.asarray(self.solve_seconds)
        return {**super().summary(), "lp_solves": self.solves,
                "lp_seconds_total": float(s.sum()) if s.size else 0.0,
                "lp_seconds_max": float(s.max()) if s.size else 0.0,
                "lp_variables_max": int(max(self.variables)) if self.variables else 0}
