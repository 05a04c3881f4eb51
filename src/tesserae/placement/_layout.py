"""Migration-minimizing layout of one GPU type's allocation (DESIGN §4.1).

Input: the jobs that hold GPUs of one type this round (their gang sizes), and for the continuing
ones the GPUs they held last round. Output: the GPUs of every job, moving as few continuing jobs as
this module can find a layout for. Two candidate layouts are built and the better one is kept
(fewer spread jobs first, then fewer migrations):

**Anchored layout.** Every logical node starts as the group of continuing jobs that shared a
physical node last round (so they stay together), anchored to that node; the new jobs are laid out
around them by consolidated best fit, largest first, and if that fails by a bounded exact search
(branch and bound over free counts). Only when neither finds room does the layout *evict* the
cheapest set of continuing jobs from one node (fewest jobs, then fewest GPUs) and lay the evicted
jobs out again as new ones. For this layout the maximum-weight matching of
logical to physical nodes is the identity: each anchored logical node holds exactly what its jobs
held on its anchor, which is the largest weight any physical node can give it, so no solver runs.
When no new job has to evict anything, no continuing job moves at all.

**Regrouped layout.** The groups of continuing jobs (one per previous physical node; a job that
spanned nodes is its own unit) and the new jobs are bin-packed from scratch onto logical nodes
(first-fit decreasing, best fit), without looking at where anything ran. Logical nodes are then
mapped to physical nodes of the same size by a sparse maximum-weight bipartite matching
(``scipy.sparse.csgraph.min_weight_full_bipartite_matching``) with
w(L, P) = sum over jobs j of L of min(GPUs of j on L, GPUs j held on P) -- the GPUs that can stay.
It is built only when the anchored layout had to move or spread a job, and abandoned once a lower
bound of its moves shows that it cannot beat the anchored one (``TypePlacer._regrouped``: during the
bin packing when the anchored layout spread nobody, else after it): on a large cluster the anchored
layout moves a few jobs where packing from scratch would move hundreds, so the matching and the GPU
choice of the regrouped layout are almost never needed.

Inside a physical node every continuing job keeps as many of its previous GPU indices as its part
there allows; the others take the lowest free indices. A job is *spread* only when no consolidated
layout was found (a gang that fits one node gets one node; a larger one whole nodes plus one).

Cost: per-node NumPy arrays and loops over jobs only. Best fit keeps one heap of nodes per free
count (node sizes are small), so a job is placed in O(node size) heap operations; on a type whose
nodes all have one size, a run of units larger than half a node that all open empty nodes is placed
in one step. The eviction search lists a node's jobs only when it examines that node, and the GPU
choice works on one mask of the cluster's GPUs, so a decision that moves nobody costs vector
operations over the GPUs plus a loop over the new jobs.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tesserae.core.cluster import Cluster

Parts = list[tuple[int, int]]  # (node position within the type, GPU count)


class BinPool:
    """Free GPUs per node of one type with best-fit lookup (see module docstring)."""

    def __init__(self, cap: np.ndarray, avail: np.ndarray | None = None) -> None:
        self.cap = np.asarray(cap, dtype=np.int64)
        self.avail = (self.cap if avail is None else np.asarray(avail, dtype=np.int64)).copy()
        self.gmax = int(self.cap.max())
        self.heaps: list[list[int]] = [np.flatnonzero(self.avail == v).tolist() for v in range(self.gmax + 1)]

    def total(self) -> int:
        return int(self.avail.sum())

    def change(self, b: int, delta: int) -> None:
        self.avail[b] += delta
        heapq.heappush(self.heaps[int(self.avail[b])], b)

    def take_each(self, nodes: np.ndarray, k: int) -> None:
        """Take ``k`` GPUs on each of ``nodes`` (each has them free)."""
        self.avail[nodes] -= k
        left = self.avail[nodes]
        for v in np.unique(left).tolist():
            h = self.heaps[v]
            h.extend(nodes[left == v].tolist())
            heapq.heapify(h)

    def best_single(self, k: int) -> int:
        """The node with the fewest free GPUs that still holds ``k`` (lowest index on ties); -1 if none."""
        avail = self.avail
        for v in range(k, self.gmax + 1):
            h = self.heaps[v]
            while h:
                b = h[0]
                if avail[b] == v:
                    return b
                heapq.heappop(h)
        return -1

    def whole_nodes(self) -> np.ndarray:
        """Completely free nodes, largest first, then by index."""
        whole = np.flatnonzero(self.avail == self.cap)
        return whole[np.argsort(-self.cap[whole], kind="stable")]

    def consolidated(self, k: int) -> Parts | None:
        """Take a consolidated layout of ``k`` GPUs (one node, or whole nodes plus a best-fit rest)."""
        if k <= self.gmax:
            b = self.best_single(k)
            if b < 0:
                return None
            self.change(b, -k)
            return [(b, k)]
        parts: Parts = []
        need = k
        for b in self.whole_nodes().tolist():
            c = int(self.cap[b])
            if need < c:
                break
            parts.append((b, c))
            need -= c
            if need == 0:
                break
        if sum(c for _, c in parts) + (self.best_fit_rest(need, parts) if need else 0) < k:
            return None
        for b, c in parts:
            self.change(b, -c)
        if need:
            b = self.best_single(need)
            self.change(b, -need)
            parts.append((b, need))
        return parts

    def best_fit_rest(self, need: int, whole: Parts) -> int:
        """``need`` if a node outside ``whole`` can hold it, else 0."""
        if need > self.gmax:
            return 0
        taken = {b for b, _ in whole}
        avail = self.avail
        for v in range(need, self.gmax + 1):
            for b in self.heaps[v]:
                if avail[b] == v and b not in taken:
                    return need
        return 0

    def spread(self, k: int) -> Parts:
        """Take ``k`` GPUs from the nodes with the most free GPUs (fewest nodes); caller checked total."""
        order = np.argsort(-self.avail, kind="stable")
        cs = np.cumsum(self.avail[order])
        last = int(np.searchsorted(cs, k))
        parts: Parts = []
        need = k
        for b in order[: last + 1].tolist():
            c = min(int(self.avail[b]), need)
            if c > 0:
                parts.append((b, c))
                self.change(b, -c)
                need -= c
        assert need == 0, "spread layout asked for more GPUs than are free"
        return parts


@dataclass
class HeldParts:
    """What the continuing jobs of one type held last round, computed once per layout (``place``).

    ``row``/``node``/``cnt``: one entry per (job, node position) part, sorted by row then node;
    ``gpus``: every GPU they held (``rows`` in order, each job's GPUs in its order).
    """

    rows: list[int]  # the continuing jobs, in priority order
    row: np.ndarray
    node: np.ndarray
    cnt: np.ndarray
    gpus: np.ndarray


@dataclass
class Units:
    """The regrouped layout's units in packing order: GPU count, number of jobs and the node its jobs
    ran on (-1: not one node) of each, and their rows (unit ``u``: ``rows[start[u]:start[u + 1]]``)."""

    total: list[int]
    count: list[int]
    node: list[int]
    rows: list[int]
    start: list[int]


@dataclass
class TypeLayout:
    """The GPUs of every job of one type, and how the layout was found."""

    gpus: dict[int, tuple[int, ...]]
    moved: set[int] = field(default_factory=set)  # continuing jobs on other GPUs than before
    spread: set[int] = field(default_factory=set)  # jobs not consolidated
    method: str = "anchored"  # "anchored" or "regrouped"
    evictions: int = 0


class TypePlacer:
    """Lays out one GPU type's jobs for one round (see module docstring)."""

    def __init__(self, cluster: Cluster, type_index: int) -> None:
        self.cluster = cluster
        self.nodes = np.flatnonzero(cluster.node_type == type_index)
        self.cap = cluster.node_num_gpus[self.nodes]
        self.first = cluster.node_first_gpu[self.nodes]
        self.pos = np.full(cluster.num_nodes, -1, dtype=np.int64)
        self.pos[self.nodes] = np.arange(self.nodes.size)
        # As lists, for the per-GPU work of ``_indices`` (a job's previous GPUs and their nodes).
        self._gpu_node: list[int] = cluster.gpu_node.tolist()
        self._node_list: list[int] = self.nodes.tolist()
        self._uniform = bool(self.nodes.size) and int(self.cap.min()) == int(self.cap.max())

    # ------------------------------------------------------------------------------- entry point
    def place(self, hosts: list[int], size: Mapping[int, int], prev: Mapping[int, tuple[int, ...]]) -> TypeLayout:
        """``hosts`` in priority order; ``prev`` maps the continuing ones to the GPUs they keep if possible."""
        kept_rows = [r for r in hosts if r in prev]
        parts = self._prev_parts(kept_rows, prev)
        anchored = self._anchored(hosts, size, prev, parts)
        if not anchored.moved and not anchored.spread:
            return anchored
        to_beat = (len(anchored.spread), len(anchored.moved)) if self.prune_regrouped else None
        regrouped = self._regrouped(hosts, size, prev, parts, to_beat)
        if regrouped is not None and \
                (len(regrouped.spread), len(regrouped.moved)) < (len(anchored.spread), len(anchored.moved)):
            return regrouped
        return anchored

    #: Stop building the regrouped layout as soon as it provably cannot beat the anchored one (see
    #: ``_regrouped``); off, it is always built whole (the two give the same layouts: tests compare).
    prune_regrouped = True

    # ---------------------------------------------------------------------------------- helpers
    def _prev_parts(self, rows: list[int], prev: Mapping[int, tuple[int, ...]]) -> HeldParts:
        """What the continuing ``rows`` held, vectorised (see ``HeldParts``)."""
        if not rows:
            e = np.empty(0, dtype=np.int64)
            return HeldParts(rows, e, e, e, e)
        lengths = np.fromiter((len(prev[r]) for r in rows), dtype=np.int64, count=len(rows))
        gpus = np.fromiter(itertools.chain.from_iterable(prev[r] for r in rows), dtype=np.int64,
                           count=int(lengths.sum()))
        row_of = np.repeat(np.asarray(rows, dtype=np.int64), lengths)
        node = self.pos[self.cluster.gpu_node[gpus]]
        key = row_of * (self.nodes.size + 1) + node
        uniq, counts = np.unique(key, return_counts=True)
        return HeldParts(rows, uniq // (self.nodes.size + 1), uniq % (self.nodes.size + 1), counts, gpus)

    # --------------------------------------------------------------------------- anchored layout
    def _anchored(self, hosts: list[int], size: Mapping[int, int], prev: Mapping[int, tuple[int, ...]],
                  held: HeldParts | None = None) -> TypeLayout:
        if held is None:
            held = self._prev_parts([r for r in hosts if r in prev], prev)
        kept_rows, p_row, p_node, p_cnt = held.rows, held.row, held.node, held.cnt
        usage = np.bincount(p_node, weights=p_cnt, minlength=self.nodes.size).astype(np.int64)
        avail0 = self.cap - usage
        new_rows = sorted((r for r in hosts if r not in prev), key=lambda r: -size[r])  # stable: priority
        # 1. Best fit, largest first, around the running jobs; 2. if a job does not fit, an exact search
        # for a packing of the new jobs around them (bounded); 3. only then evict running jobs.
        placed = self._fill_around(avail0, new_rows, size)
        if placed is None:
            placed = self._exact_around(avail0, new_rows, size)
        used = np.zeros(self.cluster.num_gpus, dtype=bool)  # the GPUs the kept jobs hold
        used[held.gpus] = True
        if placed is not None:
            gpus = self._indices(placed, prev, kept_rows, used)
            return TypeLayout(gpus, set(), set(), "anchored", 0)
        pool = BinPool(self.cap, avail0)
        kept = set(kept_rows)
        ev = _Evictor(self, pool, p_row, p_node, p_cnt, usage.copy())
        seq = itertools.count()
        queue = [(-size[r], next(seq), r) for r in new_rows]
        heapq.heapify(queue)
        placed = {}
        spread: set[int] = set()
        evicted: set[int] = set()
        pending_spread: list[int] = []
        while queue:
            _, _, row = heapq.heappop(queue)
            k = size[row]
            parts = pool.consolidated(k)
            if parts is None:
                victims = ev.make_room(k)
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
        gpus = self._indices(placed, prev, keep_whole, used)
        moved = {r for r in evicted if gpus[r] != prev[r]}  # the kept ones keep their GPUs
        return TypeLayout(gpus, moved, spread, "anchored", len(evicted))

    def _fill_around(self, avail: np.ndarray, rows: list[int], size: Mapping[int, int]) -> dict[int, Parts] | None:
        """Best fit of ``rows`` (largest first) into the free GPUs; None if one does not fit."""
        pool = BinPool(self.cap, avail)
        placed: dict[int, Parts] = {}
        for r in rows:
            parts = pool.consolidated(size[r])
            if parts is None:
                return None
            placed[r] = parts
        return placed

    #: Search steps of the exact packing before giving up (keeps a decision's cost bounded).
    EXACT_BUDGET = 20_000
    #: Largest number of single-node jobs the exact search takes on.
    EXACT_MAX_JOBS = 48

    def _exact_around(self, avail: np.ndarray, rows: list[int], size: Mapping[int, int]
                      ) -> dict[int, Parts] | None:
        """Exact packing of ``rows`` into the free GPUs by depth-first search (None if none within budget).

        Multi-node jobs take whole nodes first (as in best fit); single-node jobs are then packed by
        branch and bound, largest first, trying each distinct free count once (nodes with the same
        free count are interchangeable), smallest first.
        """
        pool = BinPool(self.cap, avail)
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
        if len(small) > self.EXACT_MAX_JOBS:
            return None
        ks = [size[r] for r in small]
        choice = [-1] * len(ks)
        budget = [self.EXACT_BUDGET]
        suffix = [*np.cumsum(ks[::-1])[::-1].tolist(), 0]
        # The nodes of each free count, by index (the first one of a count is the one tried), and the
        # total free: kept up to date as the search takes and gives back GPUs.
        gmax = pool.gmax
        by_free = [np.flatnonzero(pool.avail == v).tolist() for v in range(gmax + 1)]
        total = [pool.total()]

        def move(b: int, old: int, new: int) -> None:
            lst = by_free[old]
            del lst[bisect.bisect_left(lst, b)]
            bisect.insort(by_free[new], b)

        def search(i: int) -> bool:
            if i == len(ks):
                return True
            budget[0] -= 1
            if budget[0] < 0 or total[0] < suffix[i]:
                return False
            k = ks[i]
            for v, b in [(v, by_free[v][0]) for v in range(k, gmax + 1) if by_free[v]]:
                move(b, v, v - k)
                total[0] -= k
                choice[i] = b
                if search(i + 1):
                    return True
                move(b, v - k, v)
                total[0] += k
            return False

        if not search(0):
            return None
        for r, k, b in zip(small, ks, choice, strict=True):
            placed[r] = [(b, k)]
        return placed

    # -------------------------------------------------------------------------- regrouped layout
    def _units(self, hosts: list[int], size: Mapping[int, int], held: HeldParts) -> Units:
        """The regrouped layout's units in packing order (see ``Units``), vectorised.

        Units: the single-node continuing jobs of one previous node (in priority order; node: that
        node), each multi-node continuing job and each new job (node: -1). Largest first; ties:
        groups and continuing jobs by their highest priority, then new jobs by priority.
        """
        n_h = len(hosts)
        hosts_arr = np.asarray(hosts, dtype=np.int64)
        sizes = np.fromiter((size[r] for r in hosts), dtype=np.int64, count=n_h)
        by_row = np.argsort(hosts_arr, kind="stable")
        p_rank = by_row[np.searchsorted(hosts_arr[by_row], held.row)]  # each part's job's priority rank
        starts = np.flatnonzero(np.r_[True, held.row[1:] != held.row[:-1]]) if held.row.size else held.row
        n_parts = np.diff(np.r_[starts, held.row.size])
        single = np.repeat(n_parts == 1, n_parts)
        multi_rank = p_rank[starts[n_parts > 1]]
        s_rank, s_node = p_rank[single], held.node[single]
        o = np.lexsort((s_rank, s_node))
        s_rank, s_node = s_rank[o], s_node[o]
        g_start = np.flatnonzero(np.r_[True, s_node[1:] != s_node[:-1]]) if s_node.size else s_node
        g_total = np.add.reduceat(sizes[s_rank], g_start) if s_node.size else s_node
        new_rank = np.flatnonzero(~np.isin(hosts_arr, held.row))
        total = np.concatenate([sizes[multi_rank], g_total, sizes[new_rank]])
        tie = np.concatenate([multi_rank, s_rank[g_start], n_h + new_rank])
        node = np.concatenate([np.full(multi_rank.size, -1), s_node[g_start], np.full(new_rank.size, -1)])
        # Each unit's rows as a range of one array (multi-node jobs, groups, new jobs), then gathered
        # into packing order.
        every = hosts_arr[np.concatenate([multi_rank, s_rank, new_rank])]
        count = np.concatenate([np.ones(multi_rank.size, dtype=np.int64), np.diff(np.r_[g_start, s_node.size]),
                                np.ones(new_rank.size, dtype=np.int64)])
        first = np.cumsum(count) - count
        order = np.lexsort((tie, -total))
        count, first = count[order], first[order]
        ends = np.cumsum(count)
        flat = every[np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(first - (ends - count), count)]
        return Units(total[order].tolist(), count.tolist(), node[order].tolist(), flat.tolist(),
                     [0, *ends.tolist()])

    def _regrouped(self, hosts: list[int], size: Mapping[int, int], prev: Mapping[int, tuple[int, ...]],
                   held_parts: HeldParts | None = None, to_beat: tuple[int, int] | None = None
                   ) -> TypeLayout | None:
        """The regrouped layout; None once it cannot beat ``to_beat`` = (spread, moved) of the anchored one.

        A logical node maps to one physical node, so of its single-node continuing jobs at most those
        that ran on one node can keep their GPUs: the sum over logical nodes of (those jobs - the
        most of them from one node) is a lower bound of the moves, and it only grows as the bin
        packing goes on. When the anchored layout spread nobody, the packing stops as soon as the
        bound reaches its moves; otherwise, after the packing, (spread jobs, bound) is compared with
        ``to_beat`` as the layouts themselves are. Either way the rest -- matching, GPU indices --
        could not change which layout is kept.
        """
        if held_parts is None:
            held_parts = self._prev_parts([r for r in hosts if r in prev], prev)
        units = self._units(hosts, size, held_parts)
        totals, counts, srcs, flat, off = units.total, units.count, units.node, units.rows, units.start
        # Stop inside the packing only when the anchored layout spread nobody: then only fewer moves win.
        stop_at = to_beat[1] if to_beat is not None and to_beat[0] == 0 else None
        # The bound: per logical node, its continuing single-node jobs and the most from one node.
        n_on = [0] * self.nodes.size
        top = [0] * self.nodes.size
        came: dict[int, dict[int, int]] = {}
        bound = 0

        def tally(b: int, src: int, m: int) -> int:
            d = came.get(b)
            if d is None:
                came[b] = {src: m}
                n_on[b] = top[b] = m
                return 0
            c = d[src] = d.get(src, 0) + m
            before = n_on[b] - top[b]
            n_on[b] += m
            if c > top[b]:
                top[b] = c
            return n_on[b] - top[b] - before

        pool = BinPool(self.cap)
        # Where each unit went: its parts (one job), its node (a group, or one job on one node), or
        # None (left over); the logical layout is written out only if it can still win.
        at: list[Parts | int | None] = [None] * len(totals)
        left_units: list[int] = []
        # Where each run of units of one size ends (units come largest first).
        run_ends = [*(np.flatnonzero(np.diff(totals)) + 1).tolist(), len(totals)]
        gmax, uniform = pool.gmax, self._uniform
        i = 0
        while i < len(totals):
            total, m, src = totals[i], counts[i], srcs[i]
            if uniform and 2 * total > gmax and total <= gmax:
                b = pool.best_single(total)
                if b >= 0 and pool.avail[b] == gmax:
                    # The best fit is an empty node: no node is partly filled with room for this size,
                    # and filling empty ones makes none (two units over half a node never share one),
                    # so the rest of the run takes the empty nodes in index order, as one by one would.
                    end = run_ends[bisect.bisect_right(run_ends, i)]
                    empty = np.flatnonzero(pool.avail == gmax)[: end - i]
                    pool.take_each(empty, total)
                    nodes = empty.tolist()
                    at[i:i + len(nodes)] = nodes
                    for node_b, jobs_m, src_b in zip(nodes, counts[i:end], srcs[i:end], strict=False):
                        if src_b >= 0:  # alone on its logical node: adds nothing to the bound
                            tally(node_b, src_b, jobs_m)
                    i += len(nodes)
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
                bound += tally(b, src, m)
                if stop_at is not None and bound >= stop_at:
                    return None
        # Left over: one by one, largest first, then by priority.
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
                bound += tally(parts[0][0], left_node[r], 1)
            left_parts.append(parts)
        if to_beat is not None and (len(spread), bound) >= to_beat:
            return None
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
        logical.update(zip(leftovers, left_parts, strict=True))
        held: dict[int, Parts] = {}
        for r, b, c in zip(held_parts.row.tolist(), held_parts.node.tolist(), held_parts.cnt.tolist(), strict=True):
            held.setdefault(r, []).append((b, c))
        cont = held_parts.rows
        mapping = self._match(logical, held).tolist()
        # A continuing job whose parts land exactly on the nodes and counts it held keeps all its GPUs
        # (previous GPUs of different jobs are disjoint, so no other job can take one of them first):
        # only the others go through the per-GPU choice of ``_indices``.
        placed: dict[int, Parts] = {}
        stay: list[int] = []
        for r, parts in logical.items():
            now = [(mapping[b], c) for b, c in parts]
            h = held.get(r)
            if h is not None and (now == h or (len(now) > 1 and sorted(now) == h)):
                stay.append(r)
            else:
                placed[r] = now
        gpus = self._indices(placed, prev, stay)
        for r in stay:
            g = gpus[r]
            s = tuple(sorted(g))
            if s != g:
                gpus[r] = s
        moved = {r for r in cont if gpus[r] != prev[r]}
        return TypeLayout(gpus, moved, spread, "regrouped", 0)

    def _match(self, logical: Mapping[int, Parts], held: Mapping[int, Parts]) -> np.ndarray:
        """Logical -> physical node positions by maximum-weight matching (see module docstring).

        Only logical nodes with weight and the physical nodes they can reach enter the solver; each
        such logical node also gets a private dummy column of negligible weight, so that a matching
        saturating the logical side always exists (``min_weight_full_bipartite_matching`` needs one)
        and the graph stays sparse. Logical nodes left unmatched take the remaining physical nodes of
        their size in index order.
        """
        n = self.nodes.size
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for r, hparts in held.items():
            for lb, c in logical[r]:
                for pb, h in hparts:
                    if self.cap[lb] == self.cap[pb]:
                        rows.append(lb)
                        cols.append(pb)
                        vals.append(float(min(c, h)))
        mapping = np.full(n, -1, dtype=np.int64)
        if vals:
            from scipy.sparse import coo_matrix  # only here: a fifo run never loads SciPy
            from scipy.sparse.csgraph import min_weight_full_bipartite_matching

            lrows, ri = np.unique(np.asarray(rows), return_inverse=True)
            pcols, ci = np.unique(np.asarray(cols), return_inverse=True)
            nr, nc = lrows.size, pcols.size
            eps = 1e-6  # a dummy edge never outweighs one GPU that can stay
            m = coo_matrix((np.concatenate([vals, np.full(nr, eps)]),
                            (np.concatenate([ri, np.arange(nr)]), np.concatenate([ci, nc + np.arange(nr)]))),
                           shape=(nr, nc + nr)).tocsr()  # duplicate (L, P) entries are summed
            row_ind, col_ind = min_weight_full_bipartite_matching(m, maximize=True)
            real = col_ind < nc
            mapping[lrows[row_ind[real]]] = pcols[col_ind[real]]
        used = np.zeros(n, dtype=bool)
        used[mapping[mapping >= 0]] = True
        for c in np.unique(self.cap).tolist():
            todo = np.flatnonzero((mapping < 0) & (self.cap == c))
            spare = np.flatnonzero(~used & (self.cap == c))
            mapping[todo] = spare[: todo.size]
        return mapping

    # ------------------------------------------------------------------------------ GPU indices
    def _indices(self, placed: Mapping[int, Parts], prev: Mapping[int, tuple[int, ...]],
                 keep_whole: list[int], used: np.ndarray | None = None) -> dict[int, tuple[int, ...]]:
        """GPU ids: ``keep_whole`` rows keep theirs; placed continuing jobs keep what they can.

        ``used`` (updated here): the cluster's GPUs held by ``keep_whole``, if the caller has them.
        """
        # A mask of the taken GPUs, built in one NumPy step; the per-job work is on plain lists (a job
        # touches a few GPUs, where NumPy's per-call overhead costs more than the work).
        if used is None:
            used = np.zeros(self.cluster.num_gpus, dtype=bool)
            n = sum(len(prev[r]) for r in keep_whole)
            used[np.fromiter(itertools.chain.from_iterable(prev[r] for r in keep_whole), dtype=np.int64,
                             count=n)] = True
        node_of = self._gpu_node
        out: dict[int, tuple[int, ...]] = {r: prev[r] for r in keep_whole}
        rest: dict[int, list[tuple[int, int]]] = {}
        chosen: dict[int, list[int]] = {}
        nodes = self._node_list
        for r, parts in placed.items():
            old = prev.get(r)
            if not old:
                rest[r] = parts
                chosen[r] = []
                continue
            todo = []
            mine: list[int] = []
            for b, c in parts:
                node = nodes[b]
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
        got = self._take_free(part_b, part_c, used)
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

    def _take_free(self, part_b: np.ndarray, part_c: np.ndarray, used: np.ndarray) -> list[int]:
        """For each part (node position, count) in order, the next ``count`` GPUs of that node not in
        ``used``, lowest first; the parts' GPUs concatenated in the parts' order."""
        if part_b.size == 0:
            return []
        touched, inv = np.unique(part_b, return_inverse=True)
        inv = inv.ravel()
        caps = self.cap[touched]
        ends = np.cumsum(caps)
        gpu = np.arange(int(ends[-1])) + np.repeat(self.first[touched] - (ends - caps), caps)
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


class _Evictor:
    """Chooses which continuing jobs leave a node so that a new job fits (anchored layout)."""

    #: Nodes examined per eviction, cheapest-looking first (bounds the work on huge clusters).
    CANDIDATES = 64

    def __init__(self, tp: TypePlacer, pool: BinPool, p_row: np.ndarray, p_node: np.ndarray,
                 p_cnt: np.ndarray, kept_usage: np.ndarray) -> None:
        """``kept_usage``: GPUs the continuing jobs hold per node position (updated as they leave)."""
        self.tp, self.pool = tp, pool
        self._parts = (p_row, p_node, p_cnt)
        self._built = False
        self.kept_usage = kept_usage

    def _build(self) -> None:
        p_node = self._parts[1]
        n = self.tp.nodes.size
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
