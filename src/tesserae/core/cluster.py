"""Cluster model: nodes of one GPU type each, grouped in racks, with flat NumPy views.

Global GPU ids run node by node (node 0 holds GPUs 0..g0-1, and so on). Placement and the
simulator work on the flat arrays so that no hot path loops over GPUs in Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tesserae.core.errors import InputError

DEFAULT_GPU_TYPE = "v100"
DEFAULT_NODES_PER_RACK = 16


@dataclass(frozen=True, slots=True)
class Node:
    index: int
    gpu_type: str
    num_gpus: int
    rack: int
    first_gpu: int

    @property
    def gpu_ids(self) -> range:
        return range(self.first_gpu, self.first_gpu + self.num_gpus)


class Cluster:
    """An immutable set of nodes. Arrays are indexed by node or by global GPU id."""

    def __init__(self, nodes: list[Node] | tuple[Node, ...], gpu_types: tuple[str, ...] | None = None) -> None:
        """``gpu_types`` fixes the type indices (a part of a larger cluster keeps its types' numbers,
        even those it has no GPU of); by default they come from the nodes in order."""
        if not nodes:
            raise InputError("a cluster needs at least one node")
        self.nodes: tuple[Node, ...] = tuple(nodes)
        types: list[str] = list(gpu_types or ())
        for n in self.nodes:
            if n.gpu_type not in types:
                types.append(n.gpu_type)
        self.gpu_types: tuple[str, ...] = tuple(types)
        self.node_num_gpus = np.array([n.num_gpus for n in self.nodes], dtype=np.int64)
        self.node_first_gpu = np.array([n.first_gpu for n in self.nodes], dtype=np.int64)
        self.node_rack = np.array([n.rack for n in self.nodes], dtype=np.int64)
        self.node_type = np.array([types.index(n.gpu_type) for n in self.nodes], dtype=np.int64)
        self.num_gpus = int(self.node_num_gpus.sum())
        self.num_nodes = len(self.nodes)
        self.gpu_node = np.repeat(np.arange(self.num_nodes), self.node_num_gpus)
        self.gpu_type = self.node_type[self.gpu_node]

    @cached_property
    def gpus_by_type(self) -> dict[str, int]:
        return {t: int(self.node_num_gpus[self.node_type == i].sum()) for i, t in enumerate(self.gpu_types)}

    @cached_property
    def gpu_node_list(self) -> list[int]:
        """``gpu_node`` as a Python list: faster than NumPy for a handful of scalar lookups."""
        return self.gpu_node.tolist()

    @property
    def max_node_gpus(self) -> int:
        return int(self.node_num_gpus.max())

    def describe(self) -> str:
        parts = []
        for t in self.gpu_types:
            sizes = self.node_num_gpus[self.node_type == self.gpu_types.index(t)]
            for size in sorted(set(sizes.tolist()), reverse=True):
                parts.append(f"{int((sizes == size).sum())}x{size}:{t}")
        return ",".join(parts)

    def __repr__(self) -> str:
        return f"Cluster({self.describe()}, {self.num_gpus} GPUs)"


def build_cluster(groups: list[tuple[int, int, str]], nodes_per_rack: int = DEFAULT_NODES_PER_RACK) -> Cluster:
    """Nodes from (count, gpus per node, gpu type) groups; racks fill up in order."""
    nodes: list[Node] = []
    gpu = 0
    for count, per_node, gpu_type in groups:
        for _ in range(count):
            i = len(nodes)
            nodes.append(Node(i, gpu_type, per_node, i // nodes_per_rack, gpu))
            gpu += per_node
    return Cluster(nodes)


_GROUP = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*(?::\s*([A-Za-z0-9_.\-]+))?\s*$")


def parse_cluster_spec(spec: str, nodes_per_rack: int = DEFAULT_NODES_PER_RACK) -> Cluster:
    """Parse ``16x4`` or ``16x8:a100,8x4:v100`` (NODESxGPUS[:TYPE], comma-separated).

    A spec without a type uses ``v100``, the reference type of the built-in throughput model.
    Reading a Tiresias cluster-spec CSV is I/O and lives in ``tesserae.traces.cluster_file``.
    """
    groups: list[tuple[int, int, str]] = []
    for part in spec.split(","):
        m = _GROUP.match(part)
        if not m:
            raise InputError(
                f"cannot parse cluster group '{part.strip()}' in '{spec}'; "
                "expected NODESxGPUS[:TYPE], e.g. 16x4 or 16x8:a100,8x4:v100",
                field="cluster",
            )
        count, per_node = int(m.group(1)), int(m.group(2))
        if count <= 0 or per_node <= 0:
            raise InputError(f"cluster group '{part.strip()}' must have at least one node and one GPU",
                             field="cluster")
        groups.append((count, per_node, (m.group(3) or DEFAULT_GPU_TYPE).lower()))
    return build_cluster(groups, nodes_per_rack)
