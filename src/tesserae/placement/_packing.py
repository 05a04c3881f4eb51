"""Packing: which waiting jobs share GPUs with which admitted jobs (DESIGN §4.2).

Candidates are the admitted jobs (hosts, on the GPU type the allocation chose) and the overflow:
the next jobs in priority order that did not fit, up to the cluster's capacity again. An edge joins
a host and an overflow job that can share: the same GPU count, or a larger host and a smaller job
where a measured profile has a pair rate for them; both pair rates positive (0.0 is the profile's
out-of-memory mark) and the profile's memory check passed. Its weight is the gain
``tput(a|b)/tput(a) + tput(b|a)/tput(b) - 1`` on the host's GPU type, kept above a threshold.

Gains depend on (job type, GPU count, GPU type) only, so the maximum-weight bipartite matching
between hosts and overflow jobs is solved over *classes*: how many pairs of host class h and
overflow class o to form. That is a transportation problem (totally unimodular: the LP optimum is
integral), solved by HiGHS on at most (#host classes x #overflow classes) variables, whatever the
number of jobs; pairs of last round that can form again are worth a little more (``STICKINESS``),
so equal-gain alternatives do not reshuffle partners every round. Concrete jobs are then handed
out: first pairs that already shared GPUs last round (so that they do not move), then overflow jobs
in priority order, each to the lowest-priority host of the class left (the job that suffers the
sharing slowdown is the one the policy values least).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tesserae.placement._classes import HostClass, JobClass

DEFAULT_THRESHOLD = 0.1
#: Bonus per pair of last round formed again (a tie-breaker: gains differ by more in real profiles).
STICKINESS = 0.01


def pack(hosts: list[tuple[int, HostClass]], overflow: list[tuple[int, JobClass]],
         gain: Callable[[HostClass, JobClass], float], threshold: float = DEFAULT_THRESHOLD,
         previous_partner: Mapping[int, int] | None = None) -> list[tuple[int, int]]:
    """(host row, overflow row) pairs. ``hosts`` and ``overflow`` are in priority order."""
    host_rows: dict[HostClass, list[int]] = {}
    for row, hc in hosts:
        host_rows.setdefault(hc, []).append(row)
    over_rows: dict[JobClass, list[int]] = {}
    for row, oc in overflow:
        over_rows.setdefault(oc, []).append(row)
    index = {oc: j for j, oc in enumerate(over_rows)}
    return pack_classes(host_rows, dict(hosts), over_rows, [row for row, _ in overflow],
                        [index[oc] for _, oc in overflow], gain, threshold, previous_partner)


def pack_classes(host_rows: Mapping[HostClass, list[int]], host_class: Mapping[int, HostClass],
                 over_rows: Mapping[JobClass, list[int]], over_order: list[int], over_class: list[int],
                 gain: Callable[[HostClass, JobClass], float], threshold: float = DEFAULT_THRESHOLD,
                 previous_partner: Mapping[int, int] | None = None) -> list[tuple[int, int]]:
    """``pack`` on jobs already grouped by class (what a caller that can group them in bulk gives).

    ``host_rows`` / ``over_rows``: the rows of each class in priority order, classes in the order
    of their first job; ``host_class``: each host's class; ``over_order``: the overflow rows in
    priority order and ``over_class`` the index of each one's class in ``over_rows``.
    """
    hcs, ocs = list(host_rows), list(over_rows)
    # Edges only between compatible GPU counts (a partner never needs more GPUs than its host).
    over_by_k: dict[int, list[int]] = {}
    for j, oc in enumerate(ocs):
        over_by_k.setdefault(oc[1], []).append(j)
    edges: list[tuple[int, int, float]] = []
    for i, hc in enumerate(hcs):
        for k, js in over_by_k.items():
            if k > hc[1]:
                continue
            for j in js:
                g = gain(hc, ocs[j])
                if g > threshold:
                    edges.append((i, j, g))
    if not edges:
        return []
    # Overflow rows that were paired last round with a row that hosts now, in priority order.
    again_rows: list[tuple[int, int, int]] = []  # (overflow row, its class index, previous partner)
    if previous_partner:
        order = np.asarray(over_order, dtype=np.int64)
        before = np.fromiter(previous_partner, dtype=np.int64, count=len(previous_partner))
        for pos in np.flatnonzero(np.isin(order, before)).tolist():
            o = over_order[pos]
            h = previous_partner[o]
            if h in host_class:
                again_rows.append((o, over_class[pos], h))
    # Pairs of last round that can form again, per edge: the solve prefers them (stickiness).
    edge_of = {(hcs[i], ocs[j]): e for e, (i, j, _) in enumerate(edges)}
    again = np.zeros(len(edges), dtype=np.int64)
    for _, j, h in again_rows:
        e = edge_of.get((host_class[h], ocs[j]))
        if e is not None:
            again[e] += 1
    counts = _solve(edges, [len(host_rows[h]) for h in hcs], [len(over_rows[o]) for o in ocs], again)
    left = {(hcs[i], ocs[j]): int(n) for (i, j, _), n in zip(edges, counts, strict=True) if n > 0}
    if not left:
        return []
    paired: set[int] = set()
    out: list[tuple[int, int]] = []
    for o, j, h in again_rows:
        if h in paired:
            continue
        key = (host_class[h], ocs[j])
        if left.get(key, 0) > 0:
            left[key] -= 1
            paired.update((h, o))
            out.append((h, o))
    by_over: dict[JobClass, list[HostClass]] = {}
    for hc, oc in left:
        by_over.setdefault(oc, []).append(hc)
    for oc, lst in by_over.items():
        lst.sort(key=lambda hc, oc=oc: -gain(hc, oc))
    # Overflow jobs in priority order; each takes the best-gain host class it still has pairs with,
    # and in it the lowest-priority host not yet paired. Only jobs of a class with pairs are looked
    # at, and the walk ends when no pair is left.
    cursors = {hc: len(rows) - 1 for hc, rows in host_rows.items()}
    remaining = sum(left.values())
    with_pairs = np.array([j for j, oc in enumerate(ocs) if oc in by_over], dtype=np.int64)
    cls = np.asarray(over_class, dtype=np.int64)
    for pos in np.flatnonzero(np.isin(cls, with_pairs)).tolist():
        if remaining <= 0:
            break
        o = over_order[pos]
        if o in paired:
            continue
        oc = ocs[over_class[pos]]
        hc = next((h for h in by_over[oc] if left[(h, oc)] > 0), None)
        if hc is None:
            continue
        rows = host_rows[hc]
        i = cursors[hc]
        while i >= 0 and rows[i] in paired:
            i -= 1
        cursors[hc] = i - 1
        if i < 0:
            continue
        h = rows[i]
        left[(hc, oc)] -= 1
        remaining -= 1
        paired.update((h, o))
        out.append((h, o))
    return out


def _solve(edges: list[tuple[int, int, float]], host_counts: list[int], over_counts: list[int],
           again: np.ndarray | None = None) -> np.ndarray:
    """Pairs per edge: the transportation problem over classes (HiGHS).

    An edge with ``again[e]`` pairs of last round that can form again gets a second variable, capped
    at that number, worth :data:`STICKINESS` more per pair: among (near-)equal solutions the one that
    keeps last round's pairs wins, so pairs do not move between rounds for nothing.
    """
    E, H, n_over = len(edges), len(host_counts), len(over_counts)
    ii = np.array([e[0] for e in edges])
    jj = np.array([e[1] for e in edges])
    w = np.array([e[2] for e in edges])
    ub = np.minimum(np.asarray(host_counts)[ii], np.asarray(over_counts)[jj]).astype(float)
    extra = np.flatnonzero(again > 0) if again is not None else np.zeros(0, dtype=np.int64)
    ii2, jj2 = np.concatenate([ii, ii[extra]]), np.concatenate([jj, jj[extra]])
    w2 = np.concatenate([w, w[extra] + STICKINESS])
    ub2 = np.concatenate([ub, np.minimum(ub[extra], again[extra]) if extra.size else np.zeros(0)])
    V = ii2.size
    rhs = np.array(host_counts + over_counts, dtype=float)
    # Totally unimodular with integral bounds: the dual simplex returns an integral vertex.
    xs = _dual_simplex(-w2, ii2, H + jj2, H + n_over, ub2, rhs)
    x = None
    if xs is not None:
        x = np.rint(xs)
        used = np.bincount(ii2, x, H + n_over) + np.bincount(H + jj2, x, H + n_over)
        if np.abs(x - xs).max() > 1e-6 or (used > rhs + 1e-9).any():
            x = None
    if x is None:  # never seen; kept as a safety net
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import csr_matrix

        cols = np.arange(V)
        a = csr_matrix((np.ones(2 * V), (np.concatenate([ii2, H + jj2]), np.concatenate([cols, cols]))),
                       shape=(H + n_over, V))
        res = milp(-w2, constraints=[LinearConstraint(a, -np.inf, rhs)],
                   integrality=np.ones(V), bounds=Bounds(0, ub2))
        if res.x is None:
            return np.zeros(E, dtype=np.int64)
        x = np.rint(res.x)
    x = x.astype(np.int64)
    out = x[:E].copy()
    np.add.at(out, extra, x[E:])
    return out


def _dual_simplex(c: np.ndarray, row_a: np.ndarray, row_b: np.ndarray, n_rows: int, ub: np.ndarray,
                  rhs: np.ndarray) -> np.ndarray | None:
    """min c.x, A x <= rhs, 0 <= x <= ub, where column v of A is 1 on rows ``row_a[v]`` < ``row_b[v]``.

    HiGHS's dual simplex with the options ``linprog(method="highs-ds")`` gives it, on a fresh HiGHS
    instance as linprog's does, but called directly: on these small problems (one per round)
    linprog's input checks, SciPy's per-call option validation and its reading back of duals and
    bases cost more than the solve. The options are validated once (``_highs_binding``). Falls
    back to ``linprog`` where SciPy's HiGHS binding is not the one this was written against.
    None when the solve fails.
    """
    V = c.size
    binding = _highs()
    if binding is not None:
        try:
            core, options, optimal, inf = binding
            lp = core.HighsLp()
            lp.num_col_ = V
            lp.num_row_ = n_rows
            m = lp.a_matrix_
            m.num_col_ = V
            m.num_row_ = n_rows
            m.format_ = core.MatrixFormat.kColwise
            lp.col_cost_ = c.astype(float)
            lp.col_lower_ = np.zeros(V)
            lp.col_upper_ = ub.astype(float)
            lp.row_lower_ = np.full(n_rows, -inf)
            lp.row_upper_ = rhs.astype(float)
            m.start_ = np.arange(0, 2 * V + 1, 2, dtype=np.int32)
            m.index_ = np.column_stack([row_a, row_b]).ravel().astype(np.int32)
            m.value_ = np.ones(2 * V)
            highs = core._Highs()
            if highs.passOptions(options) == core.HighsStatus.kError or \
                    highs.passModel(lp) == core.HighsStatus.kError or highs.run() == core.HighsStatus.kError:
                return None
            if highs.getModelStatus() != optimal:
                return None
            return np.array(highs.getSolution().col_value, dtype=float)
        except (TypeError, ValueError, AttributeError):
            pass
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    cols = np.arange(V)
    a = csr_matrix((np.ones(2 * V), (np.concatenate([row_a, row_b]), np.concatenate([cols, cols]))), shape=(n_rows, V))
    res = linprog(c, A_ub=a, b_ub=rhs, bounds=np.c_[np.zeros(V), ub], method="highs-ds")
    return res.x if res.status == 0 else None


def _highs_binding() -> tuple[Any, Any, Any, float] | None:
    """SciPy's HiGHS core module, the options linprog(method="highs-ds") sets (as SciPy's wrapper sets
    them, validated once), the optimal status and HiGHS's infinity; None if the binding differs."""
    try:
        import scipy.optimize._highspy._core as core
        from scipy.optimize._highspy._core import simplex_constants as s_c

        options = core.HighsOptions()
        values = {"presolve": "on", "solver": "simplex",
                  "highs_debug_level": core.HighsDebugLevel.kHighsDebugLevelNone, "log_to_console": False,
                  "output_flag": False, "simplex_strategy": s_c.SimplexStrategy.kSimplexStrategyDual}
        probe = core._Highs()
        for key, value in values.items():
            status, _ = probe.getOptionType(key)
            if status != core.HighsStatus.kOk:
                return None
            setattr(options, key, value)
        return core, options, core.HighsModelStatus.kOptimal, float(core.kHighsInf)
    except (ImportError, AttributeError, TypeError):
        return None


_HIGHS: list[tuple[Any, Any, Any, float] | None] = []


def _highs() -> tuple[Any, Any, Any, float] | None:
    """``_highs_binding()``, looked up at the first solve (importing SciPy's HiGHS takes a fifth of a
    second, which a run that never packs does not pay)."""
    if not _HIGHS:
        _HIGHS.append(_highs_binding())
    return _HIGHS[0]
