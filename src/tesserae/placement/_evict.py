"""Evicting in the policy's rank order (DESIGN §4.4): placements that hold running jobs' GPUs.

``consolidated``, ``tiresias`` and ``yarn`` keep a running job on its GPUs until a job ahead of it
in the policy's order needs them. When a new job can be laid out only over GPUs held for running
jobs not yet admitted, which of those jobs lose their GPUs must follow the policy's order, not the
layout's convenience, so that a comparison between placements changes only the placement:

- the node (or nodes) taken is the one whose eviction spares the higher-ranked jobs: the best
  node is the one where the highest-ranked job that must leave ranks lowest (then fewer jobs
  evicted, then the best fit, then the lowest node index);
- on a node, holders leave lowest rank first, until the new job fits.

A multi-node gang takes whole nodes: those whose highest-ranked holder ranks lowest (free nodes
first), then a rest node chosen as for a single-node job. Vectorised over the held GPUs of one
GPU type; no loop over GPUs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Layout = list[tuple[int, int]]


def held_parts(owner: np.ndarray, held: np.ndarray, gpu_pos: np.ndarray, rank: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(node position, owner row, GPU count, owner rank) of each (owner, node) part of the held GPUs.

    ``held`` masks the GPUs of one type held for evictable owners; ``gpu_pos`` maps each GPU to
    its node's position among that type's nodes; ``rank`` is indexed by row.
    """
    g = np.flatnonzero(held)
    if g.size == 0:
        e = np.empty(0, dtype=np.int64)
        return e, e, e, e
    rows = owner[g]
    key = gpu_pos[g] * (int(rows.max()) + 1) + rows
    uniq, cnt = np.unique(key, return_counts=True)
    pos, row = np.divmod(uniq, int(rows.max()) + 1)
    return pos, row, cnt, rank[row]


class HeldGpus:
    """GPUs held for running jobs not admitted yet, and the policy's rank of every row.

    Shared by the placers that hold running jobs' GPUs: ``mask`` is cleared when an owner is
    admitted (keeps them) or evicted (loses them).
    """

    def __init__(self, cluster_gpu_type: np.ndarray, type_pos: np.ndarray, owner: np.ndarray,
                 mask: np.ndarray, rank_of: np.ndarray) -> None:
        self.gpu_type, self.type_pos, self.owner, self.mask, self.rank_of = (
            cluster_gpu_type, type_pos, owner, mask, rank_of)

    def parts(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return held_parts(self.owner, self.mask & (self.gpu_type == t), self.type_pos, self.rank_of)

    def victims_on(self, lo: int, hi: int) -> list[int]:
        """Owners holding GPUs in [lo, hi) (one node), lowest rank first (ties: highest row)."""
        g = lo + np.flatnonzero(self.mask[lo:hi])
        rows = np.unique(self.owner[g])
        return rows[np.lexsort((-rows, -self.rank_of[rows]))].tolist()


def rank_array(order: np.ndarray, n: int) -> np.ndarray:
    """Rank (position in ``order``) of every row of an ``n``-row table; unranked rows rank after all."""
    out = np.full(n, n, dtype=np.int64)
    out[order] = np.arange(order.size, dtype=np.int64)
    return out


def type_positions(node_type: np.ndarray, gpu_node: np.ndarray) -> np.ndarray:
    """Each GPU's node position among the nodes of its GPU type."""
    pos = np.zeros(node_type.size, dtype=np.int64)
    for t in np.unique(node_type).tolist():
        nodes = np.flatnonzero(node_type == t)
        pos[nodes] = np.arange(nodes.size)
    return pos[gpu_node]


def rank_aware_layout(free: np.ndarray, cap: np.ndarray, p_pos: np.ndarray, p_cnt: np.ndarray,
                      p_rank: np.ndarray, k: int) -> Layout | None:
    """A consolidated layout of ``k`` GPUs over free and held GPUs, as positions (see module docstring).

    ``free``/``cap`` are per node position; parts (``p_pos``, ``p_cnt``, ``p_rank``) are the held
    GPUs. Returns [(position, count)] or None when no consolidated layout exists.
    """
    held = np.bincount(p_pos, weights=p_cnt, minlength=free.size).astype(np.int64)
    if int((free + held).sum()) < k:
        return None
    if k <= int(cap.max()):
        best = _best_single(free, cap, held, p_pos, p_cnt, p_rank, k, np.zeros(free.size, dtype=bool))
        return None if best < 0 else [(best, k)]
    # Whole nodes: free ones first, then those whose highest-ranked holder ranks lowest.
    top = np.full(free.size, np.iinfo(np.int64).max, dtype=np.int64)  # highest rank held (min number)
    if p_pos.size:
        np.minimum.at(top, p_pos, p_rank)
    njobs = np.bincount(p_pos, minlength=free.size)
    whole = np.flatnonzero(free + held == cap)
    whole = whole[np.lexsort((whole, njobs[whole], -top[whole], -cap[whole]))]
    layout: Layout = []
    used = np.zeros(free.size, dtype=bool)
    need = k
    for b in whole.tolist():
        c = int(cap[b])
        if need < c:
            break
        layout.append((b, c))
        used[b] = True
        need -= c
        if need == 0:
            return layout
    rest = _best_single(free, cap, held, p_pos, p_cnt, p_rank, need, used)
    if rest < 0:
        return None
    layout.append((rest, need))
    return layout


def _best_single(free: np.ndarray, cap: np.ndarray, held: np.ndarray, p_pos: np.ndarray, p_cnt: np.ndarray,
                 p_rank: np.ndarray, k: int, exclude: np.ndarray) -> int:
    """The node position for ``k`` GPUs that evicts the lowest-ranked holders; -1 if none."""
    ok = (cap >= k) & (free + held >= k) & ~exclude
    if not ok.any():
        return -1
    free_fit = np.flatnonzero(ok & (free >= k))
    if free_fit.size:  # no eviction needed: best fit on free GPUs
        return int(free_fit[np.argmin(free[free_fit])])
    # Holders of each candidate node, lowest rank first; the first part that covers the shortfall.
    sel = ok[p_pos]
    pos, cnt, rk = p_pos[sel], p_cnt[sel], p_rank[sel]
    order = np.lexsort((-rk, pos))
    pos, cnt, rk = pos[order], cnt[order], rk[order]
    cum = np.cumsum(cnt)
    starts = np.flatnonzero(np.r_[True, pos[1:] != pos[:-1]])
    seg = np.repeat(starts, np.diff(np.r_[starts, pos.size]))
    within = cum - cum[seg] + cnt[seg]
    covers = np.flatnonzero(free[pos] + within >= k)
    if covers.size == 0:
        return -1
    nodes, first = np.unique(pos[covers], return_index=True)
    first = covers[first]
    cost_rank = rk[first]  # the highest-ranked job this node would evict
    n_victims = first - seg[first] + 1
    leftover = free[nodes] + within[first] - k
    best = np.lexsort((nodes, leftover, n_victims, -cost_rank))[0]
    return int(nodes[best])


class EvictsByRank:
    """Mixin of the placers that hold running jobs' GPUs: layouts and evictions in rank order.

    The placer provides ``cluster``, ``table``, ``advice``, ``pool``, ``owner`` (row per GPU of the
    jobs that ran last round; -1 once evicted), ``assigned``, ``type_nodes``, ``type_order(row)``,
    ``_type_pos`` (or None), ``_held_view`` (None until built) and ``_evict(row)``, and calls
    ``release_held`` when an owner is admitted or evicted. The mask of held GPUs is built only at a
    decision's first eviction: most decisions evict nothing.
    """

    cluster: Any
    table: Any
    advice: Any
    pool: Any
    owner: np.ndarray
    assigned: Any
    type_nodes: list[np.ndarray]
    _type_pos: np.ndarray | None
    _held_view: HeldGpus | None
    type_order: Any  # PooledPlacer.type_order(row)
    _evict: Any  # the placer's own eviction of one row

    def held_view(self) -> HeldGpus:
        """The held GPUs with the policy's rank of their owners (built at the first eviction)."""
        if self._held_view is None:
            c = self.cluster
            pos = self._type_pos if self._type_pos is not None else type_positions(c.node_type, c.gpu_node)
            held = self.owner >= 0
            admitted = np.fromiter(self.assigned, dtype=np.int64, count=len(self.assigned))
            held[held] = ~np.isin(self.owner[held], admitted)
            self._held_view = HeldGpus(c.gpu_type, pos, self.owner, held, rank_array(self.advice.order, self.table.n))
        return self._held_view

    def release_held(self, gpus: Any) -> None:
        """An owner was admitted or evicted: its GPUs are no longer held (once the mask exists)."""
        if self._held_view is not None:
            self._held_view.mask[np.asarray(gpus, dtype=np.int64)] = False

    def evicting_layout(self, row: int) -> Layout | None:
        """A consolidated layout over free and held GPUs that evicts in the policy's rank order."""
        k = int(self.table.num_gpus[row])
        view = self.held_view()
        cap = self.cluster.node_num_gpus
        for t in self.type_order(row):
            nodes = self.type_nodes[t]
            p_pos, _rows, p_cnt, p_rank = view.parts(t)
            layout = rank_aware_layout(self.pool.node_free[nodes], cap[nodes], p_pos, p_cnt, p_rank, k)
            if layout is not None:
                return [(int(nodes[b]), c) for b, c in layout]
        return None

    def evict_for(self, layout: Layout) -> None:
        """Free the GPUs ``layout`` needs beyond the free ones: holders leave lowest rank first."""
        c = self.cluster
        for node, k in layout:
            short = k - int(self.pool.node_free[node])
            if short <= 0:
                continue
            lo = int(c.node_first_gpu[node])
            hi = lo + int(c.node_num_gpus[node])
            for v in self.held_view().victims_on(lo, hi):
                if short <= 0:
                    break
                short -= int((self.owner[lo:hi] == v).sum())
                self._evict(v)
