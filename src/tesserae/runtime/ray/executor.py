"""The ``ray`` executor: jobs run on the nodes of a Ray cluster, through one agent actor per node.

Ray does discovery, placement and failure detection; there is no protocol of our own. The
pieces: ``ray.connect`` (joining), ``ray.nodes`` (agents, membership, the view, polling),
``ray.gangs`` (runs as gangs of parts, the gang rule), ``ray.recovery`` (runs found after a
controller restart), ``ray.layout`` (pure: view, GPU identity, layout), ``ray.agent`` and
``ray.launcher`` (on each node). This class is the ``Executor`` over them:

- **Nodes.** ``ray.nodes()`` lists the alive nodes and their resources. Every alive node with at
  least one ``GPU`` gets an agent (``ray.agent.NodeAgent``): ``num_cpus=0``, ``num_gpus`` = all the
  node's GPUs (Ray hands it their ids, which become the jobs' ``CUDA_VISIBLE_DEVICES``, and no other
  Ray work can take them), pinned with ``NodeAffinitySchedulingStrategy(node, soft=False)``,
  ``max_restarts=0``. A node is part of the cluster view once its agent answers; the view is
  rebuilt at the start of a decision when nodes joined or left (``view_change``/``commit_view``).
- **Identity.** The scheduler core numbers GPUs globally, node after node, so ids shift when the
  view changes; each GPU's stable identity is (node id, local index) (``ray.layout``), recorded
  with every run in the store (table ``ray_runs``), and the controller remaps running jobs' GPU
  ids onto each new view.
- **Runs.** A run is a gang of *parts*, one per node it spans: the node's agent starts the part's
  processes through ``ray.launcher`` with ``CUDA_VISIBLE_DEVICES`` for that node's GPUs of the run,
  ``MASTER_ADDR`` (the rank-0 node's Ray IP), ``MASTER_PORT`` (a port the rank-0 agent found free,
  from ``--master-ports`` if given), ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` (each node's
  interface that carries its Ray IP, unless the job sets them),
  ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/``LOCAL_WORLD_SIZE``, ``NODE_RANK``/``NNODES``.
  Processes: ``--nproc`` split over the nodes in proportion to the run's GPUs there, at least one
  per node (``ray.layout.split_processes``): ``--nproc`` = GPUs gives one process per GPU, the
  default 1 gives one per node. Stop = SIGTERM to every part, SIGKILL after
  the grace period. When one part fails or is lost, the rest of the gang gets SIGTERM, then
  SIGKILL after the grace period; a lost part makes the whole run lost (the job is requeued and
  resumes from its checkpoint), otherwise the first failing part's code is the run's.
- **Failure and fencing.** The controller polls the agents (one call per agent with running parts
  every 0.25 s, the others every 2 s; never blocking on a slow one) and ``ray.nodes()``. Every
  part holds a lease that those polls renew (``ray.lease``, ``--ray-lease``); a part whose lease
  runs out is killed on its node by its launcher (a partition, a stuck agent, a controller gone).
  A node gone from the alive nodes, an agent that Ray says died, or one whose polls fail or go
  unanswered (*unreachable*: it leaves the view until it answers) has its parts ended on
  evidence: their launchers' exit records on the shared state folder (a launcher records its
  part's end after killing it: the moment its agent is gone, or its lease is over), or else the
  end of their lease (``GangBook.sweep``). Then the gang rule applies and the job is requeued; the
  other jobs keep running untouched. So a crashed node's jobs are requeued within a second or so
  of the crash, and a job on a node cut off from the controller is started elsewhere only once
  its copy there has been stopped: a job never runs twice at once. A job's own checkpoint folder
  is fenced too: ``tesserae.job`` refuses to write for a run older than the newest one started.
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
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tesserae.core.cluster import Cluster
from tesserae.runtime.executor.gpus import Gpu
from tesserae.runtime.executor.protocol import Adopted, Launch, NodeState, ViewChange
from tesserae.runtime.job import files as job_files
from tesserae.runtime.launch import procs
from tesserae.runtime.ray import connect as ray_connect
from tesserae.runtime.ray import logs as ray_logs
from tesserae.runtime.ray import recovery as ray_recovery
from tesserae.runtime.ray.gangs import GangBook, RayRun, start_gang
from tesserae.runtime.ray.layout import View, view_change
from tesserae.runtime.ray.lease import DEFAULT_LEASE, MARGIN, LeaseBook
from tesserae.runtime.ray.nodes import AgentPoller, NodeRoster, kill_marked, marked_pids, node_states


class RayExecutor:
    """See the module docstring. The controller thread is its only caller, but for ``gpus`` and ``nodes``."""

    name = "ray"

    def __init__(self, address: str | None, *, virtual_gpus: int | None = None, gpu_type: str = "v100",
                 grace_seconds: float = 30.0, idle_seconds: float = 600.0, lease_seconds: float = DEFAULT_LEASE,
                 log: Callable[[str], None] | None = None, pass_env: tuple[str, ...] = (),
                 split_logs: bool = False, master_ports: tuple[int, int] | None = None) -> None:
        self.ray = ray_connect.require_ray()
        #: Send Ray's own messages to STATE/ray.log once the state folder is open (the server's; ``ray.logs``).
        self.split_logs = split_logs
        self._said: list[str] = []
        #: Variables of each node's environment that jobs get besides the allowlisted base (``job.env``).
        self.pass_env = pass_env
        self.address = address
        self.virtual_gpus = virtual_gpus
        self.log = log or (lambda msg: None)
        self.started_ray = False
        self.leases = LeaseBook(lease_seconds)
        self.roster = NodeRoster(self.ray, gpu_type.lower(), idle_seconds, self.log, self._node_gone)
        self.gangs = GangBook(self.ray, self.roster, grace_seconds, self.log, self.leases)
        self.gangs.master_ports = master_ports
        self.poller = AgentPoller(self.ray, self.roster, self.log, self.gangs.note, self.leases, self.gangs.held)

    def probe_gpu_health(self, command: list[str], interval: float, *, virtual: bool = False) -> None:
        """Have each node's agent probe its GPUs' health with ``command`` (``NodeAgent.health``) every
        ``interval`` seconds; ``virtual``: also nodes whose GPUs are declared, not named by NVML."""
        self.poller.health_command, self.poller.health_interval = list(command), interval
        self.poller.health_virtual = virtual

    def _node_gone(self, node_id: str, why: str) -> None:
        info = self.roster.drop(node_id)
        self.poller.forget(node_id)
        pending = self.gangs.lose_node(node_id)
        where = f" ({info.ip})" if info is not None else ""
        then = f"; {pending} run part(s) on it end once their exit records show or their lease is over"
        self.log(f"ray: node {node_id[:12]}{where} {why}" + (then if pending else ""))

    def _sync(self) -> None:
        now = time.monotonic()
        self.poller.sync(self.gangs.busy_nodes(), now)
        for node_id in self.gangs.sweep(now, self.poller.late(now)):
            self.poller.suspect(node_id, now)
        ray_recovery.record_renewals(self.gangs, now)

    # ------------------------------------------------------------------ the view
    @property
    def gpus(self) -> list[Gpu]:
        return list(self.roster.view.gpus)

    @property
    def cluster(self) -> Cluster | None:
        return self.roster.view.cluster

    def nodes(self) -> list[NodeState]:
        return node_states(self.roster.view, self.roster.ready, self.roster.unreachable, self.poller.answered,
                           self.poller.unhealthy)

    def watch(self, now: float) -> bool:
        """Called by the controller every tick: poll (throttled); True when nodes joined or left."""
        self._sync()
        changed, self.roster.changed = self.roster.changed, False
        return changed

    def view_change(self) -> ViewChange | None:
        """The new cluster view when nodes joined or left since the committed one, else None."""
        return view_change(self.roster.view, self.roster.view_change())

    def commit_view(self, change: ViewChange) -> None:
        assert isinstance(change.detail, View)
        self.roster.view = change.detail
        self.gangs.regid(change.detail)

    # ------------------------------------------------------------------ runs
    def spawn(self, launch: Launch) -> RayRun:
        """Start a run on its GPUs (global ids of the committed view) as a gang of one part per node
        (``ray.gangs.start_gang``); each node's agent puts the node's own allowlisted base under the job
        contract (``ray.agent``)."""
        if launch.account is not None:
            raise ValueError("the ray executor runs jobs as the Ray workers' account; it cannot take another")
        if launch.cpus is not None or launch.memory_mb is not None:  # ``resources``: accounted, not enforced
            with contextlib.suppress(OSError):
                job_files.append_server_line(launch.log_path, "cpus and memory requests are not enforced on Ray "
                                                              "nodes; accounted only")
        return start_gang(self.gangs, launch, self.pass_env)

    def exited(self, run: RayRun) -> bool:
        self._sync()
        return self.gangs.evaluate(run, time.monotonic())

    def exit_code(self, run: RayRun | None, run_dir: Path) -> tuple[int | None, float | None]:
        """(code, time) of an ended run; for a run no one holds (at reconciliation), from its parts' records."""
        if run is not None and run.result is not None:
            self.gangs.finish(run)
            return run.result
        return ray_recovery.recorded_exit(self.gangs, str(run_dir))

    def terminate(self, run: RayRun) -> None:
        """Ask every part to stop (SIGTERM to its launcher, which forwards it to the job)."""
        run.stopping = True
        self.gangs.signal(run, signal.SIGTERM)

    def kill(self, run: RayRun) -> None:
        self.gangs.kill(run)

    def adopt(self, pid: int | None, ticks: int | None, marker: str,
              gpus: tuple[int, ...]) -> Adopted[RayRun] | None:
        """The run of ``marker`` if it is whole and alive (``ray.recovery.adopt``), with its GPU ids in the
        current view (not the recorded ``gpus``: the view may have changed)."""
        return ray_recovery.adopt(self.gangs, pid, ticks, marker)

    # ------------------------------------------------------------------ liveness evidence
    def leftovers(self, marker: str, *, exit_recorded: bool) -> list[int]:
        """Processes of the run on any node or on this machine. Not looked for when the run recorded its
        exit: every part's launcher then saw its processes end (a lost part's are looked for)."""
        if exit_recorded:
            return []
        pids = marked_pids(self.ray, self._answering(), marker)
        return sorted(set(pids) | set(procs.pids_with_marker(marker)))

    def kill_marker(self, marker: str) -> None:
        kill_marked(self.ray, self._answering(), marker)
        procs.kill_pids(procs.pids_with_marker(marker))

    def _answering(self) -> list[Any]:
        """The agents of the nodes that answer (an unreachable one's parts are fenced by their lease). A node
        whose poll is late is left out too: a crashed node's dead agent would hold the controller up to
        ``ray.get``'s timeout, and its parts end only on their exit records or leases anyway."""
        skip = self.roster.unreachable | self.poller.late(time.monotonic())
        return [a for n, a in self.roster.agents.items() if n not in skip]

    def release(self, marker: str) -> None:
        """Nothing left to free: a run's records went when its end was read (``exit_code``)."""

    @property
    def fence_seconds(self) -> float:
        """A part on a node out of reach stops by its lease: after it, and the margin."""
        return self.leases.lease + MARGIN

    # ------------------------------------------------------------------ the server's life
    def check_address(self) -> None:
        ray_connect.check_address(self.address)

    def prepare(self) -> None:
        """Join the Ray cluster (or start a local one). The server does it before it writes anything, so a
        cluster it cannot join leaves no state folder behind."""
        if not self.ray.is_initialized():
            self.started_ray = ray_connect.join(self.ray, self.address, self.virtual_gpus, self._said)

    def open(self, state_dir: Path, store: Any, wait_seconds: float = 30.0) -> None:
        """Join the Ray cluster (if not yet), then bring up the agents of its GPU nodes."""
        self.prepare()
        if self.split_logs:
            path = ray_logs.divert(state_dir, "".join(self._said))
            self.log(f"ray: Ray's own messages go to {path}")
        self.gangs.open(store)
        ray_recovery.inherit_renewals(self.gangs)
        self.roster.bring_up(state_dir, wait_seconds, self.describe_location())

    def close(self) -> str:
        """On server shutdown: agents that hold no live part are killed (their GPUs go back to Ray);
        the others keep their jobs running for the next server. A local Ray instance stops here."""
        ray = self.ray
        if ray.is_initialized():
            if not self.started_ray:
                self.roster.kill_idle_agents()
            elif self.gangs.runs:
                self.log("ray: the local Ray instance stops with the server: running jobs are stopped and resume "
                         "from their checkpoints at the next start")
            with contextlib.suppress(Exception):
                ray.shutdown()
        if self.started_ray:
            return ("stopped, and the local Ray instance with it (running jobs were stopped; they resume from their "
                    "checkpoints at the next start)")
        return "stopped (running jobs keep running; the next server adopts them)"

    def info(self) -> dict[str, Any]:
        kind = "virtual" if self.roster.view.gpus[0].virtual else "NVML"
        return {"gpu_source": f"ray ({kind})", "ray_address": self.address or "local",
                "ray_lease_seconds": self.leases.lease}

    def describe_location(self) -> str:
        return "a local Ray instance" if self.address is None else f"the Ray cluster at {self.address}"

    def describe_tracking(self) -> str | None:
        return None  # each node's agent tracks its parts' processes
