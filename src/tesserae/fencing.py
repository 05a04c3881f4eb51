"""A decision under fences (``core.fences``): closed GPUs and pinned jobs, around any placement.

No placement knows of fences; the scheduler keeps them by what it hands the placement:

1. **Runs on closed GPUs go on.** A job running on a GPU that is now closed (a drained node, an
   unhealthy GPU) keeps its assignment, and its partner's, untouched: it is not offered to the
   placement, so nothing can move or stop it for another job's sake (Slurm's drain).
2. **Pinned jobs are placed here**, in the policy's order, before the placement runs: a walk of
   the order counts the GPUs every gang ahead claims (a pinned job is admitted only where the
   unpinned jobs ahead of it still fit the cluster's open GPUs, so priority holds), and gives each
   pinned job GPUs of its own nodes only: those it holds, if they are still open, else free ones
   before those of lower-priority runs (never those of a run ahead of it), fewest nodes first.
3. **Everything else is the placement's**, on the cluster's part that is left (open GPUs not taken
   above; nodes keep their GPU type numbers), with the previous assignments, the order and the
   advice restricted to the rows it decides. Its GPU ids map back to the whole cluster's.

So every placement, and every bulk shortcut it has (``BulkKeeper``, ``BulkAdmitter``), sees only
GPUs and jobs it may use: no pinned job can land elsewhere, no new run on a closed GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from tesserae.allocator import Allocator
from tesserae.core.advice import Advice
from tesserae.core.cluster import Cluster, Node
from tesserae.core.fences import Fences
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment

#: Places the unfenced rest: (cluster part, allocator, order, advice, previous) -> assignments.
PlaceRest = Callable[[Cluster, Allocator, np.ndarray, Advice, Mapping[int, Assignment]], dict[int, Assignment]]


def part_of(cluster: Cluster, open_gpus: np.ndarray) -> tuple[Cluster | None, np.ndarray]:
    """The cluster's part made of ``open_gpus`` (a flag per global id), and its GPUs' global ids.

    Each node keeps its open GPUs (in id order), its type number and its rack; a node with none
    left is not in it. None when no GPU is open."""
    ids = np.flatnonzero(open_gpus)
    if ids.size == 0:
        return None, ids
    per_node = np.bincount(cluster.gpu_node[ids], minlength=cluster.num_nodes)
    nodes, first = [], 0
    for node in np.flatnonzero(per_node).tolist():
        k = int(per_node[node])
        src = cluster.nodes[node]
        nodes.append(Node(len(nodes), src.gpu_type, k, src.rack, first))
        first += k
    return Cluster(nodes, gpu_types=cluster.gpu_types), ids


def fenced_place(cluster: Cluster, table: JobTable, order: np.ndarray, advice: Advice,
                 previous: Mapping[int, Assignment], fences: Fences, now: float, no_backfill: bool,
                 place_rest: PlaceRest, may_run: Callable[[int], tuple[int, ...]]) -> dict[int, Assignment]:
    """The assignments of a fenced decision (module docstring); ``may_run(row)``: the GPU types a job
    may run on (those its profile gives a rate, of the type it asks for), as any placement keeps to."""
    n = cluster.num_gpus
    closed = np.zeros(n, dtype=bool) if fences.closed is None else np.asarray(fences.closed, dtype=bool)
    taken = closed.copy()
    out: dict[int, Assignment] = {}
    for r, a in previous.items():  # 1. runs on closed GPUs go on, with their partners
        if closed[list(a.gpus)].any():
            for row in (r, a.partner):
                if row is not None and row in previous:
                    out[row] = previous[row]
                    taken[list(previous[row].gpus)] = True
    pinned = {r: nodes for r, nodes in fences.pinned.items() if r not in out}
    out.update(_place_pinned(cluster, table, order, advice, previous, pinned, taken, no_backfill, set(out), may_run))
    # 3. the rest, on what is left
    part, ids = part_of(cluster, ~taken)
    if part is None:
        return out
    leave = np.fromiter([*out, *pinned], dtype=np.int64)
    to_part = np.full(n, -1, dtype=np.int64)
    to_part[ids] = np.arange(ids.size)
    left = set(leave.tolist())
    rest_prev: dict[int, Assignment] = {}
    for r, a in previous.items():
        if r in left or (to_part[list(a.gpus)] < 0).any():
            continue  # the placement sees this run as not running: it may start it elsewhere, or stop it
        partner = a.partner if a.partner is not None and a.partner not in left else None
        rest_prev[r] = Assignment(r, tuple(to_part[list(a.gpus)].tolist()), partner, a.strategy)
    rest_order = order[~np.isin(order, leave)]
    overflow = None if advice.overflow is None else advice.overflow[~np.isin(advice.overflow, leave)]
    rest_advice = dataclasses.replace(
        advice, order=rest_order, overflow=overflow,
        gpu_type={r: t for r, t in advice.gpu_type.items() if r not in left},
        pairs=[p for p in advice.pairs if p[0] not in left and p[1] not in left])
    allocator = Allocator(table, rest_prev, now, no_backfill)
    for r, a in place_rest(part, allocator, rest_order, rest_advice, rest_prev).items():
        gpus = tuple(ids[list(a.gpus)].tolist())
        old = previous.get(r)
        same = old is not None and old.gpus == gpus and old.partner == a.partner and old.strategy == a.strategy
        out[r] = old if same and old is not None else Assignment(r, gpus, a.partner, a.strategy)
    return out


def _place_pinned(cluster: Cluster, table: JobTable, order: np.ndarray, advice: Advice,
                  previous: Mapping[int, Assignment], pinned: Mapping[int, tuple[int, ...]], taken: np.ndarray,
                  no_backfill: bool, fixed: set[int], may_run: Callable[[int], tuple[int, ...]]
                  ) -> dict[int, Assignment]:
    """2. of the module docstring: GPUs for the pinned rows of ``order`` (``taken`` is updated)."""
    out: dict[int, Assignment] = {}
    if not pinned or order.size == 0:
        return out
    is_pinned = np.isin(order, np.fromiter(pinned, dtype=np.int64))
    if not is_pinned.any():
        return out
    last = int(np.flatnonzero(is_pinned)[-1])
    position = {r: i for i, r in enumerate(order.tolist())}
    unranked = order.size  # a run the policy did not rank comes after every ranked one
    holder = np.full(cluster.num_gpus, -1, dtype=np.int64)  # position of the run that held each GPU; -1: none
    for r, a in previous.items():
        if r not in fixed:
            holder[list(a.gpus)] = position.get(r, unranked)
    free_total = int((~taken).sum())
    gangs = table.num_gpus[order[:last + 1]].tolist()
    for pos, (row, k) in enumerate(zip(order[:last + 1].tolist(), gangs, strict=True)):
        if row in fixed:
            continue
        if row not in pinned:  # an unpinned gang ahead: it claims its GPUs somewhere
            if k <= free_total:
                free_total -= k
            elif no_backfill:
                break
            continue
        chosen = _choose(cluster, k, pos, pinned[row], may_run(row), previous.get(row), taken, holder) \
            if k <= free_total else None
        if chosen is None:
            if no_backfill:
                break
            continue
        gpus, kept = chosen
        taken[list(gpus)] = True
        free_total -= k
        prev = previous.get(row)
        out[row] = prev if kept and prev is not None and prev.partner is None else Assignment(row, gpus)
    return out


def _choose(cluster: Cluster, k: int, rank: int, nodes: tuple[int, ...], types: tuple[int, ...],
            prev: Assignment | None, taken: np.ndarray, holder: np.ndarray) -> tuple[tuple[int, ...], bool] | None:
    """``k`` open GPUs of one of ``types`` on ``nodes`` for a pinned row, and whether they are the ones it
    holds; None: too few."""
    if not nodes or not types:
        return None
    allowed = np.isin(cluster.gpu_node, np.asarray(nodes, dtype=np.int64)) & ~taken
    allowed &= np.isin(cluster.gpu_type, np.asarray(types, dtype=np.int64))
    if prev is not None and len(prev.gpus) == k and allowed[list(prev.gpus)].all():
        return prev.gpus, True
    ids = np.flatnonzero(allowed)
    h = holder[ids]
    ids = ids[(h < 0) | (h >= rank)]  # never the GPUs of a run ahead of it: they keep them (its own: h == rank)
    counts = np.bincount(cluster.gpu_type[ids], minlength=len(cluster.gpu_types))
    fit = np.flatnonzero(counts >= k)
    if fit.size == 0:
        return None
    kind = int(fit[np.argmax(counts[fit])])  # a gang runs on one GPU type: the one with the most room
    ids = ids[cluster.gpu_type[ids] == kind]
    mine = np.zeros(cluster.num_gpus, dtype=bool)
    if prev is not None:
        mine[list(prev.gpus)] = True
    h = holder[ids]
    score = np.where(mine[ids], 0, np.where(h < 0, 1, 2))  # its own GPUs, then free ones, then a later run's
    node = cluster.gpu_node[ids]
    on_node = np.bincount(node, minlength=cluster.num_nodes)[node]
    pick = ids[np.lexsort((ids, -on_node, score))[:k]]
    return tuple(np.sort(pick).tolist()), False
