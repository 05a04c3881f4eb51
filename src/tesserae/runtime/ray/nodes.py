"""The nodes of the ``ray`` executor: one agent per GPU node, the committed view, and polling the agents.

``NodeRoster`` keeps membership: ``ray.nodes()`` lists the alive nodes; every one with at least one
``GPU`` gets an agent (``ray.agent.NodeAgent``: ``num_cpus=0``, ``num_gpus`` = all the node's GPUs,
pinned with ``NodeAffinitySchedulingStrategy(node, soft=False)``, ``max_restarts=0``, detached and
named after the state folder and the node, so a restarted controller finds it). A node is *ready*
once its agent answers; the view (``ray.layout.View``) is rebuilt from the ready and reachable
nodes when the controller takes a change (``view_change``/``commit``). A node gone from the alive
nodes is reported through ``on_gone`` at once.

``AgentPoller`` calls the agents without ever blocking on a slow one: those running parts every
``SYNC_INTERVAL``, the others every ``IDLE_PING`` (a liveness check, which also keeps them from
exiting as idle while this controller lives). Each poll of a node with parts carries a lease
renewal for the parts the controller holds there (``ray.lease``). An agent that Ray says died
(``RayActorError``) makes its node gone; one whose polls fail as unavailable, or go unanswered
for ``suspect_after``, makes its node *unreachable*: it leaves the view (nothing new starts
there) until it answers again, and its parts end by the evidence (their exit records on the
shared state folder) or, failing that, once their lease is surely over (``ray.gangs.sweep``).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError
from tesserae.runtime.executor.gpus import Gpu, gpu_type_of
from tesserae.runtime.executor.protocol import NodeState
from tesserae.runtime.ray.agent import AGENT_VERSION, NodeAgent
from tesserae.runtime.ray.connect import NAMESPACE, first_line
from tesserae.runtime.ray.layout import NodeInfo, View, build_view
from tesserae.runtime.ray.lease import LeaseBook

SYNC_INTERVAL = 0.25
#: A poll unanswered this long is late: the node's exit records are read (evidence of a crash, before
#: ``suspect_after`` makes the node unreachable).
LATE_POLL = 0.5
IDLE_PING = 2.0
MEMBERSHIP_INTERVAL = 0.5
CALL_TIMEOUT = 30.0
RETRY_AFTER = 10.0
#: At start-up, how long agents still starting are waited for once some node is up.
READY_GRACE = 10.0


def node_states(view: View, ready: Collection[str], unreachable: Collection[str] = (),
                answered: Mapping[str, float] | None = None,
                unhealthy: Mapping[str, Mapping[str, str]] | None = None) -> list[NodeState]:
    """Each node of the committed view: ``alive``, ``draining`` (Ray drains it), ``unreachable`` (its
    agent does not answer) or ``dead`` (not ready any more: gone from Ray); a node not ``alive``
    leaves the view at the next decision. ``answered``: when each node's agent last answered a poll;
    ``unhealthy``: per node, the GPUs (devices) its agent's health probe finds failing, with why."""
    answered, unhealthy = answered or {}, unhealthy or {}
    draining: set[str] = set()
    with contextlib.suppress(Exception):  # a private Ray call: without it no node shows as draining
        from ray._private.state import state as ray_state

        draining = set(ray_state.get_draining_nodes())
    out, first = [], 0
    for n in view.nodes:
        state = ("dead" if n.node_id not in ready else "unreachable" if n.node_id in unreachable
                 else "draining" if n.node_id in draining else "alive")
        bad = unhealthy.get(n.node_id, {})
        out.append(NodeState(n.node_id, n.hostname or n.ip, n.ip, n.gpu_type, list(range(first, first + len(n.gpus))),
                             state, answered.get(n.node_id),
                             {first + i: bad[g.device] for i, g in enumerate(n.gpus) if g.device in bad}))
        first += len(n.gpus)
    return out


def marked_pids(ray: Any, agents: Collection[Any], marker: str) -> list[int]:
    """Processes carrying the run marker ``marker``, on every agent's node (those that answer in time)."""
    refs = [a.pids_with_marker.remote(marker) for a in agents]
    pids: list[int] = []
    for ref in refs:
        with contextlib.suppress(Exception):
            pids.extend(ray.get(ref, timeout=10.0))
    return pids


def kill_marked(ray: Any, agents: Collection[Any], marker: str) -> None:
    """SIGKILL the processes carrying the run marker ``marker`` on every agent's node."""
    refs = [a.kill_marker.remote(marker) for a in agents]
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=10.0)


def node_info(node_id: str, info: dict[str, Any]) -> NodeInfo:
    """What an agent said of itself (``NodeAgent.info``) as the scheduler's node; no GPU: none usable."""
    name = info["hostname"] or info["ip"]
    gpus = tuple(Gpu(str(d), str(t), f"{gname} on {name} (node {node_id[:12]})", mem, bool(virtual))
                 for d, t, gname, mem, virtual in info["gpus"])
    return NodeInfo(node_id, str(info["ip"]), str(info["hostname"]), gpus[0].gpu_type if gpus else "", gpus)


class NodeRoster:
    def __init__(self, ray: Any, gpu_type: str, idle_seconds: float, log: Callable[[str], None],
                 on_gone: Callable[[str, str], None]) -> None:
        self.ray, self.gpu_type, self.idle_seconds, self.log = ray, gpu_type, idle_seconds, log
        #: Called with (node id, why) when a ready node left or lost its agent.
        self.on_gone = on_gone
        self.view = View((), None, (), ())
        self.key = ""
        self.agents: dict[str, Any] = {}
        self.ready: dict[str, NodeInfo] = {}
        #: Ready nodes whose agent does not answer (``AgentPoller``): out of the view until it does.
        self.unreachable: set[str] = set()
        self._agent_cls: Any = None
        self._pending: dict[str, list[Any]] = {}  # node id -> [handle, info ref, since, warned]
        self._retry: dict[str, float] = {}
        self._last_members = 0.0
        self.changed = False

    def bring_up(self, state_dir: Path, wait_seconds: float, where: str) -> None:
        """Start (or find) the agents of the GPU nodes, wait for them, and commit the first view."""
        self.key = hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]
        self._agent_cls = self.ray.remote(NodeAgent)
        start = time.monotonic()
        while True:
            self.members(time.monotonic(), force=True)
            waited = time.monotonic() - start
            # Once some node is up, a slow agent (busy node, frozen worker) joins later rather than hold the start.
            if not self._pending or waited > wait_seconds or (self.ready and waited > min(wait_seconds, READY_GRACE)):
                break
            time.sleep(0.05)
        for node_id, p in self._pending.items():
            self.log(f"ray: the agent on node {node_id[:12]} is not up after {time.monotonic() - start:.0f} s (are its "
                     "GPUs held by other Ray work?); the node joins once it is")
            p[3] = True
        if not self.ready:
            raise InputError(f"{where} has no node with GPUs that Tesserae can use: declare them "
                             "with 'ray start --num-gpus N' (or --virtual-gpus N for a local instance)")
        # A deterministic first order (later joins are appended): by address, then id.
        self.ready = dict(sorted(self.ready.items(), key=lambda kv: (kv[1].ip, kv[1].hostname, kv[0])))
        self.view = build_view(list(self.ready.values()))
        self.changed = False

    def members(self, now: float, force: bool = False) -> None:
        """Compare with Ray's alive nodes (throttled): report the gone, start agents on the new."""
        if not force and now - self._last_members < MEMBERSHIP_INTERVAL:
            return
        self._last_members = now
        try:
            alive = {n["NodeID"]: n for n in self.ray.nodes() if n.get("Alive")}
        except Exception as e:  # the GCS is unreachable for a moment: try again later
            self.log(f"ray: cannot list the nodes: {first_line(e)}")
            return
        for node_id in list(self.ready):
            if node_id not in alive:
                self.on_gone(node_id, "left the Ray cluster")
        for node_id in list(self._pending):
            if node_id not in alive:
                del self._pending[node_id]
        self._start_agents(alive, now)
        if self._pending:
            self._collect_agents(now)

    def _start_agents(self, alive: dict[str, dict[str, Any]], now: float) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        for node_id, n in alive.items():
            count = int(n.get("Resources", {}).get("GPU", 0))
            if count < 1 or node_id in self.ready or node_id in self._pending or self._retry.get(node_id, 0) > now:
                continue
            handle = self._agent_cls.options(
                name=f"tesserae-agent-{self.key}-{node_id}", namespace=NAMESPACE, lifetime="detached",
                get_if_exists=True, num_cpus=0, num_gpus=count, max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(node_id, self.idle_seconds)
            self._pending[node_id] = [handle, handle.info.remote(self._node_type(n)), now, False]

    def _node_type(self, node: dict[str, Any]) -> str:
        for k in node.get("Resources", {}):
            if k.startswith("accelerator_type:"):
                return gpu_type_of(k.split(":", 1)[1])
        return self.gpu_type

    def _collect_agents(self, now: float) -> None:
        """The agents that answered since they were started: ready nodes (or a retry later)."""
        ray = self.ray
        refs = [p[1] for p in self._pending.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        done = set(ready)
        for node_id, p in list(self._pending.items()):
            if p[1] not in done:
                if now - p[2] > CALL_TIMEOUT and not p[3]:
                    p[3] = True
                    self.log(f"ray: the agent on node {node_id[:12]} is not up after {CALL_TIMEOUT:g} s (are the "
                             "node's GPUs held by other Ray work?)")
                continue
            del self._pending[node_id]
            try:
                info = ray.get(p[1])
            except Exception as e:
                self._retry[node_id] = now + RETRY_AFTER
                self.log(f"ray: the agent on node {node_id[:12]} failed to start: {first_line(e)}")
                continue
            if info.get("version") != AGENT_VERSION:
                self.log(f"ray: node {node_id[:12]} has an agent of another Tesserae version; replacing it (its "
                         "runs are written off and requeued)")
                with contextlib.suppress(Exception):
                    ray.kill(p[0])
                continue
            node = node_info(node_id, info)
            if not node.gpus:
                self._retry[node_id] = now + RETRY_AFTER
                continue
            self.agents[node_id] = p[0]
            self.ready[node_id] = node
            self.changed = True
            on = f" on {info['iface']}" if info.get("iface") else ""
            self.log(f"ray: node {node_id[:12]} ({info['ip']}{on}, {len(node.gpus)} {node.gpu_type} GPU(s)) joined")

    def drop(self, node_id: str) -> NodeInfo | None:
        """Forget a node that is gone (it leaves the view at the next decision)."""
        self.agents.pop(node_id, None)
        self.unreachable.discard(node_id)
        self.changed = True
        return self.ready.pop(node_id, None)

    def reachable(self, node_id: str, yes: bool, why: str = "") -> None:
        """A ready node's agent answers again (``yes``) or not; it leaves or rejoins the view."""
        if node_id not in self.ready or yes == (node_id not in self.unreachable):
            return
        self.changed = True
        info = self.ready[node_id]
        if yes:
            self.unreachable.discard(node_id)
            self.log(f"ray: node {node_id[:12]} ({info.ip}) answers again; it rejoins the view")
        else:
            self.unreachable.add(node_id)
            self.log(f"ray: node {node_id[:12]} ({info.ip}) {why}; it leaves the view until it answers again")

    def usable(self) -> list[NodeInfo]:
        return [n for node_id, n in self.ready.items() if node_id not in self.unreachable]

    def view_change(self) -> View | None:
        """The new view when nodes joined or left (or became unreachable) since the committed one, else None."""
        self.members(time.monotonic())
        usable = self.usable()
        if tuple(n.node_id for n in usable) == self.view.node_ids:
            return None
        return build_view(usable)

    def kill_idle_agents(self) -> None:
        """Kill the agents that hold no live part: their GPUs go back to Ray."""
        ray = self.ray
        refs = {n: a.busy.remote() for n, a in self.agents.items()}
        for node_id, ref in refs.items():
            try:
                busy = ray.get(ref, timeout=5.0)
            except Exception:
                continue
            if not busy:
                with contextlib.suppress(Exception):
                    ray.kill(self.agents[node_id])


class AgentPoller:
    """Polls the agents (see the module docstring); part statuses go to ``on_status``. ``held(node)``
    names the parts whose leases each poll of ``node`` renews."""

    def __init__(self, ray: Any, roster: NodeRoster, log: Callable[[str], None],
                 on_status: Callable[[str, dict[str, Any]], None], leases: LeaseBook,
                 held: Callable[[str], list[str]]) -> None:
        self.ray, self.roster, self.log, self.on_status = ray, roster, log, on_status
        self.leases, self.held = leases, held
        #: How long a poll may go unanswered before its node counts as unreachable.
        self.suspect_after = max(2.0, leases.lease / 4)
        self._inflight: dict[str, tuple[Any, float]] = {}
        self._warned: dict[str, float] = {}
        self._failing: dict[str, float] = {}  # node id -> since when its polls fail
        self._pinged: dict[str, float] = {}
        #: When each node's agent last answered a poll (wall-clock seconds): its heartbeat, for display.
        self.answered: dict[str, float] = {}
        self._last_sync = 0.0
        #: The GPU health probe each agent runs (``NodeAgent.health``): its command (None: no probe; with
        #: ``virtual`` False, only on nodes whose GPUs NVML named), its interval, and what each node's says.
        self.health_command: list[str] | None = None
        self.health_virtual = False
        self.health_interval = 30.0
        self.unhealthy: dict[str, dict[str, str]] = {}
        self._health_asked: dict[str, tuple[Any, float]] = {}

    def forget(self, node_id: str) -> None:
        self._inflight.pop(node_id, None)
        self._health_asked.pop(node_id, None)
        self.unhealthy.pop(node_id, None)
        self._failing.pop(node_id, None)
        self._warned.pop(node_id, None)

    def late(self, now: float) -> set[str]:
        """The agents whose polls fail, or have gone unanswered for ``LATE_POLL`` (a healthy agent answers in
        milliseconds): their parts' exit records are worth reading (``GangBook.sweep``)."""
        return {n for n, (_, sent) in self._inflight.items() if now - sent > LATE_POLL} | set(self._failing)

    def suspect(self, node_id: str, now: float) -> None:
        """Evidence that ``node_id``'s agent is gone (its launchers saw it go): it counts as failing, so out of
        the view, until a poll answers again."""
        self._failing.setdefault(node_id, now)
        self.roster.reachable(node_id, False, "is late to answer and its part launchers saw its agent go")

    def unreachable(self, now: float) -> set[str]:
        """The agents whose polls fail, or have gone unanswered for ``suspect_after``."""
        late = {n for n, (_, sent) in self._inflight.items() if now - sent > self.suspect_after}
        return late | set(self._failing)

    def sync(self, busy: set[str], now: float | None = None) -> None:
        """One round (throttled to ``SYNC_INTERVAL``): membership, then the agents' answers so far.
        ``busy``: the nodes with live parts (a node with parts and no agent is gone)."""
        now = time.monotonic() if now is None else now
        if now - self._last_sync < SYNC_INTERVAL:
            return
        self._last_sync = now
        roster = self.roster
        roster.members(now)
        for node_id in busy - roster.agents.keys():
            roster.on_gone(node_id, "has no agent")
        for node_id, agent in roster.agents.items():
            if node_id not in self._inflight and (node_id in busy or now - self._pinged.get(node_id, 0.0) >= IDLE_PING):
                held = self.held(node_id)
                renewal = self.leases.renewal(node_id) if held else None
                self._inflight[node_id] = (agent.poll.remote(held, renewal), now)
                self._pinged[node_id] = now
        if self._inflight:
            self._collect(now)
        if self.health_command is not None:
            self._health(now)
        bad = self.unreachable(now)
        for node_id in list(roster.ready):
            if node_id in bad:
                since = self._failing.get(node_id)
                why = "does not answer (its agent's calls fail)" if since is not None else (
                    f"has not answered for {self.suspect_after:g} s")
                roster.reachable(node_id, False, why)
            else:
                roster.reachable(node_id, True)

    def _health(self, now: float) -> None:
        """Ask each agent for its GPUs' health every ``health_interval`` (the probe runs on the node, in
        a thread of its own); take the answers that came."""
        ray, asked = self.ray, self._health_asked
        for node_id, agent in self.roster.agents.items():
            info = self.roster.ready.get(node_id)
            sent = asked.get(node_id)
            if info is None or (sent is not None and (sent[0] is not None or now - sent[1] < self.health_interval)):
                continue
            devices = [g.device for g in info.gpus if self.health_virtual or not g.virtual]
            if devices:
                asked[node_id] = (agent.health.remote(self.health_command, devices, self.health_interval), now)
        refs = [ref for ref, _ in asked.values() if ref is not None]
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        done = set(ready)
        for node_id, (ref, sent) in list(asked.items()):
            if ref is None or ref not in done:
                continue
            asked[node_id] = (None, sent)
            try:
                said = ray.get(ref)
            except Exception as e:  # the agent is gone or failing: the polls say so; keep the last verdict
                self.log(f"ray: the GPU health of node {node_id[:12]} could not be read: {first_line(e)}")
                continue
            if "" in said:  # not probed there
                if node_id not in self.unhealthy:
                    self.log(f"ray: node {node_id[:12]}: GPU health not probed ({said['']})")
                said = {}
            old, new = self.unhealthy.get(node_id, {}), {str(d)[:16]: str(w)[:200] for d, w in said.items()}
            for d in sorted(set(old) | set(new)):
                if old.get(d) != new.get(d):
                    self.log(f"ray: node {node_id[:12]} GPU {d}: " + (f"unhealthy: {new[d]}" if d in new
                                                                     else "healthy again"))
            self.unhealthy[node_id] = new

    def _collect(self, now: float) -> None:
        ray = self.ray
        refs = [r for r, _ in self._inflight.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05)
        done = set(ready)
        for node_id, (ref, sent) in list(self._inflight.items()):
            if ref not in done:
                if now - sent > CALL_TIMEOUT and now - self._warned.get(node_id, 0.0) > CALL_TIMEOUT:
                    self.log(f"ray: the agent on node {node_id[:12]} has not answered for {now - sent:.0f} s")
                    self._warned[node_id] = now
                continue
            del self._inflight[node_id]
            try:
                statuses = ray.get(ref)
            except ray.exceptions.RayActorError as e:
                if isinstance(e, ray.exceptions.ActorUnavailableError):
                    self._failing.setdefault(node_id, now)  # evidence it may be gone: see unreachable()
                else:
                    self.roster.on_gone(node_id, "lost its agent")
                continue
            except Exception as e:
                self._failing.setdefault(node_id, now)
                self.log(f"ray: polling the agent on node {node_id[:12]} failed: {first_line(e)}")
                continue
            self._failing.pop(node_id, None)
            self.answered[node_id] = time.time()
            for part_dir, st in statuses.items():
                self.on_status(part_dir, st)
