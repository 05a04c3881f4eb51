"""Which GPU type each job gets: an assignment of jobs to type slots (DESIGN §4.3).

A job of class c (job type, GPU count k) placed on GPU type t is worth ``w[c, t]`` = its throughput
on t over its throughput on the slowest type it can run on. Jobs of one class are interchangeable,
so the jobs x type-slots matching collapses to an integer program over class counts:

    maximize sum w[c, t] x[c, t]
    s.t. sum_t x[c, t] = n_c (every admitted job is placed), sum_c k_c x[c, t] <= free GPUs of t,
         x[c, t] = 0 where class c cannot run on t, x integer >= 0.

With one GPU count it is a transportation problem (its LP optimum is integral); with gangs of
several sizes it is a small knapsack-like MILP, solved by HiGHS (``scipy.optimize.milp``) in a few
milliseconds for the few hundred classes a cluster sees. The allocator's greedy admission is a
feasible solution, so the problem is always feasible; if HiGHS reaches its node limit its best
incumbent is used when it beats the greedy choice, which is kept otherwise.
"""

from __future__ import annotations

import numpy as np

#: HiGHS node limit: deterministic, unlike a time limit.
NODE_LIMIT = 2000


def assign_types(sizes: np.ndarray, counts: np.ndarray, weight: np.ndarray, allowed: np.ndarray,
                 cap: np.ndarray) -> np.ndarray | None:
    """x[c, t] (jobs of class c on type t) maximizing the normalised throughput; None if not solved.

    The LP relaxation (dual simplex) is tried first: when its vertex is integral it is the optimum of
    the integer program too; otherwise HiGHS' branch and bound runs.
    """
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp  # only here: a fifo run never loads SciPy
    from scipy.sparse import csr_matrix

    C, T = weight.shape
    if C == 0:
        return np.zeros((0, T), dtype=np.int64)
    ub = np.where(allowed, counts[:, None], 0).astype(float).ravel()
    rows = np.repeat(np.arange(C), T)
    cols = np.arange(C * T)
    eq = csr_matrix((np.ones(C * T), (rows, cols)), shape=(C, C * T))
    cap_rows = csr_matrix((np.repeat(sizes, T).astype(float), (np.tile(np.arange(T), C), cols)), shape=(T, C * T))
    lp = linprog(-weight.ravel(), A_ub=cap_rows, b_ub=cap.astype(float), A_eq=eq, b_eq=counts.astype(float),
                 bounds=np.c_[np.zeros(C * T), ub], method="highs-ds")
    if lp.status == 0 and np.abs(lp.x - np.rint(lp.x)).max() < 1e-6:
        return _checked(np.rint(lp.x).astype(np.int64).reshape(C, T), sizes, counts, allowed, cap)
    if lp.status == 2:  # infeasible (cannot happen when the greedy admission is feasible)
        return None
    cons = [LinearConstraint(eq, counts.astype(float), counts.astype(float)),
            LinearConstraint(cap_rows, -np.inf, cap.astype(float))]
    res = milp(-weight.ravel(), constraints=cons, integrality=np.ones(C * T), bounds=Bounds(0, ub),
               options={"node_limit": NODE_LIMIT, "presolve": True})
    if res.x is None or res.status not in (0, 1):  # 1: node limit reached, x is the best incumbent
        return None
    return _checked(np.rint(res.x).astype(np.int64).reshape(C, T), sizes, counts, allowed, cap)


def _checked(x: np.ndarray, sizes: np.ndarray, counts: np.ndarray, allowed: np.ndarray, cap: np.ndarray
             ) -> np.ndarray | None:
    if (x.sum(axis=1) != counts).any() or (sizes @ x > cap).any() or (x[~allowed] > 0).any():
        return None
    return x


def type_blind(sizes: np.ndarray, allowed: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Per job (in priority order): the first GPU type in cluster order with room (-1 when none)."""
    free = cap.astype(np.int64).copy()
    out = np.full(sizes.size, -1, dtype=np.int64)
    for i, k in enumerate(sizes.tolist()):
        for t in np.flatnonzero(allowed[i]).tolist():
            if free[t] >= k:
                free[t] -= k
                out[i] = t
                break
    return out
