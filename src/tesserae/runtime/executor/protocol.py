"""The executor protocol: what the controller asks of the place where jobs run.

The controller holds an ``Executor`` and never asks which kind it is (as the Kubernetes scheduling
framework's core never asks what plugin it holds). Three implement it: ``local.executor`` (this
machine: a fixed view), ``ray.executor`` (the GPU nodes of a Ray cluster: a view that changes as
nodes join and leave) and ``slurm.executor`` (a Slurm partition's nodes). An executor answers for:

- **The cluster view.** ``cluster`` and ``gpus`` (by global id) are the committed view the
  scheduler works on. ``watch`` is called every tick (True: the view may have changed, decide
  soon); at the start of a decision ``view_change`` offers a new view with the map of old global
  GPU ids onto it, which the controller applies to its runs before ``commit_view``. ``nodes``
  lists the nodes and their state for display.
- **Runs.** ``spawn`` starts a ``Launch`` and returns the executor's handle of it (a ``Run``);
  ``terminate`` asks it to stop, ``kill`` ends it; ``exited`` and ``exit_code`` say how it ended;
  ``adopt`` takes over a run an earlier controller recorded (write-ahead, see ``runs``).
- **A run's environment and GPU ids.** The controller forms the job contract (``job.env.contract``:
  the job's own variables and ``TESSERAE_*``) and gives the run's global GPU ids; the executor puts
  the allowlisted base under it (the server's, or each node's own) and the device and rank
  variables over it (``job.env.device_env``: ``CUDA_VISIBLE_DEVICES`` from its GPUs' devices,
  ``MASTER_ADDR``/``MASTER_PORT``, ``RANK``...).
- **Liveness evidence.** ``exited`` (the launcher or gang is gone), ``exit_code`` (the record it
  left, or none: lost), ``leftovers``/``kill_marker`` (processes of a run that outlived its
  launcher, found by the run's marker), ``release`` (what the run held, once its end is recorded),
  ``fence_seconds`` (how long a run out of reach may go on after SIGKILL: its lease).
- **The server's life.** ``prepare`` (reach the cluster before anything is written), ``open``
  (once the state folder is locked and the store open), ``close``; ``info`` and ``describe_*``
  for what the server shows.

A run's *marker* is its folder (``STATE/jobs/ID/runs/RUN``): every process of the run carries it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from tesserae.core.cluster import Cluster
from tesserae.runtime.executor.gpus import Gpu
from tesserae.runtime.job.isolation import Account

if TYPE_CHECKING:
    from tesserae.runtime.store.database import Store


class Run(Protocol):
    """An executor's handle of one run: a launcher process, or a gang of them (its first's identity)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def ticks(self) -> int | None: ...


RunT = TypeVar("RunT", bound=Run)


@dataclass(frozen=True)
class Launch:
    """One run to start: the command, the job contract's environment, where, and on which GPUs."""

    argv: list[str]
    env: dict[str, str]  # the job's own variables and the contract's (job_env.contract), nothing of the server
    cwd: Path
    log_path: Path
    run_dir: Path  # the run's folder, and its marker
    nproc: int
    gpus: tuple[int, ...]  # global ids in the committed view
    account: Account | None = None  # the Unix account the job runs as (None: the launcher's own)
    cpus: float | None = None  # the job's CPU request (``resources``): a cgroup quota where one can be set
    memory_mb: int | None = None  # its memory request (MiB): a cgroup limit where one can be set


@dataclass(frozen=True)
class Adopted(Generic[RunT]):
    """A run taken over after a controller restart, and its GPUs in the executor's current view."""

    run: RunT
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class ViewChange:
    """A new view of the cluster: the Cluster (None: no usable node), where each old global GPU id
    is in it (None: its node left), and the executor's own record of it, handed back to ``commit_view``."""

    cluster: Cluster | None
    remap: dict[int, int | None]
    detail: object = None


@dataclass(frozen=True)
class NodeState:
    """A node of the view, for display: ``state`` is ``alive``, ``draining`` or ``dead``;
    ``last_seen`` is when the executor last heard from it (Unix seconds; None where it does not
    track that: the local machine is the server's own, Slurm keeps its own); ``unhealthy``: its GPUs
    (global ids) that a health probe found failing, with why (``executor.gpu_health``): the
    scheduler starts nothing new on them."""

    id: str
    name: str
    ip: str
    gpu_type: str
    gpus: list[int]
    state: str
    last_seen: float | None = None
    unhealthy: dict[int, str] = field(default_factory=dict)


class Executor(Protocol[RunT]):
    """See the module docstring. The controller's thread is its only caller, but for ``gpus``,
    ``nodes`` and ``info`` (the API's)."""

    name: str

    # ------------------------------------------------------------------ the cluster view
    @property
    def cluster(self) -> Cluster | None: ...

    @property
    def gpus(self) -> list[Gpu]: ...

    def nodes(self) -> list[NodeState]: ...

    def watch(self, now: float) -> bool:
        """Called every tick: poll what needs polling; True when nodes joined or left."""
        ...

    def view_change(self) -> ViewChange | None:
        """A new view when the cluster changed since the committed one, else None."""
        ...

    def commit_view(self, change: ViewChange) -> None: ...

    # ------------------------------------------------------------------ runs
    def spawn(self, launch: Launch) -> RunT:
        """Start a run; raises (OSError, ValueError...) when it cannot start: the job fails."""
        ...

    def exited(self, run: RunT) -> bool: ...

    def exit_code(self, run: RunT | None, run_dir: Path) -> tuple[int | None, float | None]:
        """(code, time) of an ended run, from the record it left; ``(None, None)``: it left none (lost).
        With ``run`` None (at reconciliation) from the records alone."""
        ...

    def terminate(self, run: RunT) -> None:
        """Ask the run to stop (SIGTERM, forwarded to the job)."""
        ...

    def kill(self, run: RunT) -> None:
        """End the run now (SIGKILL to all of it)."""
        ...

    def adopt(self, pid: int | None, ticks: int | None, marker: str,
              gpus: tuple[int, ...]) -> Adopted[RunT] | None:
        """The run recorded with this launcher identity, marker and GPUs, if it still runs (whole)."""
        ...

    # ------------------------------------------------------------------ liveness evidence
    def leftovers(self, marker: str, *, exit_recorded: bool) -> list[int]:
        """Live processes of the run ``marker`` whose launcher is gone. ``exit_recorded``: the run left
        an exit record (an executor may know that its launcher then left nothing behind)."""
        ...

    def kill_marker(self, marker: str) -> None:
        """SIGKILL every process of the run ``marker``."""
        ...

    def release(self, marker: str) -> None:
        """The run's end is recorded: free what it held (an empty cgroup, say)."""
        ...

    @property
    def fence_seconds(self) -> float:
        """How long after SIGKILL a run that shows no end may still be running somewhere out of reach (its
        lease, with the margin): the reaper writes such a run off only after that (and ``KILL_TIMEOUT``)."""
        ...

    # ------------------------------------------------------------------ the server's life
    def prepare(self) -> None:
        """Before the server writes anything: reach the cluster, so one it cannot reach leaves no state."""
        ...

    def open(self, state_dir: Path, store: Store) -> None:
        """The state folder is locked and the store open: bring up what needs them."""
        ...

    def close(self) -> str:
        """The server stops. Returns its last line: what became of the running jobs."""
        ...

    def info(self) -> dict[str, Any]:
        """The executor's part of the server's info (``gpu_source``, and what else it has)."""
        ...

    def describe_location(self) -> str | None:
        """Where jobs run, when not on this machine ('the Ray cluster at ...')."""
        ...

    def describe_tracking(self) -> str | None:
        """How a run's processes are tracked on this machine, when the server tracks them."""
        ...
