"""The ``local`` executor: each run of a job is a process tree on this machine.

A run is started as ``python -I launcher.py RUN_DIR NPROC [--cgroup CG] [--account A] -- CMD...``
(see ``launcher``) in a session of its own, so that it survives a controller crash and can be
adopted by the next controller; stdin is /dev/null, stdout and stderr append to the job's log
file. With job accounts the launcher keeps the server's (root) rights and the job's processes run
under the job's account. Stopping is SIGTERM to the launcher (which forwards it to the job), then,
after the grace period, SIGKILL to the run's cgroup (where there is one, see ``lifetime``), to the
whole process group and to every process that carries the run's marker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tesserae.runtime import job_files, launcher, lifetime, procs
from tesserae.runtime.gpus import Gpu
from tesserae.runtime.isolation import Account

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


class LocalExecutor:
    name = "local"

    def __init__(self, gpus: list[Gpu], python: str = sys.executable, cgroups: lifetime.Cgroups | None = None) -> None:
        self.gpus = gpus
        self.python = python
        #: Where runs get their cgroup (None: session, process group and marker only).
        self.cgroups = cgroups

    def visible_devices(self, gpu_ids: tuple[int, ...] | list[int]) -> str:
        return ",".join(self.gpus[g].device for g in gpu_ids)

    def spawn(self, argv: list[str], *, env: dict[str, str], cwd: Path, log_path: Path, run_dir: Path,
              nproc: int = 1, account: Account | None = None) -> Proc:
        """Start a run; raises (OSError, ValueError...) when even the launcher cannot start."""
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker = str(run_dir)
        env = {**env, procs.MARKER_VAR: marker}
        opts = []
        if self.cgroups is not None:
            opts += ["--cgroup", self.cgroups.create(run_dir)]
        if account is not None:
            opts += ["--account", account.launcher_arg()]
        cmd = [self.python, "-I", LAUNCHER, str(run_dir), str(nproc), *opts, "--", *argv]
        log = job_files.open_log_append(log_path)
        try:
            popen = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        finally:
            os.close(log)
        return Proc(popen.pid, procs.start_ticks(popen.pid), marker, popen)

    def exited(self, proc: Proc) -> bool:
        if proc.popen is not None:
            return proc.popen.poll() is not None
        return not procs.alive(proc.pid, proc.ticks)

    def exit_code(self, proc: Proc | None, run_dir: Path) -> tuple[int | None, float | None]:
        """(code, time) from the launcher's exit file; (None, None) when it wrote none.

        A launcher that died without writing its file was killed: how the job itself would have
        ended is unknown, whether this controller started the run or adopted it, so the run counts
        as lost (the job resumes from its checkpoint), never as a failure of the job."""
        return launcher.read_exit(str(run_dir)) or (None, None)

    def terminate(self, proc: Proc) -> None:
        """Ask the run to stop (SIGTERM to the launcher, which forwards it to the job)."""
        if procs.alive(proc.pid, proc.ticks):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signal.SIGTERM)

    def kill(self, proc: Proc) -> None:
        """SIGKILL the run's cgroup, its process group and every process carrying its marker."""
        cgroup = lifetime.of_run(proc.marker)
        if cgroup is not None:
            lifetime.kill(cgroup)
        if procs.alive(proc.pid, proc.ticks):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        procs.kill_pids(procs.pids_with_marker(proc.marker))

    def adopt(self, pid: int | None, ticks: int | None, marker: str) -> Proc | None:
        """The run's launcher if it is still alive (pid, start time and marker all match).

        With no pid recorded (the controller died between spawn and recording it), the launcher
        is found by its marker: it is the session leader among the marked processes.
        """
        if pid is not None:
            if procs.alive(pid, ticks) and (not procs.have_proc() or procs.environ_has(pid, procs.MARKER_VAR,
                                                                                       marker)):
                return Proc(pid, ticks, marker)
            return None
        for p in procs.pids_with_marker(marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getsid(p) == p:
                    return Proc(p, procs.start_ticks(p), marker)
        return None

    def leftovers(self, marker: str) -> list[int]:
        """Live processes of the run ``marker`` (its folder): in its cgroup, or carrying its marker."""
        found = set(procs.pids_with_marker(marker))
        cgroup = lifetime.of_run(marker)
        if cgroup is not None:
            found.update(p for p in lifetime.pids(cgroup) if procs.start_ticks(p) is not None)
        return sorted(found)

    def kill_marker(self, marker: str) -> None:
        """SIGKILL every process of the run ``marker``."""
        cgroup = lifetime.of_run(marker)
        if cgroup is not None:
            lifetime.kill(cgroup)
        procs.kill_pids(procs.pids_with_marker(marker))

    def release(self, marker: str) -> None:
        """A run is over: remove its (empty) cgroup."""
        cgroup = lifetime.of_run(marker)
        if cgroup is not None:
            lifetime.remove(cgroup)
