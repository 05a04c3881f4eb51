"""GPUs per queue for one round: guarantees first, then idle quota lent by weighted max-min.

Top down through the tree, each queue's GPUs are split among its children:

1. every child gets ``min(guarantee, demand)``;
2. what is left is lent to the children whose demand is not met, extra_i = min(room_i, w_i x L)
   with the water level L chosen so the extras use it all (weighted max-min), where room_i is
   what the child still wants up to its limit (guarantee + borrowing limit);
3. the real-valued extras are rounded to whole GPUs: floors, then one GPU each to the largest
   remainders (ties: config order), so the result is deterministic and never exceeds the amount.

Demand is the GPUs the queue's jobs ask for (running and waiting), so quota idle for lack of
demand is exactly what gets lent, and it comes back the round the lender's jobs arrive: the
lender's guarantee is served first, and a borrower whose budget shrinks loses its lowest-ranked
jobs (see ``tesserae.scheduler_queues``). If the GPUs a queue has fall below its children's
guarantees (a node died), they are shared in proportion to the guarantees.
"""

from __future__ import annotations

import numpy as np

from tesserae.core.queues import QueueTree


def water_fill(amount: float, room: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Extras x_i = min(room_i, w_i x L) summing to min(amount, sum(room)) (real-valued)."""
    room = np.maximum(room, 0.0)
    total = float(room.sum())
    if amount >= total:
        return room.astype(np.float64)
    if amount <= 0 or room.size == 0:
        return np.zeros(room.size)
    ratio = room / weight
    idx = np.argsort(ratio, kind="stable")
    r, w, rm = ratio[idx], weight[idx], room[idx]
    # Filling to level r[k] saturates rows 0..k: used(k) = sum(room[:k+1]) + r[k] * sum(w[k+1:]).
    w_after = np.concatenate([np.cumsum(w[::-1])[::-1][1:], [0.0]])
    used = np.cumsum(rm) + r * w_after
    k = int(np.searchsorted(used, amount, side="left"))  # first level that would use it all
    sat = np.cumsum(rm)[k - 1] if k > 0 else 0.0
    level = (amount - sat) / float(w[k:].sum())
    return np.minimum(room, weight * level)


def round_shares(amount: int, exact: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Whole GPUs from real shares: floors, then +1 to the largest remainders that have room."""
    out = np.floor(exact + 1e-9).astype(np.int64)
    out = np.minimum(out, cap)
    left = int(amount - out.sum())
    if left > 0:
        frac = exact - out
        can = out < cap
        cand = np.flatnonzero(can)
        if cand.size:
            pick = cand[np.lexsort((cand, -frac[cand]))][:left]
            out[pick] += 1
    return out


def split(amount: int, demand: np.ndarray, guarantee: np.ndarray, limit: np.ndarray,
          weight: np.ndarray) -> np.ndarray:
    """Whole GPUs for each child of a queue that holds ``amount`` GPUs (see module docstring)."""
    want = np.minimum(demand.astype(np.float64), limit).astype(np.int64)  # an infinite limit leaves demand
    base = np.minimum(guarantee, want)
    if base.sum() >= amount:  # short of guarantees: share what there is in proportion to them
        exact = water_fill(float(amount), base.astype(np.float64), np.maximum(guarantee, 1).astype(np.float64))
        return round_shares(amount, exact, base)
    rest = amount - int(base.sum())
    extra = water_fill(float(rest), (want - base).astype(np.float64), weight)
    return base + round_shares(int(min(rest, int((want - base).sum()))), extra, want - base)


def queue_budgets(tree: QueueTree, leaf_demand: np.ndarray, capacity: int) -> np.ndarray:
    """GPUs per node for this round (leaves and inner queues), from each leaf's demand in GPUs."""
    n = tree.num_nodes
    demand = np.zeros(n, dtype=np.int64)
    leaves = np.asarray(tree.leaves, dtype=np.int64)
    demand[leaves] = leaf_demand
    for node in reversed(tree.order):  # children before parents
        kids = tree.children[node]
        if kids:
            demand[node] = demand[list(kids)].sum()
    budget = np.zeros(n, dtype=np.int64)
    groups: list[tuple[int, tuple[int, ...]]] = [(int(capacity), tree.top)]
    groups += [(-1 - node, kids) for node in tree.order if (kids := tree.children[node])]
    for amount_or_node, kids in groups:
        amount = amount_or_node if amount_or_node >= 0 else int(budget[-1 - amount_or_node])
        k = np.asarray(kids, dtype=np.int64)
        budget[k] = split(amount, demand[k], tree.guarantee[k], tree.limit[k], tree.weight[k])
    return budget
