"""The nodes of one GPU type as the layout steps see them, and the layout they produce.

Every step works on node *positions* 0..n-1 among the type's nodes (``Parts``: a job's GPU count
on each position it uses); only the GPU choice turns positions back into GPU ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tesserae.core.cluster import Cluster

Parts = list[tuple[int, int]]  # (node position within the type, GPU count)


class TypeNodes:
    """The nodes of one GPU type: their sizes and first GPUs by position (built once per cluster)."""

    def __init__(self, cluster: Cluster, type_index: int) -> None:
        self.cluster = cluster
        self.nodes = np.flatnonzero(cluster.node_type == type_index)
        self.cap = cluster.node_num_gpus[self.nodes]
        self.first = cluster.node_first_gpu[self.nodes]
        self.pos = np.full(cluster.num_nodes, -1, dtype=np.int64)
        self.pos[self.nodes] = np.arange(self.nodes.size)
        # As lists, for the per-GPU work of the GPU choice (a job's previous GPUs and their nodes).
        self.gpu_node: list[int] = cluster.gpu_node.tolist()
        self.node_list: list[int] = self.nodes.tolist()
        #: Whether all the type's nodes have one size (the bulk step needs it).
        self.uniform = bool(self.nodes.size) and int(self.cap.min()) == int(self.cap.max())


@dataclass
class TypeLayout:
    """The GPUs of every job of one type, and how the layout was found."""

    gpus: dict[int, tuple[int, ...]]
    moved: set[int] = field(default_factory=set)  # continuing jobs on other GPUs than before
    spread: set[int] = field(default_factory=set)  # jobs not consolidated
    method: str = "anchored"  # "anchored" or "regrouped"
    evictions: int = 0

    def cost(self) -> tuple[int, int]:
        """What the better layout has less of: spread jobs first, then moved ones."""
        return len(self.spread), len(self.moved)
