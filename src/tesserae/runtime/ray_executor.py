"""The ``ray`` executor: jobs run on the nodes of a Ray cluster, through one agent actor per node.

Ray does discovery, placement and failure detection; there is no protocol of our own:

- **Nodes.** ``ray.nodes()`` lists the alive nodes and their resources. Every alive node with at
  least one ``GPU`` gets an agent (``ray_agent.NodeAgent``): ``num_cpus=0``, ``num_gpus`` = all the
  node's GPUs (Ray hands it their ids, which become the jobs' ``CUDA_VISIBLE_DEVICES``, and no other
  Ray work can take them), pinned with ``NodeAffinitySchedulingStrategy(node, soft=False)``,
  ``max_restarts=0``. A node is part of the cluster view once its agent answers; the view is
  rebuilt at the start of a decision when nodes joined or left (``view_change``/``commit_view``).
- **Identity.** The scheduler core numbers GPUs globally, node after node, so ids shift when the
  view changes; each GPU's stable identity is (node id, local index) (``ray_layout``), recorded
  with every run in the store (table ``ray_runs``), and the controller remaps running jobs' GPU
  ids onto each new view.
- **Runs.** A run is a gang of *parts*, one per node it spans: the node's agent starts the part's
  processes through ``ray_launcher`` with ``CUDA_VISIBLE_DEVICES`` for that node's GPUs of the run,
  ``MASTER_ADDR`` (the rank-0 node's IP; 127.0.0.1 for a one-node run), ``MASTER_PORT`` (a port the
  rank-0 agent found free), ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/``LOCAL_WORLD_SIZE``,
  ``NODE_RANK``/``NNODES``. Processes: ``--nproc`` split over the nodes in proportion to the run's
  GPUs there, at least one per node (``ray_layout.split_processes``): ``--nproc`` = GPUs gives one
  process per GPU, the default 1 gives one per node. Stop = SIGTERM to every part, SIGKILL after
  the grace period. When one part fails or is lost, the rest of the gang gets SIGTERM, then
  SIGKILL after the grace period; a lost part makes the whole run lost (the job is requeued and
  resumes from its checkpoint), otherwise the first failing part's code is the run's.
- **Failure.** The controller polls the agents (one call per agent with running parts every
  0.25 s, the others every 2 s; never blocking on a slow one) and ``ray.nodes()``. A node gone
  from the alive nodes, or an agent that Ray says died (``RayActorError``), makes that node's
  parts lost at once; the node leaves the view at the next decision; the other jobs keep running
  untouched. The part launchers watch their agent and SIGKILL their job the moment it is gone,
  and the controller kills any process of a lost part left on its own machine, so a requeued job
  never runs twice at once.
- **Controller restarts.** Agents are *detached* and named after the state folder and the node,
  so a restarted controller finds them (``get_if_exists``) and adopts the runs they hold, as the
  local executor adopts its processes: jobs keep running across a controller restart. An agent
  with no live part that no controller has called for ``idle_seconds`` exits by itself; one left
  by an older Tesserae (another ``AGENT_VERSION``) is killed and replaced (its parts are then
  written off and their jobs requeued). Not tying the agents to the controller's lifetime is what
  keeps jobs alive across a controller crash; the idle exit is what keeps a server that is gone
  for good from leaving actors behind.
- **Files.** The state folder (job folders: logs, checkpoints, progress, exit records) must be
  on a filesystem shared by the server and every node: a requeued job resumes on another node
  from the same checkpoint folder. Logs are not streamed: rank 0's part appends to the job's
  ``output.log``; the other parts write ``runs/RUN/part-K/output.log``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.runtime import job_env, procs, ray_auth, ray_launcher
from tesserae.runtime.executor import Adopted, Launch, NodeState, ViewChange
from tesserae.runtime.gpus import Gpu, gpu_type_of
from tesserae.runtime.ray_agent import AGENT_VERSION, PART_VAR, NodeAgent
from tesserae.runtime.ray_layout import NodeInfo, PartPlan, View, aggregate_exit, build_view, plan_parts, remap

NAMESPACE = "tesserae"
SYNC_INTERVAL = 0.25
IDLE_PING = 2.0
MEMBERSHIP_INTERVAL = 0.5
CALL_TIMEOUT = 30.0
CONNECT_TIMEOUT = 60.0
RETRY_AFTER = 10.0
RAY_HINT = "pip install 'tesserae[ray]'"

_TABLE = "CREATE TABLE IF NOT EXISTS ray_runs (run_dir TEXT PRIMARY KEY, layout TEXT NOT NULL)"


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError(f"--executor ray needs Ray, which is not installed here ({RAY_HINT})",
                         field="executor") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


@dataclass
class RunPart:
    """One part of a run as it goes: its plan (node, GPUs, ranks), its folder, and how it ended."""

    plan: PartPlan
    part_dir: str
    pid: int | None = None
    ticks: int | None = None
    ended: bool = False
    code: int | None = None
    time: float | None = None
    lost: bool = False

    def end(self, code: int | None, t: float | None, lost: bool) -> None:
        if not self.ended:
            self.ended, self.code, self.time, self.lost = True, code, t, lost

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "part_dir": self.part_dir}

    @staticmethod
    def from_json(d: dict[str, Any]) -> RunPart:
        return RunPart(PartPlan.from_json(d), str(d["part_dir"]))


@dataclass
class RayRun:
    """The controller's handle of a run (what ``Proc`` is for the local executor)."""

    marker: str
    parts: list[RunPart]
    world: int
    gpus: tuple[int, ...] = ()
    adopted: bool = False
    stopping: bool = False
    teardown_deadline: float | None = None
    killed: bool = False
    result: tuple[int | None, float | None] | None = None
    finished_at: float | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.parts[0].pid if self.parts else None

    @property
    def ticks(self) -> int | None:
        return self.parts[0].ticks if self.parts else None


class RayExecutor:
    """See the module docstring. The controller thread is its only caller, but for ``gpus``."""

    name = "ray"

    def __init__(self, address: str | None, *, virtual_gpus: int | None = None, gpu_type: str = "v100",
                 grace_seconds: float = 30.0, idle_seconds: float = 600.0,
                 log: Callable[[str], None] | None = None, pass_env: tuple[str, ...] = ()) -> None:
        self.ray = require_ray()
        #: Variables of each node's environment that jobs get besides the allowlisted base (``job_env``).
        self.pass_env = pass_env
        self.address = address
        self.virtual_gpus = virtual_gpus
        self.gpu_type = gpu_type.lower()
        self.grace = grace_seconds
        self.idle_seconds = idle_seconds
        self.log = log or (lambda msg: None)
        self.view = View((), None, (), ())
        self.store: Any = None
        self.key = ""
        self.started_ray = False
        self._agent_cls: Any = None
        self._agents: dict[str, Any] = {}
        self._ready: dict[str, NodeInfo] = {}
        self._pending: dict[str, list[Any]] = {}  # node id -> [handle, info ref, since, warned]
        self._retry: dict[str, float] = {}
        self._inflight: dict[str, tuple[Any, float]] = {}
        self._pinged: dict[str, float] = {}
        self.runs: dict[str, RayRun] = {}
        self._by_part: dict[str, tuple[RayRun, RunPart]] = {}
        self._last_sync = 0.0
        self._last_members = 0.0
        self._changed = False

    # ------------------------------------------------------------------ connection
    @property
    def gpus(self) -> list[Gpu]:
        return list(self.view.gpus)

    @property
    def cluster(self) -> Cluster | None:
        return self.view.cluster

    def nodes(self) -> list[NodeState]:
        """Each node of the committed view: ``alive``, ``draining`` (Ray drains it) or ``dead`` (gone
        from Ray; it leaves the view at the next decision)."""
        draining: set[str] = set()
        with contextlib.suppress(Exception):  # a private Ray call: without it no node shows as draining
            from ray._private.state import state as ray_state

            draining = set(ray_state.get_draining_nodes())
        out, first = [], 0
        for n in self.view.nodes:
            state = "dead" if n.node_id not in self._ready else "draining" if n.node_id in draining else "alive"
            out.append(NodeState(n.node_id, n.hostname or n.ip, n.ip, n.gpu_type,
                                 list(range(first, first + len(n.gpus))), state))
            first += len(n.gpus)
        return out

    def describe_location(self) -> str:
        return "a local Ray instance" if self.address is None else f"the Ray cluster at {self.address}"

    def describe_tracking(self) -> str | None:
        return None  # each node's agent tracks its parts' processes

    def info(self) -> dict[str, Any]:
        kind = "virtual" if self.view.gpus[0].virtual else "NVML"
        return {"gpu_source": f"ray ({kind})", "ray_address": self.address or "local"}

    def prepare(self) -> None:
        """Join the Ray cluster (or start a local one). The server does it before it writes anything, so a
        cluster it cannot join leaves no state folder behind."""
        ray = self.ray
        if ray.is_initialized():
            return
        opts: dict[str, Any] = {"namespace": NAMESPACE, "include_dashboard": False, "log_to_driver": False,
                                "logging_level": logging.ERROR}
        if self.address is None:
            if self.virtual_gpus is not None:
                opts["num_gpus"] = self.virtual_gpus
            try:
                ray.init(address="local", **opts)
            except Exception as e:
                raise InputError(f"cannot start a local Ray instance: {_first_line(e)}") from None
            self.started_ray = True
        else:
            self.check_address()
            self._init_with_timeout(opts)

    def open(self, state_dir: Path, store: Any, wait_seconds: float = 30.0) -> None:
        """Join the Ray cluster (if not yet), then bring up the agents of its GPU nodes."""
        ray = self.ray
        self.prepare()
        self.key = hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]
        self.store = store
        store.execute(_TABLE)
        self._agent_cls = ray.remote(NodeAgent)
        deadline = time.monotonic() + wait_seconds
        while True:
            self._members(time.monotonic(), force=True)
            if not self._pending or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for node_id, p in self._pending.items():
            self.log(f"ray: the agent on node {node_id[:12]} is not up after {wait_seconds:g} s (are its GPUs held "
                     "by other Ray work?); the node joins once it is")
            p[3] = True
        if not self._ready:
            raise InputError(f"{self.describe_location()} has no node with GPUs that Tesserae can use: declare them "
                             "with 'ray start --num-gpus N' (or --virtual-gpus N for a local instance)")
        # A deterministic first order (later joins are appended): by address, then id.
        self._ready = dict(sorted(self._ready.items(), key=lambda kv: (kv[1].ip, kv[1].hostname, kv[0])))
        self.view = build_view(list(self._ready.values()))
        self._changed = False

    def check_address(self) -> None:
        """A quick look before anything else: is the address well formed, and does something listen there?
        (``ray.init`` itself retries an unreachable address for minutes.)"""
        if self.address is None or self.address == "auto":
            return
        hp = _host_port(self.address)
        if hp is None:
            raise InputError(f"'{self.address}' is not a Ray address (HOST:PORT, ray://HOST:PORT or auto)",
                             field="ray-address")
        try:
            socket.create_connection(hp, timeout=5.0).close()
        except OSError as e:
            raise InputError(f"cannot reach the Ray cluster at '{self.address}': {e.strerror or e}",
                             field="ray-address") from None

    def _init_with_timeout(self, opts: dict[str, Any]) -> None:
        ray = self.ray
        failure: list[BaseException] = []
        token_on = ray_auth.enable_token_auth()  # an explicit address never turns it on by itself (ray_auth)

        def go() -> None:
            try:
                ray.init(address=self.address, **opts)
            except BaseException as e:
                failure.append(e)

        with ray_auth.captured_stderr() as logged:  # Ray's core says why it failed there, not in the error
            t = threading.Thread(target=go, name="tesserae-ray-init", daemon=True)
            t.start()
            t.join(CONNECT_TIMEOUT)
        if t.is_alive():
            raise InputError(f"no answer from a Ray cluster at '{self.address}' after {CONNECT_TIMEOUT:g} s "
                             "(is it a Ray head node's GCS address, HOST:6379?)", field="ray-address")
        if failure:
            auth = ray_auth.auth_failure(str(self.address), failure[0], "".join(logged), token_on)
            raise InputError(auth or f"cannot connect to the Ray cluster at '{self.address}': "
                                     f"{_first_line(failure[0])}", field="ray-address")

    def close(self) -> str:
        """On server shutdown: agents that hold no live part are killed (their GPUs go back to Ray);
        the others keep their jobs running for the next server. A local Ray instance stops here."""
        self._shutdown()
        if self.started_ray:
            return ("stopped, and the local Ray instance with it (running jobs were stopped; they resume from their "
                    "checkpoints at the next start)")
        return "stopped (running jobs keep running; the next server adopts them)"

    def _shutdown(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            return
        if not self.started_ray:
            refs = {n: a.busy.remote() for n, a in self._agents.items()}
            for node_id, ref in refs.items():
                try:
                    busy = ray.get(ref, timeout=5.0)
                except Exception:
                    continue
                if not busy:
                    with contextlib.suppress(Exception):
                        ray.kill(self._agents[node_id])
        elif self.runs:
            self.log("ray: the local Ray instance stops with the server: running jobs are stopped and resume "
                     "from their checkpoints at the next start")
        with contextlib.suppress(Exception):
            ray.shutdown()

    # ------------------------------------------------------------------ membership
    def _agent_name(self, node_id: str) -> str:
        return f"tesserae-agent-{self.key}-{node_id}"

    def _node_type(self, node: dict[str, Any]) -> str:
        for k in node.get("Resources", {}):
            if k.startswith("accelerator_type:"):
                return gpu_type_of(k.split(":", 1)[1])
        return self.gpu_type

    def _members(self, now: float, force: bool = False) -> None:
        if not force and now - self._last_members < MEMBERSHIP_INTERVAL:
            return
        self._last_members = now
        ray = self.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        try:
            alive = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        except Exception as e:  # the GCS is unreachable for a moment: try again later
            self.log(f"ray: cannot list the nodes: {_first_line(e)}")
            return
        for node_id in list(self._ready):
            if node_id not in alive:
                self._node_gone(node_id, "left the Ray cluster")
        for node_id in list(self._pending):
            if node_id not in alive:
                del self._pending[node_id]
        for node_id, n in alive.items():
            count = int(n.get("Resources", {}).get("GPU", 0))
            if count < 1 or node_id in self._ready or node_id in self._pending or self._retry.get(node_id, 0) > now:
                continue
            handle = self._agent_cls.options(
                name=self._agent_name(node_id), namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                num_cpus=0, num_gpus=count, max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(node_id, self.idle_seconds)
            self._pending[node_id] = [handle, handle.info.remote(self._node_type(n)), now, False]
        if not self._pending:
            return
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
                self.log(f"ray: the agent on node {node_id[:12]} failed to start: {_first_line(e)}")
                continue
            if info.get("version") != AGENT_VERSION:
                self.log(f"ray: node {node_id[:12]} has an agent of another Tesserae version; replacing it (its "
                         "runs are written off and requeued)")
                with contextlib.suppress(Exception):
                    ray.kill(p[0])
                continue
            name = info["hostname"] or info["ip"]
            gpus = tuple(Gpu(str(d), str(t), f"{gname} on {name} (node {node_id[:12]})", mem, bool(virtual))
                         for d, t, gname, mem, virtual in info["gpus"])
            if not gpus:
                self._retry[node_id] = now + RETRY_AFTER
                continue
            self._agents[node_id] = p[0]
            self._ready[node_id] = NodeInfo(node_id, str(info["ip"]), str(info["hostname"]), gpus[0].gpu_type, gpus)
            self._changed = True
            self.log(f"ray: node {node_id[:12]} ({info['ip']}, {len(gpus)} {gpus[0].gpu_type} GPU(s)) joined")

    def _node_gone(self, node_id: str, why: str) -> None:
        info = self._ready.pop(node_id, None)
        self._agents.pop(node_id, None)
        self._inflight.pop(node_id, None)
        self._changed = True
        lost = 0
        for _run, part in list(self._by_part.values()):
            if part.plan.node_id != node_id or part.ended:
                continue
            rec = ray_launcher.read_exit(part.part_dir)
            if rec is not None and not rec["orphaned"]:
                part.end(int(rec["code"]), float(rec["time"]), False)  # type: ignore[arg-type]
            else:
                part.end(None, None, True)
                lost += 1
            _fence_local(part.part_dir)
        where = f" ({info.ip})" if info is not None else ""
        self.log(f"ray: node {node_id[:12]}{where} {why}" + (f"; {lost} run part(s) on it are lost" if lost else ""))

    # ------------------------------------------------------------------ polling
    def _sync(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if now - self._last_sync < SYNC_INTERVAL:
            return
        self._last_sync = now
        self._members(now)
        ray = self.ray
        busy = {p.plan.node_id for run in self.runs.values() if run.result is None for p in run.parts if not p.ended}
        for node_id in busy - self._agents.keys():
            self._node_gone(node_id, "has no agent")
        for node_id, agent in self._agents.items():
            # Agents with parts are polled every SYNC_INTERVAL, the others every IDLE_PING (a liveness
            # check, which also keeps them from exiting as idle while this controller lives).
            if node_id not in self._inflight and (node_id in busy or now - self._pinged.get(node_id, 0.0) >= IDLE_PING):
                self._inflight[node_id] = (agent.poll.remote(), now)
                self._pinged[node_id] = now
        if not self._inflight:
            return
        refs = [r for r, _ in self._inflight.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05)
        done = set(ready)
        for node_id, (ref, since) in list(self._inflight.items()):
            if ref not in done:
                if now - since > CALL_TIMEOUT:
                    self.log(f"ray: the agent on node {node_id[:12]} has not answered for {now - since:.0f} s")
                    self._inflight[node_id] = (ref, now)
                continue
            del self._inflight[node_id]
            try:
                statuses = ray.get(ref)
            except ray.exceptions.ActorUnavailableError:
                continue  # unreachable for a moment: Ray tells when it is dead
            except ray.exceptions.RayActorError:
                self._node_gone(node_id, "lost its agent")
                continue
            except Exception as e:
                self.log(f"ray: polling the agent on node {node_id[:12]} failed: {_first_line(e)}")
                continue
            for part_dir, st in statuses.items():
                entry = self._by_part.get(part_dir)
                if entry is not None and not st["alive"]:
                    entry[1].end(st.get("code"), st.get("time"), bool(st.get("orphaned")))

    def watch(self, now: float) -> bool:
        """Called by the controller every tick: poll (throttled); True when nodes joined or left."""
        self._sync()
        changed, self._changed = self._changed, False
        return changed

    def view_change(self) -> ViewChange | None:
        """The new cluster view when nodes joined or left since the committed one, else None."""
        self._members(time.monotonic())
        if tuple(self._ready) == self.view.node_ids:
            return None
        new = build_view(list(self._ready.values()))
        return ViewChange(new.cluster, remap(self.view, new), new)

    def commit_view(self, change: ViewChange) -> None:
        assert isinstance(change.detail, View)
        self.view = change.detail
        gid = self.view.gid_of()
        for run in self.runs.values():
            if all(k in gid for p in run.parts for k in p.plan.keys):
                run.gpus = tuple(gid[k] for p in run.parts for k in p.plan.keys)

    # ------------------------------------------------------------------ the executor interface
    def _call(self, ref: Any, timeout: float = CALL_TIMEOUT) -> Any:
        return self.ray.get(ref, timeout=timeout)

    def _register(self, run: RayRun) -> None:
        self.runs[run.marker] = run
        for p in run.parts:
            self._by_part[p.part_dir] = (run, p)

    def spawn(self, launch: Launch) -> RayRun:
        """Start a run on its GPUs (global ids of the committed view) as a gang of one part per node.
        Each node's agent puts the node's own allowlisted base under the job contract (``ray_agent``).

        Raises OSError when a part cannot start at all (the job fails, as with the local executor); a
        part whose node or agent vanished meanwhile is lost instead (the job is requeued).
        """
        if launch.account is not None:
            raise ValueError("the ray executor runs jobs as the Ray workers' account; it cannot take another")
        ray = self.ray
        argv, env, cwd, log_path, run_dir = launch.argv, launch.env, launch.cwd, launch.log_path, launch.run_dir
        gpus = launch.gpus
        plans, world = plan_parts(self.view, list(gpus), launch.nproc)
        marker = str(run_dir)
        parts = [RunPart(p, str(run_dir / f"part-{p.index}")) for p in plans]
        run = RayRun(marker, parts, world, tuple(gpus))
        self.store.execute("INSERT OR REPLACE INTO ray_runs (run_dir, layout) VALUES (?, ?)",
                           (marker, json.dumps({"world": world, "parts": [p.to_json() for p in parts]})))
        self._register(run)
        run_dir.mkdir(parents=True, exist_ok=True)
        rank0 = self._agents.get(parts[0].plan.node_id)
        port = None
        if rank0 is not None:
            try:
                port = int(self._call(rank0.free_port.remote()))
            except Exception as e:
                self.log(f"ray: the agent on node {parts[0].plan.node_id[:12]} did not answer: {_first_line(e)}")
        if port is None:
            for p in parts:
                p.end(None, None, True)
            return run
        master = "127.0.0.1" if len(parts) == 1 else parts[0].plan.ip
        refs: dict[int, Any] = {}
        for p in parts:
            agent = self._agents.get(p.plan.node_id)
            if agent is None:
                p.end(None, None, True)
                continue
            part_env = {**env, **job_env.device_env(p.plan.devices, master, port), "NODE_RANK": str(p.plan.index),
                        "NNODES": str(len(parts)), "TESSERAE_NODE_ID": p.plan.node_id, "TESSERAE_NODE_IP": p.plan.ip}
            log = str(log_path) if p.plan.index == 0 else str(Path(p.part_dir) / "output.log")
            refs[p.plan.index] = agent.spawn.remote({"part_dir": p.part_dir, "log": log, "cwd": str(cwd), "argv": argv,
                                                "env": part_env, "pass_env": list(self.pass_env),
                                                "marker": marker, "nproc": p.plan.nproc,
                                                "first_rank": p.plan.first_rank, "world": world})
        if refs:
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=CALL_TIMEOUT)
        errors = []
        for index, ref in refs.items():
            p = parts[index]
            try:
                res = self._call(ref, timeout=0)
            except Exception as e:  # the agent died, or did not answer in time: the part is written off
                self.log(f"ray: starting part {index} of {marker} on node {p.plan.node_id[:12]} failed: "
                         f"{_first_line(e)}")
                p.end(None, None, True)
                with contextlib.suppress(Exception):
                    self._agents[p.plan.node_id].kill.remote([p.part_dir])
                continue
            if "error" in res:
                errors.append(f"on node {p.plan.ip}: {res['error']}")
                p.end(127, time.time(), False)
            else:
                p.pid, p.ticks = res["pid"], res["ticks"]
        if errors:
            self.kill(run)
            self._finish(run)
            raise OSError(errors[0])
        if len(parts) > 1:
            spans = "; ".join(f"ranks {q.first_rank}-{q.first_rank + q.nproc - 1} on {q.ip} (node {q.node_id[:12]}, "
                              f"GPUs {','.join(q.devices)})"
                              + ("" if q.index == 0 else f", log {p.part_dir}/output.log")
                              for p in parts for q in [p.plan])
            _append_line(log_path, f"run spans {len(parts)} nodes, world size {world}, master {master}:{port}: {spans}")
        return run

    def _evaluate(self, run: RayRun, now: float) -> bool:
        if run.result is not None:
            return True
        if all(p.ended for p in run.parts):
            run.result = aggregate_exit([(p.code, p.time, p.lost) for p in run.parts])
            run.finished_at = now
            return True
        bad = [p for p in run.parts if p.ended and (p.lost or p.code != 0)]
        if bad and run.teardown_deadline is None:
            run.teardown_deadline = now + self.grace
            p = bad[0]
            what = "was lost (its node or agent is gone)" if p.lost else f"ended with code {p.code}"
            self.log(f"ray: part {p.plan.index} of {run.marker} (node {p.plan.node_id[:12]}) {what}; stopping the rest "
                     "of the gang")
            if not run.stopping:
                self._signal(run, signal.SIGTERM)
        elif run.teardown_deadline is not None and now >= run.teardown_deadline and not run.killed:
            self.kill(run)
        return False

    def exited(self, proc: RayRun) -> bool:
        self._sync()
        return self._evaluate(proc, time.monotonic())

    def exit_code(self, proc: RayRun | None, run_dir: Path) -> tuple[int | None, float | None]:
        """(code, time) of an ended run; for a run no one holds (at reconciliation), from its parts' records."""
        if proc is not None and proc.result is not None:
            self._finish(proc)
            return proc.result
        parts = self._layout(str(run_dir))
        if parts is None:
            return None, None
        ends = []
        for st in self._statuses(parts):
            if st.get("alive"):
                return None, None
            ends.append((st.get("code"), st.get("time"), bool(st.get("orphaned")) or st.get("code") is None))
        return aggregate_exit(ends)

    def _finish(self, run: RayRun) -> None:
        self.runs.pop(run.marker, None)
        by_node: dict[str, list[str]] = {}
        for p in run.parts:
            self._by_part.pop(p.part_dir, None)
            by_node.setdefault(p.plan.node_id, []).append(p.part_dir)
        for node_id, dirs in by_node.items():
            agent = self._agents.get(node_id)
            if agent is not None:
                agent.forget.remote(dirs)

    def _by_node(self, run: RayRun) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p in run.parts:
            if not p.ended:
                out.setdefault(p.plan.node_id, []).append(p.part_dir)
        return out

    def _signal(self, run: RayRun, signum: int) -> None:
        refs = [self._agents[n].signal.remote(dirs, int(signum)) for n, dirs in self._by_node(run).items()
                if n in self._agents]
        if refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=5.0)

    def terminate(self, proc: RayRun) -> None:
        """Ask every part to stop (SIGTERM to its launcher, which forwards it to the job)."""
        proc.stopping = True
        self._signal(proc, signal.SIGTERM)

    def kill(self, proc: RayRun) -> None:
        """SIGKILL every part (its launcher's process group and every process with its part marker)."""
        proc.killed = True
        refs = [self._agents[n].kill.remote(dirs) for n, dirs in self._by_node(proc).items() if n in self._agents]
        if refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=5.0)
        for p in proc.parts:
            _fence_local(p.part_dir)

    # ------------------------------------------------------------------ reconciliation
    def _layout(self, marker: str) -> list[RunPart] | None:
        if self.store is None:
            return None
        row = self.store.one("SELECT layout FROM ray_runs WHERE run_dir=?", (marker,))
        if row is None:
            return None
        doc = json.loads(row["layout"])
        return [RunPart.from_json(p) for p in doc["parts"]]

    def _statuses(self, parts: list[RunPart]) -> list[dict[str, Any]]:
        """Each part's state from its node's agent (or from its exit record when the agent is gone)."""
        by_node: dict[str, list[str]] = {}
        for p in parts:
            by_node.setdefault(p.plan.node_id, []).append(p.part_dir)
        answers: dict[str, dict[str, Any]] = {}
        for node_id, dirs in by_node.items():
            agent = self._agents.get(node_id)
            if agent is None:
                continue
            try:
                answers.update(self._call(agent.status.remote(dirs)))
            except Exception as e:
                self.log(f"ray: the agent on node {node_id[:12]} did not answer: {_first_line(e)}")
        out = []
        for p in parts:
            st = answers.get(p.part_dir)
            if st is None:
                rec = ray_launcher.read_exit(p.part_dir)
                st = {"known": False, "alive": False, **(rec or {"code": None, "time": None, "orphaned": True})}
            out.append(st)
        return out

    def adopt(self, pid: int | None, ticks: int | None, marker: str,
              gpus: tuple[int, ...]) -> Adopted[RayRun] | None:
        """The run of ``marker`` if every part of it is alive on its node (after a controller restart),
        with its GPU ids in the current view (not the recorded ones: the view may have changed).

        A run with only some parts alive (its node died, or the controller died while starting it)
        cannot go on: those parts are killed and None is returned, so the run is closed and requeued.
        """
        parts = self._layout(marker)
        if parts is None:
            return None  # the layout is written before any part starts: nothing of it ever ran
        statuses = self._statuses(parts)
        if all(st.get("alive") and st.get("known") for st in statuses):
            gid = self.view.gid_of()
            doc = json.loads(self.store.one("SELECT layout FROM ray_runs WHERE run_dir=?", (marker,))["layout"])
            gpus = tuple(gid[k] for p in parts for k in p.plan.keys if k in gid)
            run = RayRun(marker, parts, int(doc["world"]), gpus, adopted=True)
            if len(run.gpus) == sum(len(p.plan.keys) for p in parts):
                parts[0].pid, parts[0].ticks = pid, ticks
                self._register(run)
                return Adopted(run, run.gpus)
        alive = [p for p, st in zip(parts, statuses, strict=True) if st.get("alive")]
        if alive:
            self.log(f"ray: run {marker} is only partly alive ({len(alive)} of {len(parts)} parts); killing the rest")
            self.kill(RayRun(marker, alive, 0))
        return None

    def leftovers(self, marker: str, *, exit_recorded: bool) -> list[int]:
        """Processes of the run on any node or on this machine. Not looked for when the run recorded its
        exit: every part's launcher then saw its processes end (a lost part's are looked for)."""
        if exit_recorded:
            return []
        refs = [a.pids_with_marker.remote(marker) for a in self._agents.values()]
        pids: list[int] = []
        for ref in refs:
            with contextlib.suppress(Exception):
                pids.extend(self._call(ref, timeout=10.0))
        return sorted(set(pids) | set(procs.pids_with_marker(marker)))

    def kill_marker(self, marker: str) -> None:
        refs = [a.kill_marker.remote(marker) for a in self._agents.values()]
        if refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=10.0)
        procs.kill_pids(procs.pids_with_marker(marker))

    def release(self, marker: str) -> None:
        """Nothing left to free: a run's records went when its end was read (``exit_code``)."""


def _fence_local(part_dir: str) -> None:
    """Kill what is left of a part on this machine (all of it, when every 'node' shares one machine)."""
    procs.kill_pids(procs.pids_with_marker(part_dir, PART_VAR))


def _append_line(path: Path, line: str) -> None:
    with contextlib.suppress(OSError), path.open("a") as f:
        f.write(f"--- tesserae {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime())}: {line} ---\n")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]
