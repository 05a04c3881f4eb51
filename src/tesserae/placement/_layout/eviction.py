"""Eviction in the anchored layout: which continuing jobs leave so that a new job fits.

The anchored layout keeps every running job where it ran; when a new job finds no room, not even
by the exact search, the cheapest set of continuing jobs leaves and is laid out again as new jobs:

- a gang that fits one node: the node where the fewest jobs leave, then the fewest GPUs, then the
  lowest position (a single job that frees enough is the smallest such; else the largest jobs
  first). Only the ``CANDIDATES`` nodes that need the fewest GPUs freed are examined;
- a multi-node gang: whole nodes, the free ones first, then those that only continuing jobs use,
  fewest jobs first; the rest as for a one-node gang on another node.

A node's jobs are listed only when that node is first examined, and a job's parts are removed only
when it is evicted: a round examines few of the nodes.
"""

from __future__ import annotations

import numpy as np

from tesserae.placement._layout.held import HeldParts
from tesserae.placement._layout.pool import BinPool


class CheapestEviction:
    """Chooses which continuing jobs leave so that a new job fits (see module docstring)."""

    #: Nodes examined per eviction, cheapest-looking first (bounds the work on huge clusters).
    CANDIDATES = 64

    def __init__(self, pool: BinPool, held: HeldParts, kept_usage: np.ndarray) -> None:
        """``kept_usage``: GPUs the continuing jobs hold per node position (updated as they leave)."""
        self.pool = pool
        self._parts = (held.row, held.node, held.cnt)
        self._built = False
        self.kept_usage = kept_usage

    def _build(self) -> None:
        p_node = self._parts[1]
        n = self.pool.cap.size
        # The parts by node (rows ascending within a node): a node's jobs are listed when it is first
        # examined, a job's parts when it is evicted; a round examines few of the nodes.
        self._by_node = np.argsort(p_node, kind="stable")
        self._node_start = np.searchsorted(p_node[self._by_node], np.arange(n + 1)).tolist()
        self._on_node: dict[int, dict[int, int]] = {}
        self._gone: set[int] = set()
        self.jobs_on = np.bincount(p_node, minlength=n).astype(np.int64)
        # Per node, its jobs as (GPUs, row), most GPUs first, then by row: built when a node is first
        # examined, dropped when one of its jobs leaves (a round examines the same nodes many times).
        self._by_size: dict[int, list[tuple[int, int]]] = {}
        self._built = True

    def on_node(self, b: int) -> dict[int, int]:
        """The continuing jobs still on node position ``b`` (row -> GPUs), rows ascending."""
        jobs = self._on_node.get(b)
        if jobs is None:
            p_row, _, p_cnt = self._parts
            sl = self._by_node[self._node_start[b]:self._node_start[b + 1]]
            gone = self._gone
            jobs = {r: c for r, c in zip(p_row[sl].tolist(), p_cnt[sl].tolist(), strict=True) if r not in gone}
            self._on_node[b] = jobs
        return jobs

    def _jobs_by_size(self, b: int) -> list[tuple[int, int]]:
        lst = self._by_size.get(b)
        if lst is None:
            lst = sorted(((c, r) for r, c in self.on_node(b).items()), key=lambda cr: (-cr[0], cr[1]))
            self._by_size[b] = lst
        return lst

    def _evict(self, rows: list[int]) -> None:
        p_row, p_node, p_cnt = self._parts
        for r in rows:
            self._gone.add(r)
            lo, hi = np.searchsorted(p_row, [r, r + 1]).tolist()  # parts are sorted by row
            for b, c in zip(p_node[lo:hi].tolist(), p_cnt[lo:hi].tolist(), strict=True):
                self._by_size.pop(b, None)
                jobs = self._on_node.get(b)
                if jobs is not None:
                    del jobs[r]
                self.pool.change(b, c)
                self.kept_usage[b] -= c
                self.jobs_on[b] -= 1

    def make_room(self, k: int) -> list[int]:
        """Evict the cheapest continuing jobs so that ``k`` GPUs fit consolidated; [] if impossible."""
        if not self._built:
            self._build()
        if k <= self.pool.gmax:
            victims = self._room_on_one(k)
            self._evict(victims)
            return victims
        return self._room_on_many(k)

    def _room_on_one(self, k: int, exclude: set[int] | None = None) -> list[int]:
        pool = self.pool
        ok = (pool.cap >= k) & (pool.avail + self.kept_usage >= k)
        cand = np.flatnonzero(ok)
        if exclude:
            cand = cand[~np.isin(cand, list(exclude))]
        if cand.size == 0:
            return []
        need = k - pool.avail[cand]
        by_need = np.argsort(need.astype(np.int16), kind="stable")[: self.CANDIDATES]  # radix sort: O(n)
        best: tuple[tuple[int, int, int], list[int]] | None = None
        by_size = self._by_size
        for b, nd in zip(cand[by_need].tolist(), need[by_need].tolist(), strict=True):
            if best is not None and best[0][0] == 1 and best[0][1:] < (nd, b):
                break  # candidates come by need, then index: none after this one costs less
            jobs = by_size.get(b)
            if jobs is None:
                jobs = self._jobs_by_size(b)
            if jobs and jobs[0][0] >= nd:  # one job frees enough: the smallest such (then lowest row)
                c, r = min(cr for cr in jobs if cr[0] >= nd)
                choice, freed = [r], c
            else:
                choice, freed = [], 0
                for c, r in jobs:
                    choice.append(r)
                    freed += c
                    if freed >= nd:
                        break
                if freed < nd:
                    continue
            cost = (len(choice), freed, b)
            if best is None or cost < best[0]:
                best = (cost, choice)
                if cost[0] == 1 and freed == nd:
                    break
        return [] if best is None else best[1]

    def _room_on_many(self, k: int) -> list[int]:
        """Whole nodes for a multi-node gang: empty the nodes with the fewest continuing jobs."""
        pool = self.pool
        g = pool.gmax
        n_whole, rest = divmod(k, g)
        full = pool.cap == g
        whole_free = np.flatnonzero(full & (pool.avail == pool.cap))
        victims: list[int] = []
        chosen: set[int] = set(whole_free[:n_whole].tolist())
        short = n_whole - whole_free.size
        if short > 0:
            cand = np.flatnonzero(full & (pool.avail < pool.cap) & (pool.avail + self.kept_usage == pool.cap))
            cand = cand[np.lexsort((cand, self.jobs_on[cand]))][:short]
            if cand.size < short:
                return []
            seen: set[int] = set()
            for b in cand.tolist():
                for r in self.on_node(b):
                    if r not in seen:
                        seen.add(r)
                        victims.append(r)
                chosen.add(b)
            self._evict(victims)
        if rest and np.setdiff1d(np.flatnonzero(pool.avail >= rest), list(chosen)).size == 0:
            more = self._room_on_one(rest, exclude=chosen)
            self._evict(more)
            victims.extend(more)
        return victims
