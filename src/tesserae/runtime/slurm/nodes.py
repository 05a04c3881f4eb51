"""The nodes of Tesserae's Slurm partition: their GPUs, their state, and the cluster view built from them.

Every GPU of a node is a GRES type of its own, ``MODEL_INDEX`` (``a100_0`` ... ``a100_7``, count 1
each; docs/slurm.md): that is how a run asks Slurm for exactly the GPUs the placement chose
(``--gres=gpu:a100_2:1,gpu:a100_5:1``). The GPU's *stable identity* is (node name, index), as
(Ray node id, index) is under Ray, so the view, the remapping of global GPU ids when nodes come
and go, and the gang layout are ``ray_layout``'s (pure code, no Ray).

A node is in the view while Slurm says it can run jobs: a node that is drained or draining,
down, failed or failing, not responding, powered down or rebooting, or in ``INVAL`` state
leaves it (its runs are lost and requeued: ``runs``), and comes back when Slurm resumes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from tesserae.runtime.executor.gpus import Gpu
from tesserae.runtime.executor.protocol import NodeState
from tesserae.runtime.ray.layout import NodeInfo, View, build_view

#: State words (``scontrol show node``'s ``State=IDLE+DRAIN``) that take a node out of the view.
UNUSABLE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND",
                      "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP", "REBOOT_ISSUED",
                      "REBOOT_REQUESTED", "INVAL", "FUTURE", "UNKNOWN", "MAINTENANCE", "MAINT"})
#: Of those, the ones where slurmd does not answer: what Slurm says of such a node's jobs is no proof.
SILENT = frozenset({"DOWN", "FAIL", "NOT_RESPONDING", "NO_RESPOND", "POWERED_DOWN", "POWER_DOWN", "UNKNOWN"})
_GRES = re.compile(r"^gpu:([^:(]+):(\d+)")
_PER_GPU = re.compile(r"^(.+)_(\d+)$")


@dataclass(frozen=True)
class SlurmNode:
    """A node of the partition as ``scontrol show node`` describes it."""

    name: str
    addr: str
    hostname: str
    states: frozenset[str]
    gpus: tuple[int, ...]  # GPU indices (from the per-GPU GRES types), ascending
    model: str  # the GPUs' model (the types' common prefix)
    partitions: tuple[str, ...]
    problem: str | None = None  # why its GRES cannot be pinned (then it takes no run)
    gres_model: str = ""  # the GRES types' prefix as slurm.conf spells it (``A100`` of ``A100_3``)

    @property
    def usable(self) -> bool:
        return self.problem is None and bool(self.gpus) and not (self.states & UNUSABLE)

    @property
    def silent(self) -> bool:
        """slurmd does not answer: Slurm cannot stop or vouch for what runs there."""
        return bool(self.states & SILENT)

    def info(self) -> NodeInfo:
        gpus = tuple(Gpu(str(i), self.model, f"{self.model} #{i} on {self.name}") for i in self.gpus)
        return NodeInfo(self.name, self.addr, self.hostname, self.model, gpus)


def parse_gres(text: str) -> tuple[tuple[int, ...], str, str | None]:
    """(GPU indices, model as spelt, problem) of a node's ``Gres=`` (``gpu:a100_0:1(S:0),gpu:a100_1:1(S:0)``)."""
    indices: list[int] = []
    models: set[str] = set()
    for entry in (e.strip() for e in re.split(r",(?![^()]*\))", text or "")):
        if not entry.startswith("gpu"):
            continue
        m = _GRES.match(entry)
        per = _PER_GPU.match(m.group(1)) if m else None
        if m is None or per is None or m.group(2) != "1":
            return (), "", (f"Gres={text} does not name each GPU: give every GPU a GRES type of its own, "
                            f"MODEL_INDEX (gpu:a100_0:1,gpu:a100_1:1,...; gres.conf: Name=gpu Type=a100_0 "
                            "File=/dev/nvidia0 ...), so that a run gets exactly the GPUs Tesserae chose")
        models.add(per.group(1))
        indices.append(int(per.group(2)))
    if len(models) > 1:
        return (), "", f"Gres={text} mixes GPU models ({', '.join(sorted(models))}); one model per node"
    if len(set(indices)) != len(indices):
        return (), "", f"Gres={text} names a GPU index twice"
    return tuple(sorted(indices)), (models.pop() if models else ""), None


def parse_node(rec: Mapping[str, str]) -> SlurmNode:
    name = rec.get("NodeName", "")
    states = frozenset(w.rstrip("*~#!%$@^-") for w in rec.get("State", "UNKNOWN").upper().split("+") if w)
    gpus, model, problem = parse_gres(rec.get("Gres", ""))
    parts = tuple(p for p in rec.get("Partitions", "").split(",") if p)
    return SlurmNode(name, rec.get("NodeAddr", name), rec.get("NodeHostName", name), states, gpus, model.lower(),
                     parts, problem, model)


class Roster:
    """The partition's nodes as last polled, and the view the scheduler works on (committed)."""

    def __init__(self, partition: str) -> None:
        self.partition = partition
        self.nodes: dict[str, SlurmNode] = {}
        self.view: View = build_view([])
        #: Set when the usable nodes differ from the committed view's (a decision should take the new one).
        self.changed = False

    def update(self, records: list[dict[str, str]]) -> list[SlurmNode]:
        """Take a poll of ``scontrol show node``; returns the nodes that became unusable since the last one."""
        nodes = {n.name: n for n in map(parse_node, records) if self.partition in n.partitions}
        lost = [n for name, n in nodes.items() if not n.usable and self.nodes.get(name, n).usable]
        lost += [n for name, n in self.nodes.items() if name not in nodes]
        self.nodes = nodes
        if self.usable_names() != self.view.node_ids:
            self.changed = True
        return lost

    def usable_names(self) -> tuple[str, ...]:
        return tuple(name for name, n in sorted(self.nodes.items()) if n.usable)

    def view_change(self) -> View | None:
        """The view of the usable nodes now, when it differs from the committed one."""
        if self.usable_names() == self.view.node_ids:
            return None
        return build_view([self.nodes[name].info() for name in self.usable_names()])

    def states(self) -> list[NodeState]:
        """Every node of the partition for display: alive, draining or dead (GPU ids: the committed view's)."""
        gid = self.view.gid_of()
        out = []
        for name, n in sorted(self.nodes.items()):
            state = "alive" if n.usable else "draining" if n.states & {"DRAIN", "DRAINING", "DRAINED"} and not \
                n.silent else "dead"
            ids = [gid[(name, pos)] for pos in range(len(n.gpus)) if (name, pos) in gid]  # keys: (node, position)
            out.append(NodeState(name, name, n.addr, n.model, ids, state))
        return out
