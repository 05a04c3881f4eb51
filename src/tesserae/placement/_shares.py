"""Allocation-preserving type assignment (DESIGN §4.4): realise per-type shares over rounds.

A policy such as Gavel's max-min gives each unit (a job, or a pair of jobs) an allocation X[u, t]:
the fraction of time it should run on GPU type t. Gavel's own mechanism realises X round by
round, and a job whose X is split between two types changes type, and restarts, nearly every
round. Here the units the policy runs this round, and how many units of each gang size run on
each type (which the policy's fill made fit), are kept; *which* unit runs on which type is chosen
by one assignment per gang size, so that:

- each unit's deficit D[u, t] (seconds it is behind X on t since the allocation was set, carried
  between rounds by the policy, which credits what actually ran) stays within a tolerance band
  of ``tolerance`` seconds: the value of putting u on t for a round of L seconds is
  ``c(D~) - c(D~ - L)`` with ``D~ = D + X L`` (the deficit after the round if u ran elsewhere) and
  ``c(d) = max(0, |d| - tolerance)``, i.e. the band error this round removes;
- a unit that ran last round on another type pays ``switch_cost`` seconds (a restart);
- ties go to the type the policy advised (with no deficit pressure it follows the policy).

A type switch is only worth it once the band is left, so a job whose X is split half and half
stays on one type for about ``2 tolerance / L + 1`` rounds before it moves, instead of one.

The units, and the GPUs of each type in use, are what the policy's fill chose (so no GPU it would
keep busy falls idle: the fill is work-conserving, fastest type first); within them a unit may go
to any type it can run on (:func:`assign_usage`). The optimum is read off the per-unit best types
when they already use each type as the fill did; else the policy's number of units of each gang
size on each type is kept (:func:`assign_block`, a transportation problem per gang size:
``linear_sum_assignment`` on the units x slots block when it is small, else an LP over the
units x types edges, totally unimodular, whose vertex HiGHS' dual simplex returns integral).
Keeping each type's mix of gang sizes also keeps its layout as feasible as the policy's. (An LP
across gang sizes was tried as well: on the workloads of ``tests/tesserae/test_shares.py`` it
changed type switches by +-5% either way at twice the decision time, so it is not used.)
Nothing loops over GPUs or pairs of jobs.
"""

from __future__ import annotations

import numpy as np

#: Largest units x slots block solved by ``linear_sum_assignment`` (dense); larger ones by LP.
DENSE_LIMIT = 256
#: Bonus (s) of the advised type: a tie-break, far below any deficit that matters.
ADVISED_BONUS = 1e-3
_FORBIDDEN = -1e12


def share_weights(deficit: np.ndarray, shares: np.ndarray, round_seconds: float, tolerance: float,
                  switched: np.ndarray, switch_cost: float, advised: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """w[u, t]: the value of running unit u on type t this round (see module docstring).

    ``switched[u, t]`` counts the unit's jobs that ran last round on a type other than t;
    ``advised[u]`` is the policy's type; ``allowed`` masks the types each unit can run on.
    """
    L = float(round_seconds)
    after = deficit + shares * L

    def band(d: np.ndarray) -> np.ndarray:
        return np.maximum(np.abs(d) - tolerance, 0.0)

    w = band(after) - band(after - L) - switch_cost * switched
    w[np.arange(w.shape[0]), advised] += ADVISED_BONUS
    return np.where(allowed, w, _FORBIDDEN)


def assign_block(weight: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Type of each unit maximising the total weight with exactly ``counts[t]`` units on type t.

    ``weight`` is (units, types) with forbidden entries at a large negative value; ``counts`` sums
    to the number of units and a feasible assignment exists (the policy's own).
    """
    m, T = weight.shape
    best = np.argmax(weight, axis=1)
    if np.array_equal(np.bincount(best, minlength=T), counts):
        return best
    if m * m <= DENSE_LIMIT * DENSE_LIMIT:
        from scipy.optimize import linear_sum_assignment  # only here: a fifo run never loads SciPy

        slot_type = np.repeat(np.arange(T), counts)
        rows, cols = linear_sum_assignment(weight[:, slot_type], maximize=True)
        out = np.empty(m, dtype=np.int64)
        out[rows] = slot_type[cols]
        return out
    return _transport_lp(weight, counts)


def _transport_lp(weight: np.ndarray, counts: np.ndarray) -> np.ndarray:
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    m, T = weight.shape
    u, t = np.nonzero(weight > _FORBIDDEN / 2)
    V = u.size
    cols = np.arange(V)
    a = csr_matrix((np.ones(2 * V), (np.concatenate([u, m + t]), np.concatenate([cols, cols]))), shape=(m + T, V))
    b = np.concatenate([np.ones(m), counts.astype(float)])
    res = linprog(-weight[u, t], A_eq=a, b_eq=b, bounds=(0, 1), method="highs-ds")
    if res.status != 0:
        raise RuntimeError(f"type assignment LP failed: {res.message}")
    x = np.rint(res.x)
    out = np.full(m, -1, dtype=np.int64)
    on = x > 0.5
    out[u[on]] = t[on]
    if (out < 0).any() or not np.array_equal(np.bincount(out, minlength=T), counts):
        raise RuntimeError("type assignment LP returned a fractional or infeasible vertex")
    return out


def assign_usage(weight: np.ndarray, sizes: np.ndarray, advised: np.ndarray) -> np.ndarray:
    """Type of each unit maximising the total weight with each type's GPUs in use as advised.

    The policy's fill uses ``used[t]`` GPUs of each type t (``advised`` with the units' gang
    ``sizes``). The per-unit best types are taken when they use each type so; otherwise each gang
    size keeps the policy's number of units on each type (:func:`assign_block`), which keeps those
    numbers too, so no GPU the policy would have kept busy falls idle.
    """
    T = weight.shape[1]
    used = np.bincount(advised, weights=sizes, minlength=T).astype(np.int64)
    best = np.argmax(weight, axis=1)
    if np.array_equal(np.bincount(best, weights=sizes, minlength=T).astype(np.int64), used):
        return best
    out = advised.copy()
    for k in np.unique(sizes).tolist():
        idx = np.flatnonzero(sizes == k)
        out[idx] = assign_block(weight[idx], np.bincount(advised[idx], minlength=T))
    return out
