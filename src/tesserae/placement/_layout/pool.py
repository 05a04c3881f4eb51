"""Free GPUs per node of one GPU type, with the consolidated best fit every layout step uses.

Best fit keeps one heap of node positions per free count (node sizes are small), so a job is placed
in O(node size) heap operations: a gang that fits one node takes the node with the fewest free GPUs
that still holds it (lowest position on ties); a larger gang takes whole free nodes, largest first,
plus a best-fit node for the rest. ``spread`` is the fallback when no consolidated layout exists.
"""

from __future__ import annotations

import heapq

import numpy as np

from tesserae.placement._layout.nodes import Parts


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
