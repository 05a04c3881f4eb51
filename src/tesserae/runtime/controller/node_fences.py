"""A decision's fences (``core.fences``) from the runtime's state: the nodes an admin drained (the
store's ``drained_nodes``), GPUs the executor found unhealthy, and the jobs pinned to a node
(``tesserae submit --node``).

Nodes are named as the executor names them (``Executor.nodes``: a Ray node's name, a Slurm node's,
this machine's host name); a job or a drain may also name a node by its id. Names are turned into
node indices of the current view at every decision, so a node that leaves and comes back keeps its
drain and its pinned jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.fences import Fences
from tesserae.runtime.executor.protocol import Executor, NodeState
from tesserae.runtime.store import nodes as drained_nodes
from tesserae.runtime.store.database import Store


def find_node(nodes: list[NodeState], name: str) -> NodeState | None:
    """The node with the id ``name``, else the first called ``name``, if the view has one (``namesakes``:
    whether that name is ambiguous)."""
    return next((n for n in nodes if n.id == name), None) or next((n for n in nodes if n.name == name), None)


def namesakes(nodes: list[NodeState], name: str) -> list[NodeState]:
    """The nodes called ``name`` when several are and none has it as its id (Ray nodes of one host):
    such a name cannot pin or drain one of them."""
    same = [n for n in nodes if n.name == name]
    return same if len(same) > 1 and not any(n.id == name for n in nodes) else []


def node_indices(cluster: Cluster, node: NodeState) -> tuple[int, ...]:
    """The cluster's node indices holding ``node``'s GPUs (one, but for a view that splits a machine)."""
    gpus = [g for g in node.gpus if 0 <= g < cluster.num_gpus]
    return tuple(sorted({int(cluster.gpu_node[g]) for g in gpus}))


def closed_gpus(store: Store, executor: Executor[Any], cluster: Cluster) -> np.ndarray:
    """A flag per GPU of the view: True on a drained node, or where the executor's probe says unhealthy."""
    closed = np.zeros(cluster.num_gpus, dtype=bool)
    names = drained_nodes.drained(store)
    for node in executor.nodes():
        shut = node.gpus if node.name in names or node.id in names else list(node.unhealthy)
        closed[[g for g in shut if 0 <= g < cluster.num_gpus]] = True
    return closed


def fences(store: Store, executor: Executor[Any], cluster: Cluster, pins: Mapping[int, str]) -> Fences | None:
    """The fences of the next decision: closed GPUs, and ``pins`` (row -> node name) as node indices;
    None when nothing is fenced."""
    closed = closed_gpus(store, executor, cluster)
    pinned: dict[int, tuple[int, ...]] = {}
    if pins:
        view = executor.nodes()
        for row, name in pins.items():
            node = find_node(view, name)
            pinned[row] = () if node is None else node_indices(cluster, node)
    if not pinned and not closed.any():
        return None
    return Fences(closed=closed if closed.any() else None, pinned=pinned)
