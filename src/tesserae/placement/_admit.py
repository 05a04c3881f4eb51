"""The allocator's skip-and-continue walk over gang sizes, in bulk (shared by the one-type placements)."""

from __future__ import annotations

import numpy as np


def fit_in_order(gangs: np.ndarray, free: int) -> tuple[np.ndarray, int]:
    """Positions of the gangs admitted by a walk that takes each gang no larger than what is left
    (skip and continue), and what is left after it.

    Runs of gangs that fit one after another are taken by one cumulative sum; after a gang that
    does not fit, only the gangs no larger than what is left are looked at again.
    """
    cand = np.flatnonzero(gangs <= free)
    taken: list[np.ndarray] = []
    while cand.size and free > 0:
        cum = np.cumsum(gangs[cand])
        n = int(np.searchsorted(cum, free, side="right"))
        if n:
            taken.append(cand[:n])
            free -= int(cum[n - 1])
        cand = cand[n:]
        cand = cand[gangs[cand] <= free]
    return (np.concatenate(taken) if taken else np.empty(0, dtype=np.int64)), free
