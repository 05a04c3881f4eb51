"""The bulk step of the regrouped packing: a run of large units onto empty nodes, all at once.

On a GPU type whose nodes all have one size, units come largest first. When a unit needs more than
half a node (and fits one) and its best fit is an empty node, no node is partly filled with room
for that size, and filling empty nodes makes none (two units over half a node never share one): so
the rest of the run of units of that size takes the empty nodes in position order, exactly as one
unit after another would, in one NumPy step.
"""

from __future__ import annotations

import numpy as np

from tesserae.placement._layout.pool import BinPool


def unit_sizes(uniform: bool, node_size: int) -> tuple[int, int]:
    """(smallest, largest) GPU count of a unit that may start a bulk step: over half a node, at most
    a node, on a type whose nodes all have ``node_size`` GPUs; an empty range otherwise."""
    return (node_size // 2 + 1, node_size) if uniform else (1, 0)


def onto_empty_nodes(pool: BinPool, total: int, run_left: int) -> list[int]:
    """Up to ``run_left`` units of ``total`` GPUs, each on its own empty node (taken from ``pool``),
    when the best fit for the first is an empty node: their nodes in order; [] otherwise."""
    b = pool.best_single(total)
    if b < 0 or pool.avail[b] != pool.gmax:
        return []
    empty = np.flatnonzero(pool.avail == pool.gmax)[:run_left]
    pool.take_each(empty, total)
    return empty.tolist()
