"""The anchored layout's second try: an exact packing of the new jobs around the running ones.

When best fit (largest first) leaves a new job without room, a packing may still exist. Multi-node
jobs take whole nodes first (as in best fit); the single-node jobs are then packed by depth-first
branch and bound, largest first, trying each distinct free count once (nodes with the same free count
are interchangeable), smallest first, and backing out as soon as the jobs left need more GPUs than
are free. The search is bounded (``EXACT_BUDGET`` steps, ``EXACT_MAX_JOBS`` jobs) so that a
decision's cost stays bounded; past the bound the anchored layout evicts instead.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

import numpy as np

from tesserae.placement._layout.nodes import Parts
from tesserae.placement._layout.pool import BinPool

#: Search steps of the exact packing before giving up (keeps a decision's cost bounded).
EXACT_BUDGET = 20_000
#: Largest number of single-node jobs the exact search takes on.
EXACT_MAX_JOBS = 48


def exact_fit(cap: np.ndarray, avail: np.ndarray, rows: list[int], size: Mapping[int, int]
              ) -> dict[int, Parts] | None:
    """An exact packing of ``rows`` into the ``avail`` free GPUs of each node; None if none within budget."""
    pool = BinPool(cap, avail)
    placed: dict[int, Parts] = {}
    small = []
    for r in rows:
        if size[r] > pool.gmax:
            parts = pool.consolidated(size[r])
            if parts is None:
                return None
            placed[r] = parts
        else:
            small.append(r)
    if len(small) > EXACT_MAX_JOBS:
        return None
    ks = [size[r] for r in small]
    search = _SingleNodeSearch(pool, ks)
    if not search.run(0):
        return None
    for r, k, b in zip(small, ks, search.choice, strict=True):
        placed[r] = [(b, k)]
    return placed


class _SingleNodeSearch:
    """Branch and bound over the node of each single-node job (see module docstring)."""

    def __init__(self, pool: BinPool, ks: list[int]) -> None:
        self.ks = ks
        self.choice = [-1] * len(ks)
        self.budget = EXACT_BUDGET
        #: GPUs the jobs from i on need: the search backs out when fewer are free.
        self.suffix = [*np.cumsum(ks[::-1])[::-1].tolist(), 0]
        # The nodes of each free count, by index (the first one of a count is the one tried), and the
        # total free: kept up to date as the search takes and gives back GPUs.
        self.gmax = pool.gmax
        self.by_free = [np.flatnonzero(pool.avail == v).tolist() for v in range(self.gmax + 1)]
        self.total = pool.total()

    def _move(self, b: int, old: int, new: int) -> None:
        lst = self.by_free[old]
        del lst[bisect.bisect_left(lst, b)]
        bisect.insort(self.by_free[new], b)

    def run(self, i: int) -> bool:
        """Place jobs ``i``.. (``choice``); False when no packing exists or the budget is spent."""
        if i == len(self.ks):
            return True
        self.budget -= 1
        if self.budget < 0 or self.total < self.suffix[i]:
            return False
        k = self.ks[i]
        by_free = self.by_free
        for v, b in [(v, by_free[v][0]) for v in range(k, self.gmax + 1) if by_free[v]]:
            self._move(b, v, v - k)
            self.total -= k
            self.choice[i] = b
            if self.run(i + 1):
                return True
            self._move(b, v - k, v)
            self.total += k
        return False
