"""What the continuing jobs of one GPU type held last round, per (job, node): computed once per layout.

Both layouts start from it: the anchored one keeps these parts where they are, the regrouped one
groups the jobs that shared a node and weighs the node matching by them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tesserae.placement._layout.nodes import TypeNodes


@dataclass
class HeldParts:
    """What the continuing jobs held, one entry per (job, node position) part.

    ``row``/``node``/``cnt``: the parts, sorted by row then node; ``gpus``: every GPU they held
    (``rows`` in order, each job's GPUs in its order).
    """

    rows: list[int]  # the continuing jobs, in priority order
    row: np.ndarray
    node: np.ndarray
    cnt: np.ndarray
    gpus: np.ndarray

    def usage(self, n_nodes: int) -> np.ndarray:
        """GPUs held on each node position."""
        return np.bincount(self.node, weights=self.cnt, minlength=n_nodes).astype(np.int64)

    def by_row(self) -> dict[int, list[tuple[int, int]]]:
        """Each continuing job's parts as (node position, GPU count), by node."""
        out: dict[int, list[tuple[int, int]]] = {}
        for r, b, c in zip(self.row.tolist(), self.node.tolist(), self.cnt.tolist(), strict=True):
            out.setdefault(r, []).append((b, c))
        return out


def held_parts(nodes: TypeNodes, rows: list[int], prev: Mapping[int, tuple[int, ...]]) -> HeldParts:
    """What the continuing ``rows`` held (``prev``: their GPUs), vectorised over all their GPUs."""
    if not rows:
        e = np.empty(0, dtype=np.int64)
        return HeldParts(rows, e, e, e, e)
    lengths = np.fromiter((len(prev[r]) for r in rows), dtype=np.int64, count=len(rows))
    gpus = np.fromiter(itertools.chain.from_iterable(prev[r] for r in rows), dtype=np.int64,
                       count=int(lengths.sum()))
    row_of = np.repeat(np.asarray(rows, dtype=np.int64), lengths)
    n = nodes.nodes.size
    node = nodes.pos[nodes.cluster.gpu_node[gpus]]
    key = row_of * (n + 1) + node
    uniq, counts = np.unique(key, return_counts=True)
    return HeldParts(rows, uniq // (n + 1), uniq % (n + 1), counts, gpus)


def continuing(hosts: list[int], prev: Mapping[int, tuple[int, ...]]) -> list[int]:
    """The hosts that ran last round (``prev`` holds them), in priority order."""
    return [r for r in hosts if r in prev]
