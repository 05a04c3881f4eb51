"""GPU choice: turn each job's node positions and counts into GPU ids, keeping what it held.

A job kept whole keeps its GPUs. Every other continuing job first keeps, on each node it is given,
as many of its previous GPUs there as its part allows; then each (job, node, count) still to fill
takes that node's lowest free GPUs, in the order of the jobs, as one job after another would, but
handed out for all jobs at once in NumPy (offsets per node by a stable sort). A mask of the taken
GPUs is built in one NumPy step; the per-job work is on plain lists (a job touches a few GPUs, where
NumPy's per-call overhead costs more than the work).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from tesserae.placement._layout.nodes import Parts, TypeNodes


def choose_gpus(nodes: TypeNodes, placed: Mapping[int, Parts], prev: Mapping[int, tuple[int, ...]],
                keep_whole: list[int], used: np.ndarray | None = None) -> dict[int, tuple[int, ...]]:
    """The GPU ids of every job: ``keep_whole`` rows keep theirs; the ``placed`` ones (node positions
    and counts) keep what they can of theirs, then take their nodes' lowest free GPUs.

    ``used`` (updated here): the cluster's GPUs held by ``keep_whole``, if the caller has them.
    """
    if used is None:
        used = np.zeros(nodes.cluster.num_gpus, dtype=bool)
        n = sum(len(prev[r]) for r in keep_whole)
        used[np.fromiter(itertools.chain.from_iterable(prev[r] for r in keep_whole), dtype=np.int64,
                         count=n)] = True
    node_of = nodes.gpu_node
    out: dict[int, tuple[int, ...]] = {r: prev[r] for r in keep_whole}
    rest: dict[int, list[tuple[int, int]]] = {}
    chosen: dict[int, list[int]] = {}
    node_list = nodes.node_list
    for r, parts in placed.items():
        old = prev.get(r)
        if not old:
            rest[r] = parts
            chosen[r] = []
            continue
        todo = []
        mine: list[int] = []
        for b, c in parts:
            node = node_list[b]
            here = [g for g in old if node_of[g] == node and not used[g]][:c]
            if here:
                used[here] = True
                mine.extend(here)
                c -= len(here)
            if c:
                todo.append((b, c))
        chosen[r] = mine
        rest[r] = todo
    # Then each (job, node, count) still to fill takes the next free GPUs of its node, lowest
    # first, in the order of ``rest`` (as one job after another would), all at once in NumPy.
    rows = list(rest)
    n_parts = [len(todo) for todo in rest.values()]
    part_b = np.fromiter((b for todo in rest.values() for b, _ in todo), dtype=np.int64, count=sum(n_parts))
    part_c = np.fromiter((c for todo in rest.values() for _, c in todo), dtype=np.int64, count=part_b.size)
    got = take_free(nodes, part_b, part_c, used)
    per_row = np.zeros(len(rows), dtype=np.int64)
    if part_b.size:
        np.add.at(per_row, np.repeat(np.arange(len(rows)), n_parts), part_c)
    cut = [0, *np.cumsum(per_row).tolist()]
    for i, r in enumerate(rows):
        mine = chosen[r]
        taken = got[cut[i]:cut[i + 1]]
        # One part and nothing kept: a run of one node's ascending free GPUs, already sorted.
        out[r] = tuple(taken) if not mine and n_parts[i] == 1 else tuple(sorted(mine + taken))
    return out


def take_free(nodes: TypeNodes, part_b: np.ndarray, part_c: np.ndarray, used: np.ndarray) -> list[int]:
    """For each part (node position, count) in order, the next ``count`` GPUs of that node not in
    ``used``, lowest first; the parts' GPUs concatenated in the parts' order."""
    if part_b.size == 0:
        return []
    touched, inv = np.unique(part_b, return_inverse=True)
    inv = inv.ravel()
    caps = nodes.cap[touched]
    ends = np.cumsum(caps)
    gpu = np.arange(int(ends[-1])) + np.repeat(nodes.first[touched] - (ends - caps), caps)
    free = gpu[~used[gpu]]  # each touched node's free GPUs, ascending, node after node
    n_free = np.add.reduceat((~used[gpu]).astype(np.int64), ends - caps)
    free_start = np.cumsum(n_free) - n_free
    # Offset of each part within its node's free GPUs: what the parts before it on that node took.
    order = np.argsort(inv, kind="stable")
    c_sorted = part_c[order]
    before = np.cumsum(c_sorted) - c_sorted
    first_of_node = np.r_[True, inv[order][1:] != inv[order][:-1]]
    node_base = np.maximum.accumulate(np.where(first_of_node, before, 0))
    offset = np.empty_like(part_c)
    offset[order] = before - node_base
    assert (offset + part_c <= n_free[inv]).all(), "layout gave a node more GPUs than it has free"
    part_end = np.cumsum(part_c)
    idx = np.arange(int(part_end[-1])) + np.repeat(free_start[inv] + offset - (part_end - part_c), part_c)
    return free[idx].tolist()
