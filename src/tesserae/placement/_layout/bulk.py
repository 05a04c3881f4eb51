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


def applies(uniform: bool, total: int, node_size: int) -> bool:
    """Whether a unit of ``total`` GPUs may start a bulk step (nodes of one size ``node_size``)."""
    return uniform and 2 * total > node_size and total <= node_size


def onto_empty_nodes(pool: BinPool, total: int, run_left: int) -> list[int]:
    """Up to ``run_left`` units of ``total`` GPUs, each on its own empty node (taken from ``pool``),
    when the best fit for the first is an empty node: their nodes in order; [] otherwise."""
    b = pool.best_single(total)
    if b < 0 or pool.avail[b] != pool.gmax:
        return []
    empty = np.flatnonzero(pool.avail == pool.gmax)[:run_left]
    pool.take_each(empty, total)
    return empty.tolist()
