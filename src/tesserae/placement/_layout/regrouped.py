"""The regrouped layout: everything packed from scratch, then matched back to where it ran.

The units (``units``: the single-node continuing jobs of one previous node together, every other
job alone) are bin-packed onto logical nodes, largest first, by consolidated best fit (with the
``bulk`` step for runs of large units on nodes of one size), without looking at where anything ran;
a unit that does not fit as one is laid out job by job afterwards, and a job with no consolidated
room is spread. Logical nodes are then mapped to physical nodes by maximum-weight matching
(``matching``), and the GPU choice keeps every continuing job's GPUs that it can (``gpu_choice``).

It is the alternative to the anchored layout, built only when that one moved or spread a job, and
abandoned as soon as its lower bound of moves (``move_bound``) shows that it cannot beat the
anchored one: during the packing when the anchored layout spread nobody (then only fewer moves
win), else after it, comparing (spread jobs, bound) as the layouts themselves are compared. Either
way the rest (matching, GPU choice) could not change which layout is kept. On a large cluster the
anchored layout moves a few jobs where packing from scratch would move hundreds, so the matching
and the GPU choice of this layout are almost never needed.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

import numpy as np

from tesserae.placement._layout import bulk
from tesserae.placement._layout.gpu_choice import choose_gpus
from tesserae.placement._layout.held import HeldParts, continuing, held_parts
from tesserae.placement._layout.matching import match_nodes
from tesserae.placement._layout.move_bound import MoveBound
from tesserae.placement._layout.nodes import Parts, TypeLayout, TypeNodes
from tesserae.placement._layout.pool import BinPool
from tesserae.placement._layout.units import Units, regrouped_units

#: Where a unit went: its parts (one job), its logical node (a group, or one job on one node), or
#: None (left over, laid out job by job).
Where = Parts | int | None


def regrouped_layout(nodes: TypeNodes, hosts: list[int], size: Mapping[int, int],
                     prev: Mapping[int, tuple[int, ...]], held: HeldParts | None = None,
                     to_beat: tuple[int, int] | None = None) -> TypeLayout | None:
    """The regrouped layout of ``hosts`` (priority order); None once it cannot beat ``to_beat`` =
    (spread, moved) of the anchored layout (see module docstring)."""
    if held is None:
        held = held_parts(nodes, continuing(hosts, prev), prev)
    units = regrouped_units(hosts, size, held)
    # Stop inside the packing only when the anchored layout spread nobody: then only fewer moves win.
    stop_at = to_beat[1] if to_beat is not None and to_beat[0] == 0 else None
    bound = MoveBound(nodes.nodes.size)
    pool = BinPool(nodes.cap)
    packed = pack_units(pool, units, nodes.uniform, bound, stop_at)
    if packed is None:
        return None
    at, left_units = packed
    leftovers, left_parts, spread = lay_out_leftovers(pool, units, left_units, hosts, size, bound)
    if to_beat is not None and (len(spread), bound.moves) >= to_beat:
        return None
    logical = _logical_layout(units, at, size)
    logical.update(zip(leftovers, left_parts, strict=True))
    return _on_physical_nodes(nodes, logical, held, prev, spread)


def pack_units(pool: BinPool, units: Units, uniform: bool, bound: MoveBound, stop_at: int | None
               ) -> tuple[list[Where], list[int]] | None:
    """Where each unit went (largest first, best fit) and the units left over; None as soon as the
    bound reaches ``stop_at``."""
    totals, counts, srcs = units.total, units.count, units.node
    at: list[Where] = [None] * len(totals)
    left_units: list[int] = []
    # Where each run of units of one size ends (units come largest first).
    run_ends = [*(np.flatnonzero(np.diff(totals)) + 1).tolist(), len(totals)]
    bulk_min, bulk_max = bulk.unit_sizes(uniform, pool.gmax)
    add = bound.add
    i = 0
    while i < len(totals):
        total, m, src = totals[i], counts[i], srcs[i]
        if bulk_min <= total <= bulk_max:
            end = run_ends[bisect.bisect_right(run_ends, i)]
            taken = bulk.onto_empty_nodes(pool, total, end - i)
            if taken:
                at[i:i + len(taken)] = taken
                for node_b, jobs_m, src_b in zip(taken, counts[i:end], srcs[i:end], strict=False):
                    if src_b >= 0:  # alone on its logical node: adds nothing to the bound
                        add(node_b, src_b, jobs_m)
                i += len(taken)
                continue
        if m == 1:
            parts = pool.consolidated(total)
            if parts is None:
                left_units.append(i)
                i += 1
                continue
            at[i] = parts
            b = parts[0][0]
        else:
            b = pool.best_single(total)
            if b < 0:
                left_units.append(i)  # the group does not fit as one: its jobs go one by one
                i += 1
                continue
            pool.change(b, -total)
            at[i] = b
        i += 1
        if src >= 0:
            add(b, src, m)
            if stop_at is not None and bound.moves >= stop_at:
                return None
    return at, left_units


def lay_out_leftovers(pool: BinPool, units: Units, left_units: list[int], hosts: list[int],
                      size: Mapping[int, int], bound: MoveBound) -> tuple[list[int], list[Parts], set[int]]:
    """The jobs of the units left over, one by one, largest first, then by priority: (those jobs,
    their parts, the ones spread for want of a consolidated layout)."""
    flat, off, srcs = units.rows, units.start, units.node
    rank = {r: j for j, r in enumerate(hosts)} if left_units else {}
    left_node = {r: srcs[u] for u in left_units for r in flat[off[u]:off[u + 1]]}
    leftovers = sorted(left_node, key=lambda r: (-size[r], rank[r]))
    left_parts: list[Parts] = []
    spread: set[int] = set()
    for r in leftovers:
        parts = pool.consolidated(size[r])
        if parts is None:
            parts = pool.spread(size[r])
            spread.add(r)
        elif left_node[r] >= 0:
            bound.add(parts[0][0], left_node[r], 1)
        left_parts.append(parts)
    return leftovers, left_parts, spread


def _logical_layout(units: Units, at: list[Where], size: Mapping[int, int]) -> dict[int, Parts]:
    """The packed units' jobs on logical nodes (positions before the matching)."""
    flat, off = units.rows, units.start
    logical: dict[int, Parts] = {}
    for u, where in enumerate(at):
        if where is None:
            continue
        rows = flat[off[u]:off[u + 1]]
        if isinstance(where, list):
            logical[rows[0]] = where
        else:
            for r in rows:
                logical[r] = [(where, size[r])]
    return logical


def _on_physical_nodes(nodes: TypeNodes, logical: dict[int, Parts], held_parts: HeldParts,
                       prev: Mapping[int, tuple[int, ...]], spread: set[int]) -> TypeLayout:
    """The logical layout matched to physical nodes, with GPUs chosen."""
    held = held_parts.by_row()
    mapping = match_nodes(nodes, logical, held).tolist()
    # A continuing job whose parts land exactly on the nodes and counts it held keeps all its GPUs
    # (previous GPUs of different jobs are disjoint, so no other job can take one of them first):
    # only the others go through the per-GPU choice.
    placed: dict[int, Parts] = {}
    stay: list[int] = []
    for r, parts in logical.items():
        now = [(mapping[b], c) for b, c in parts]
        h = held.get(r)
        if h is not None and (now == h or (len(now) > 1 and sorted(now) == h)):
            stay.append(r)
        else:
            placed[r] = now
    gpus = choose_gpus(nodes, placed, prev, stay)
    for r in stay:
        g = gpus[r]
        s = tuple(sorted(g))
        if s != g:
            gpus[r] = s
    moved = {r for r in held_parts.rows if gpus[r] != prev[r]}
    return TypeLayout(gpus, moved, spread, "regrouped", 0)
