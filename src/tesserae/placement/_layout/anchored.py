"""The anchored layout: every running job stays where it ran; the new jobs are laid out around them.

Each logical node starts as the group of continuing jobs that shared a physical node last round,
anchored to that node, so the matching of logical to physical nodes is the identity: an anchored
node holds exactly what its jobs held there, the largest weight any physical node can give it, and
no solver runs. The new jobs (largest first, then by priority) are laid out around the running ones
in three tries, each only when the one before found no room for some job:

1. consolidated best fit into the free GPUs (``best_fit_around``);
2. an exact packing of the new jobs around the running ones, bounded (``exact.exact_fit``);
3. new jobs one by one, largest first: a job that finds no room *evicts* the cheapest continuing
   jobs (``eviction.CheapestEviction``), which are laid out again as new jobs; a job that still
   finds no consolidated room is spread over the nodes with the most free GPUs, after the others.

When no new job has to evict anything, no continuing job moves at all.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping

import numpy as np

from tesserae.placement._layout.eviction import CheapestEviction
from tesserae.placement._layout.exact import exact_fit
from tesserae.placement._layout.gpu_choice import choose_gpus
from tesserae.placement._layout.held import HeldParts, continuing, held_parts
from tesserae.placement._layout.nodes import Parts, TypeLayout, TypeNodes
from tesserae.placement._layout.pool import BinPool


def anchored_layout(nodes: TypeNodes, hosts: list[int], size: Mapping[int, int],
                    prev: Mapping[int, tuple[int, ...]], held: HeldParts | None = None) -> TypeLayout:
    """The anchored layout of ``hosts`` (priority order); ``prev``: the continuing ones' GPUs."""
    if held is None:
        held = held_parts(nodes, continuing(hosts, prev), prev)
    usage = held.usage(nodes.nodes.size)
    avail = nodes.cap - usage
    new_rows = sorted((r for r in hosts if r not in prev), key=lambda r: -size[r])  # stable: priority
    placed = best_fit_around(nodes.cap, avail, new_rows, size)
    if placed is None:
        placed = exact_fit(nodes.cap, avail, new_rows, size)
    used = np.zeros(nodes.cluster.num_gpus, dtype=bool)  # the GPUs the kept jobs hold
    used[held.gpus] = True
    if placed is not None:
        gpus = choose_gpus(nodes, placed, prev, held.rows, used)
        return TypeLayout(gpus, set(), set(), "anchored", 0)
    return _evicting(nodes, hosts, new_rows, size, prev, held, avail, usage, used)


def best_fit_around(cap: np.ndarray, avail: np.ndarray, rows: list[int], size: Mapping[int, int]
                    ) -> dict[int, Parts] | None:
    """Best fit of ``rows`` (in the order given) into the ``avail`` free GPUs; None if one does not fit."""
    pool = BinPool(cap, avail)
    placed: dict[int, Parts] = {}
    for r in rows:
        parts = pool.consolidated(size[r])
        if parts is None:
            return None
        placed[r] = parts
    return placed


def _evicting(nodes: TypeNodes, hosts: list[int], new_rows: list[int], size: Mapping[int, int],
              prev: Mapping[int, tuple[int, ...]], held: HeldParts, avail: np.ndarray, usage: np.ndarray,
              used: np.ndarray) -> TypeLayout:
    """Step 3 of the module docstring: new jobs one by one, evicting where one finds no room.

    ``used`` masks the GPUs the continuing jobs hold (the evicted ones' are cleared here).
    """
    pool = BinPool(nodes.cap, avail)
    kept = set(held.rows)
    evictor = CheapestEviction(pool, held, usage.copy())
    seq = itertools.count()
    queue = [(-size[r], next(seq), r) for r in new_rows]
    heapq.heapify(queue)
    placed: dict[int, Parts] = {}
    spread: set[int] = set()
    evicted: set[int] = set()
    pending_spread: list[int] = []
    while queue:
        _, _, row = heapq.heappop(queue)
        k = size[row]
        parts = pool.consolidated(k)
        if parts is None:
            victims = evictor.make_room(k)
            for v in victims:
                kept.discard(v)
                evicted.add(v)
                heapq.heappush(queue, (-size[v], next(seq), v))
            parts = pool.consolidated(k) if victims else None
        if parts is None:
            pending_spread.append(row)
            continue
        placed[row] = parts
    for row in pending_spread:
        placed[row] = pool.spread(size[row])
        spread.add(row)
    keep_whole = [r for r in hosts if r in kept]
    for r in evicted:
        used[list(prev[r])] = False
    gpus = choose_gpus(nodes, placed, prev, keep_whole, used)
    moved = {r for r in evicted if gpus[r] != prev[r]}  # the kept ones keep their GPUs
    return TypeLayout(gpus, moved, spread, "anchored", len(evicted))
