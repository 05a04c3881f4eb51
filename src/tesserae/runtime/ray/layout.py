"""Pure helpers of the ``ray`` executor (no Ray needed): the cluster view, GPU identity, gang layout.

A GPU's *stable identity* is ``(Ray node id, local index)``: the local index is its position in
the list of Ray GPU ids the node's agent holds. The scheduler core numbers GPUs globally, node
after node (``core.cluster``), so when a node joins or leaves the global ids of other GPUs shift;
``remap`` carries the previous view's ids over to the new one through the stable identities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tesserae.core.cluster import Cluster, Node
from tesserae.runtime.executor.gpus import Gpu
from tesserae.runtime.executor.protocol import ViewChange

GpuKey = tuple[str, int]


@dataclass(frozen=True)
class NodeInfo:
    """A Ray node whose agent is up: what the scheduler may use there."""

    node_id: str
    ip: str
    hostname: str
    gpu_type: str
    gpus: tuple[Gpu, ...]  # Gpu.device = the Ray GPU id, i.e. what goes into CUDA_VISIBLE_DEVICES


@dataclass(frozen=True)
class View:
    """The cluster the scheduler sees: nodes in a stable order (first seen first)."""

    nodes: tuple[NodeInfo, ...]
    cluster: Cluster | None  # None when no node is usable
    gpus: tuple[Gpu, ...]  # by global id
    keys: tuple[GpuKey, ...]  # by global id

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(n.node_id for n in self.nodes)

    def gid_of(self) -> dict[GpuKey, int]:
        return {k: i for i, k in enumerate(self.keys)}

    def node(self, node_id: str) -> NodeInfo | None:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        return None


def build_view(nodes: Sequence[NodeInfo]) -> View:
    """Global GPU ids run node by node, in the given order; every node in rack 0 (Ray knows no racks)."""
    out_nodes, gpus, keys = [], [], []
    for n in nodes:
        if not n.gpus:
            continue
        out_nodes.append(Node(len(out_nodes), n.gpu_type, len(n.gpus), 0, len(gpus)))
        gpus.extend(n.gpus)
        keys.extend((n.node_id, i) for i in range(len(n.gpus)))
    return View(tuple(n for n in nodes if n.gpus), Cluster(out_nodes) if out_nodes else None, tuple(gpus),
                tuple(keys))


def remap(old: View, new: View) -> dict[int, int | None]:
    """Old global GPU id -> new global id (None: its node left)."""
    gid = new.gid_of()
    return {i: gid.get(k) for i, k in enumerate(old.keys)}


def view_change(old: View, new: View | None) -> ViewChange | None:
    """What ``Executor.view_change`` offers when the committed view ``old`` becomes ``new`` (None: unchanged)."""
    return None if new is None else ViewChange(new.cluster, remap(old, new), new)


def split_processes(nproc: int, gpus_per_node: Sequence[int]) -> list[int]:
    """Processes per node of a job spread over nodes: ``nproc`` in proportion to the job's GPUs on each
    node (largest remainders), at least one per node. ``nproc`` = the job's GPU count gives one process
    per GPU; ``nproc`` = 1 gives one process per node."""
    total = sum(gpus_per_node)
    if len(gpus_per_node) == 1:
        return [max(1, nproc)]
    exact = [nproc * g / total for g in gpus_per_node]
    counts = [int(x) for x in exact]
    rest = nproc - sum(counts)
    for i in sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))[:max(0, rest)]:
        counts[i] += 1
    return [max(1, c) for c in counts]


@dataclass(frozen=True)
class PartPlan:
    """One node's share of a run: its GPUs (stable keys and Ray ids) and its ranks."""

    index: int
    node_id: str
    ip: str
    keys: tuple[GpuKey, ...]
    devices: tuple[str, ...]
    first_rank: int
    nproc: int

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "node_id": self.node_id, "ip": self.ip, "keys": [list(k) for k in self.keys],
                "devices": list(self.devices), "first_rank": self.first_rank, "nproc": self.nproc}

    @staticmethod
    def from_json(d: dict[str, Any]) -> PartPlan:
        return PartPlan(int(d["index"]), str(d["node_id"]), str(d["ip"]), tuple((str(n), int(i)) for n, i in d["keys"]),
                        tuple(str(x) for x in d["devices"]), int(d["first_rank"]), int(d["nproc"]))


def plan_parts(view: View, gpu_ids: Sequence[int], nproc: int) -> tuple[list[PartPlan], int]:
    """Group a run's global GPU ids by node (rank 0 on the node of its lowest GPU id); returns the
    parts and the world size (the number of processes of the whole run)."""
    by_node: dict[str, list[int]] = {}
    for g in sorted(gpu_ids):
        by_node.setdefault(view.keys[g][0], []).append(g)
    counts = split_processes(nproc, [len(v) for v in by_node.values()])
    parts, rank = [], 0
    for k, ((node_id, gids), n) in enumerate(zip(by_node.items(), counts, strict=True)):
        info = view.node(node_id)
        assert info is not None
        parts.append(PartPlan(k, node_id, info.ip, tuple(view.keys[g] for g in gids),
                              tuple(view.gpus[g].device for g in gids), rank, n))
        rank += n
    return parts, rank


def aggregate_exit(ends: Sequence[tuple[int | None, float | None, bool]]) -> tuple[int | None, float | None]:
    """The exit of a gang from its parts' ends ``(code, time, lost)``, all parts ended.

    A lost part (its node or agent died, or it was orphaned) makes the run lost: ``(None, None)``, so
    the job is requeued whatever the other parts did (they may have failed because a peer vanished).
    Otherwise 0 when every part succeeded, else the code of the first part that failed (by end time),
    as the one-machine launcher does for its copies.
    """
    if any(lost for _, _, lost in ends):
        return None, None
    times = [t for _, t, _ in ends if t is not None]
    end = max(times) if times else None
    failed = sorted(((t if t is not None else float("inf"), c) for c, t, _ in ends if c != 0), key=lambda x: x[0])
    coded = [c for _, c in failed if c is not None]
    if coded:
        return coded[0], end
    if failed:  # ended without a word (killed with its process group): no code
        return None, end
    return 0, end
