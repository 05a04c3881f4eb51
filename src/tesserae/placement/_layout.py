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
It is built only when the anchored layout had to move or spread a job.

Inside a physical node every continuing job keeps as many of its previous GPU indices as its part
there allows; the others take the lowest free indices. A job is *spread* only when no consolidated
layout was found (a gang that fits one node gets one node; a larger one whole nodes plus one).

Cost: per-node NumPy arrays and loops over jobs only. Best fit keeps one heap of nodes per free
count (node sizes are small), so a job is placed in O(node size) heap operations.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import min_weight_full_bipartite_matching

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
        # The same as lists, for the per-GPU work of ``_indices``.
        self._gpu_node: list[int] = cluster.gpu_node.tolist()
        self._node_list: list[int] = self.nodes.tolist()
        self._first_list: list[int] = self.first.tolist()
        self._cap_list: list[int] = self.cap.tolist()

    # ------------------------------------------------------------------------------- entry point
    def place(self, hosts: list[int], size: Mapping[int, int], prev: Mapping[int, tuple[int, ...]]) -> TypeLayout:
        """``hosts`` in priority order; ``prev`` maps the continuing ones to the GPUs they keep if possible."""
        anchored = self._anchored(hosts, size, prev)
        if not anchored.moved and not anchored.spread:
            return anchored
        regrouped = self._regrouped(hosts, size, prev)
        if (len(regrouped.spread), len(regrouped.moved)) < (len(anchored.spread), len(anchored.moved)):
            return regrouped
        return anchored

    # ---------------------------------------------------------------------------------- helpers
    def _prev_parts(self, rows: list[int], prev: Mapping[int, tuple[int, ...]]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, node position, GPU count) of every part the continuing ``rows`` held, vectorised."""
        if not rows:
            e = np.empty(0, dtype=np.int64)
            return e, e, e
        lengths = np.fromiter((len(prev[r]) for r in rows), dtype=np.int64, count=len(rows))
        gpus = np.fromiter(itertools.chain.from_iterable(prev[r] for r in rows), dtype=np.int64,
                           count=int(lengths.sum()))
        row_of = np.repeat(np.asarray(rows, dtype=np.int64), lengths)
        node = self.pos[self.cluster.gpu_node[gpus]]
        key = row_of * (self.nodes.size + 1) + node
        uniq, counts = np.unique(key, return_counts=True)
        return uniq // (self.nodes.size + 1), uniq % (self.nodes.size + 1), counts

    # --------------------------------------------------------------------------- anchored layout
    def _anchored(self, hosts: list[int], size: Mapping[int, int], prev: Mapping[int, tuple[int, ...]]
                  ) -> TypeLayout:
        kept_rows = [r for r in hosts if r in prev]
        p_row, p_node, p_cnt = self._prev_parts(kept_rows, prev)
        usage = np.bincount(p_node, weights=p_cnt, minlength=self.nodes.size).astype(np.int64)
        avail0 = self.cap - usage
        new_rows = sorted((r for r in hosts if r not in prev), key=lambda r: -size[r])  # stable: priority
        # 1. Best fit, largest first, around the running jobs; 2. if a job does not fit, an exact search
        # for a packing of the new jobs around them (bounded); 3. only then evict running jobs.
        placed = self._fill_around(avail0, new_rows, size)
        if placed is None:
            placed = self._exact_around(avail0, new_rows, size)
        if placed is not None:
            gpus = self._indices(placed, prev, kept_rows)
            return TypeLayout(gpus, set(), set(), "anchored", 0)
        pool = BinPool(self.cap, avail0)
        kept = set(kept_rows)
        ev = _Evictor(self, pool, p_row, p_node, p_cnt)
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
        gpus = self._indices(placed, prev, keep_whole)
        moved = {r for r in hosts if r in prev and gpus[r] != prev[r]}
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
    def _regrouped(self, hosts: list[int], size: Mapping[int, int], prev: Mapping[int, tuple[int, ...]]
                   ) -> TypeLayout:
        cont = [r for r in hosts if r in prev]
        p_row, p_node, p_cnt = self._prev_parts(cont, prev)
        held: dict[int, Parts] = {}
        for r, b, c in zip(p_row.tolist(), p_node.tolist(), p_cnt.tolist(), strict=True):
            held.setdefault(r, []).append((b, c))
        # Units: the single-node continuing jobs of one previous node, each multi-node continuing job,
        # and each new job. Largest first (ties: groups before new jobs, then by priority).
        groups: dict[int, list[int]] = {}
        units: list[tuple[int, int, list[int]]] = []
        rank = {r: i for i, r in enumerate(hosts)}
        for r in cont:
            parts = held[r]
            if len(parts) == 1:
                groups.setdefault(parts[0][0], []).append(r)
            else:
                units.append((size[r], rank[r], [r]))
        for rows in groups.values():
            units.append((sum(size[r] for r in rows), min(rank[r] for r in rows), rows))
        units.extend((size[r], len(hosts) + rank[r], [r]) for r in hosts if r not in prev)
        units.sort(key=lambda u: (-u[0], u[1]))
        pool = BinPool(self.cap)
        logical: dict[int, Parts] = {}
        spread: set[int] = set()
        leftovers: list[int] = []
        for total, _, rows in units:
            if len(rows) == 1:
                parts = pool.consolidated(total)
                if parts is None:
                    leftovers.append(rows[0])
                else:
                    logical[rows[0]] = parts
                continue
            b = pool.best_single(total)
            if b < 0:
                leftovers.extend(rows)  # the group does not fit as one: its jobs go one by one
                continue
            pool.change(b, -total)
            for r in rows:
                logical[r] = [(b, size[r])]
        leftovers.sort(key=lambda r: (-size[r], rank[r]))
        for r in leftovers:
            parts = pool.consolidated(size[r])
            if parts is None:
                parts = pool.spread(size[r])
                spread.add(r)
            logical[r] = parts
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
                 keep_whole: list[int]) -> dict[int, tuple[int, ...]]:
        """GPU ids: ``keep_whole`` rows keep theirs; placed continuing jobs keep what they can."""
        # Plain Python sets and lists: a round touches a few GPUs per job, where NumPy's per-call
        # overhead on such small arrays costs more than the work.
        node_of = self._gpu_node
        taken: set[int] = set(itertools.chain.from_iterable(prev[r] for r in keep_whole))
        out: dict[int, tuple[int, ...]] = {r: prev[r] for r in keep_whole}
        rest: dict[int, list[tuple[int, int]]] = {}
        chosen: dict[int, list[int]] = {}
        nodes = self._node_list
        for r, parts in placed.items():
            old = prev.get(r)
            todo = []
            mine: list[int] = []
            for b, c in parts:
                if old:
                    node = nodes[b]
                    here = [g for g in old if node_of[g] == node and g not in taken][:c]
                    if here:
                        taken.update(here)
                        mine.extend(here)
                        c -= len(here)
                if c:
                    todo.append((b, c))
            chosen[r] = mine
            rest[r] = todo
        first, cap = self._first_list, self._cap_list
        for r, todo in rest.items():
            mine = chosen[r]
            for b, c in todo:
                lo = first[b]
                free = [g for g in range(lo, lo + cap[b]) if g not in taken][:c]
                assert len(free) == c, "layout gave a node more GPUs than it has free"
                taken.update(free)
                mine.extend(free)
            out[r] = tuple(sorted(mine))
        return out


class _Evictor:
    """Chooses which continuing jobs leave a node so that a new job fits (anchored layout)."""

    #: Nodes examined per eviction, cheapest-looking first (bounds the work on huge clusters).
    CANDIDATES = 64

    def __init__(self, tp: TypePlacer, pool: BinPool, p_row: np.ndarray, p_node: np.ndarray,
                 p_cnt: np.ndarray) -> None:
        self.tp, self.pool = tp, pool
        self._parts = (p_row, p_node, p_cnt)
        self._built = False
        self.kept_usage = np.bincount(p_node, weights=p_cnt, minlength=tp.nodes.size).astype(np.int64)

    def _build(self) -> None:
        p_row, p_node, p_cnt = self._parts
        self.on_node: dict[int, dict[int, int]] = {}
        self.of_row: dict[int, Parts] = {}
        for r, b, c in zip(p_row.tolist(), p_node.tolist(), p_cnt.tolist(), strict=True):
            self.on_node.setdefault(b, {})[r] = c
            self.of_row.setdefault(r, []).append((b, c))
        self.jobs_on = np.bincount(p_node, minlength=self.tp.nodes.size).astype(np.int64)
        # Per node, its jobs as (GPUs, row), most GPUs first, then by row: built when a node is first
        # examined, dropped when one of its jobs leaves (a round examines the same nodes many times).
        self._by_size: dict[int, list[tuple[int, int]]] = {}
        self._built = True

    def _jobs_by_size(self, b: int) -> list[tuple[int, int]]:
        lst = self._by_size.get(b)
        if lst is None:
            lst = sorted(((c, r) for r, c in self.on_node.get(b, {}).items()), key=lambda cr: (-cr[0], cr[1]))
            self._by_size[b] = lst
        return lst

    def _evict(self, rows: list[int]) -> None:
        for r in rows:
            for b, c in self.of_row.pop(r):
                self._by_size.pop(b, None)
                del self.on_node[b][r]
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
        by_need = np.argsort(need, kind="stable")[: self.CANDIDATES]
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
                for r in self.on_node.get(b, {}):
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
