"""The ``local`` executor: each run of a job is a process tree on this machine (an ``Executor``).

A run is started as ``python -I launcher.py RUN_DIR NPROC [--cgroup CG] [--account A] -- CMD...``
(see ``launcher``) in a session of its own, so that it survives a controller crash and can be
adopted by the next controller; stdin is /dev/null, stdout and stderr append to the job's log
file. With job accounts the launcher keeps the server's (root) rights and the job's processes run
under the job's account. Stopping is SIGTERM to the launcher (which forwards it to the job), then,
after the grace period, SIGKILL to the run's cgroup (where there is one, see ``lifetime``), to the
whole process group and to every process that carries the run's marker.

Its view is fixed: the machine's GPUs (NVML or virtual), one node per GPU type. A run's
environment is the server's allowlisted base (``job.env.base_env``, with ``--pass-env``) under the
job contract, and ``CUDA_VISIBLE_DEVICES`` of its GPUs with a free local ``MASTER_PORT`` over it.
It reaches the job's processes only: the launcher runs with a fixed environment and reads the
job's from ``RUN_DIR/env.json`` (``env_handoff``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tesserae.core.cluster import Cluster
from tesserae.runtime.executor.gpu_health import GpuHealth
from tesserae.runtime.executor.gpus import Gpu, machine_cluster
from tesserae.runtime.executor.protocol import Adopted, Launch, NodeState, ViewChange
from tesserae.runtime.job import env as job_env
from tesserae.runtime.job import env_handoff, resources
from tesserae.runtime.job import files as job_files
from tesserae.runtime.launch import lifetime, procs
from tesserae.runtime.local import launcher

LAUNCHER = str(Path(launcher.__file__).resolve())


@dataclass
class Proc:
    """A launched (or adopted) run: the launcher's pid and kernel start time."""

    pid: int
    ticks: int | None
    marker: str
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def adopted(self) -> bool:
        return self.popen is None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill_cgroup(marker: str) -> None:
    """SIGKILL the cgroup of the run ``marker``, if it has one (the whole of it, at once)."""
    cgroup = lifetime.of_run(marker)
    if cgroup is not None:
        lifetime.kill(cgroup)


def _launcher_by_marker(marker: str) -> int | None:
    """The launcher of the run ``marker``: the session leader among the processes carrying the marker."""
    for p in procs.pids_with_marker(marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getsid(p) == p:
                return p
    return None


def machine_nodes(cluster: Cluster, unhealthy: dict[int, str] | None = None) -> list[NodeState]:
    """This machine, one node per GPU type, always alive; ``unhealthy``: GPUs the probe found failing."""
    host = socket.gethostname()
    many = cluster.num_nodes > 1
    bad = unhealthy or {}
    return [NodeState(str(node.index), f"{host} ({node.gpu_type})" if many else host, "127.0.0.1", node.gpu_type,
                      list(node.gpu_ids), "alive", unhealthy={g: bad[g] for g in node.gpu_ids if g in bad})
            for node in cluster.nodes]


class LocalExecutor:
    name = "local"

    def __init__(self, gpus: list[Gpu], python: str = sys.executable, cgroups: lifetime.Cgroups | None = None, *,
                 detect_cgroups: bool = False, pass_env: tuple[str, ...] = (),
                 log: Callable[[str], None] | None = None, health: GpuHealth | None = None) -> None:
        self.cluster: Cluster
        self.cluster, self.gpus = machine_cluster(gpus)  # a no-op on GPUs already in global-id order
        self.python = python
        #: Where runs get their cgroup (None: session, process group and marker only).
        self.cgroups = cgroups
        self.detect_cgroups = detect_cgroups
        #: Variables of the server's environment that jobs get besides the allowlisted base (``job.env``).
        self.pass_env = pass_env
        self.log = log or (lambda msg: None)
        #: The GPU health probe (``nvidia-smi``), started with the server; None: not probed.
        self.health = health

    # ------------------------------------------------------------------ the view: fixed
    def nodes(self) -> list[NodeState]:
        if self.health is None:
            return machine_nodes(self.cluster)
        bad = self.health.unhealthy()
        return machine_nodes(self.cluster, {i: bad[g.device] for i, g in enumerate(self.gpus) if g.device in bad})

    def watch(self, now: float) -> bool:
        return False

    def view_change(self) -> ViewChange | None:
        return None

    def commit_view(self, change: ViewChange) -> None:
        raise AssertionError("the local executor's view never changes")

    # ------------------------------------------------------------------ runs
    def run_env(self, launch: Launch) -> dict[str, str]:
        """The allowlisted base of this server (the job account's HOME/USER/LOGNAME), the job contract
        over it, and the run's devices over that."""
        env = job_env.base_env(pass_env=self.pass_env,
                               account=None if launch.account is None else launch.account.env())
        env.update(launch.env)
        env.update(job_env.device_env((self.gpus[g].device for g in launch.gpus), "127.0.0.1", free_port()))
        return env

    def spawn(self, launch: Launch) -> Proc:
        """Start a run; raises (OSError, ValueError...) when even the launcher cannot start."""
        run_dir = launch.run_dir
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker = str(run_dir)
        # The job's variables go to the job only (in a file the launcher reads), never to the launcher.
        env_handoff.write(run_dir, {**self.run_env(launch), procs.MARKER_VAR: marker})
        opts = []
        missed = [n for n, v in (("cpus", launch.cpus), ("memory", launch.memory_mb)) if v is not None]
        if self.cgroups is not None:
            cgroup = self.cgroups.create(run_dir)
            opts += ["--cgroup", cgroup]
            missed = resources.limit_cgroup(cgroup, launch.cpus, launch.memory_mb)
        if missed:  # said in the job's log: the request is accounted, not enforced
            job_files.append_server_line(launch.log_path, f"{' and '.join(missed)} requested but not enforced here "
                                                          "(no cgroup controller for it); accounted only")
        if launch.account is not None:
            opts += ["--account", launch.account.launcher_arg()]
        cmd = [self.python, "-I", LAUNCHER, str(run_dir), str(launch.nproc), *opts, "--", *launch.argv]
        log = job_files.open_log_append(launch.log_path)
        try:
            popen = subprocess.Popen(cmd, cwd=launch.cwd, env=env_handoff.launcher_env({procs.MARKER_VAR: marker}),
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, close_fds=True)
        finally:
            os.close(log)
        return Proc(popen.pid, procs.start_ticks(popen.pid), marker, popen)

    def exited(self, run: Proc) -> bool:
        if run.popen is not None:
            return run.popen.poll() is not None
        return not procs.alive(run.pid, run.ticks)

    def exit_code(self, run: Proc | None, run_dir: Path) -> tuple[int | None, float | None]:
        """(code, time) from the launcher's exit file; (None, None) when it wrote none.

        A launcher that died without writing its file was killed: how the job itself would have
        ended is unknown, whether this controller started the run or adopted it, so the run counts
        as lost (the job resumes from its checkpoint), never as a failure of the job."""
        return launcher.read_exit(str(run_dir)) or (None, None)

    def terminate(self, run: Proc) -> None:
        """Ask the run to stop (SIGTERM to the launcher, which forwards it to the job)."""
        if procs.alive(run.pid, run.ticks):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(run.pid, signal.SIGTERM)

    def kill(self, run: Proc) -> None:
        """SIGKILL the run's cgroup, its process group and every process carrying its marker."""
        _kill_cgroup(run.marker)
        if procs.alive(run.pid, run.ticks):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.pid, signal.SIGKILL)
        procs.kill_pids(procs.pids_with_marker(run.marker))

    def adopt(self, pid: int | None, ticks: int | None, marker: str, gpus: tuple[int, ...]) -> Adopted[Proc] | None:
        """The run's launcher if it is still alive (pid, start time and marker all match); its GPUs are
        the recorded ones (the view never changes).

        With no pid recorded (the controller died between spawn and recording it), the launcher
        is found by its marker: it is the session leader among the marked processes.
        """
        if pid is not None:
            if procs.alive(pid, ticks) and (not procs.have_proc() or procs.environ_has(pid, procs.MARKER_VAR,
                                                                                       marker)):
                return Adopted(Proc(pid, ticks, marker), gpus)
            return None
        leader = _launcher_by_marker(marker)
        return None if leader is None else Adopted(Proc(leader, procs.start_ticks(leader), marker), gpus)

    # ------------------------------------------------------------------ liveness evidence
    def leftovers(self, marker: str, *, exit_recorded: bool) -> list[int]:
        """Live processes of the run ``marker`` (its folder): in its cgroup, or carrying its marker.
        Looked for even when the launcher recorded its exit: it gives up on an unkillable leftover."""
        found = set(procs.pids_with_marker(marker))
        cgroup = lifetime.of_run(marker)
        if cgroup is not None:
            found.update(p for p in lifetime.pids(cgroup) if procs.start_ticks(p) is not None)
        return sorted(found)

    def kill_marker(self, marker: str) -> None:
        """SIGKILL every process of the run ``marker``."""
        _kill_cgroup(marker)
        procs.kill_pids(procs.pids_with_marker(marker))

    def release(self, marker: str) -> None:
        """A run is over: remove its (empty) cgroup."""
        cgroup = lifetime.of_run(marker)
        if cgroup is not None:
            lifetime.remove(cgroup)

    @property
    def fence_seconds(self) -> float:
        """No lease: a run is on this machine, within reach."""
        return 0.0

    # ------------------------------------------------------------------ the server's life
    def prepare(self) -> None:
        """Nothing to reach: the GPUs were found when this executor was made."""

    def open(self, state_dir: Path, store: Any) -> None:
        """Find the cgroup v2 folder of this state folder's runs (with ``detect_cgroups``)."""
        if self.detect_cgroups and self.cgroups is None:
            self.cgroups = lifetime.Cgroups.detect(state_dir, self.log)
        if self.health is not None:
            self.health.start()

    def close(self) -> str:
        if self.health is not None:
            self.health.stop()
        if self.cgroups is not None:
            lifetime.remove_empty(self.cgroups.base)  # runs still alive keep theirs
        return "stopped (running jobs keep running; the next server adopts them)"

    def info(self) -> dict[str, Any]:
        return {"gpu_source": "virtual" if self.gpus[0].virtual else "NVML"}

    def describe_location(self) -> str | None:
        return None

    def describe_tracking(self) -> str | None:
        if self.cgroups is not None:
            return f"processes tracked by cgroup ({self.cgroups.base})"
        return "processes tracked by session and marker"
