"""Process lifetime of a run: its whole process tree ends when the run does.

Where a cgroup v2 hierarchy is usable (the unified mount, ``/sys/fs/cgroup`` or the ``unified``
mount of a hybrid v1/v2 layout, with ``cgroup.kill`` and a folder under the server's own cgroup
it may create), every run gets a cgroup ``tesserae-KEY/run-JOB-RUN`` under the server's
cgroup; its launcher joins it and puts the job's processes in the child ``job``. No controller
(cpu, memory) is needed: the cgroup is used for membership only. A process cannot leave it, so
``cgroup.kill`` ends every process the job started, daemonised, re-sessioned or with a scrubbed
environment, and ``cgroup.procs`` of the subtree says when the last one is gone.

Elsewhere (cgroup v1 only, no delegation for a non-root server, ``--cgroups off``) a run is its
session and process group (the launcher is a session leader) plus every process that still
carries the run's marker in its environment (``procs.MARKER_VAR``). That misses a process that
both left the session and cleared its environment; docs/runtime.md says so.

Standard library only: the launcher imports it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

#: The file in a run's folder that names the run's cgroup (absent: no cgroup for that run).
CGROUP_FILE = "cgroup"
JOB_CHILD = "job"
_PROC = Path("/proc")


def _self_lines(name: str) -> list[str]:
    try:
        return (_PROC / "self" / name).read_text().splitlines()
    except OSError:
        return []


def cgroup2_mount() -> Path | None:
    """Where the cgroup v2 (unified) hierarchy is mounted, if anywhere."""
    for line in _self_lines("mountinfo"):
        left, sep, right = line.partition(" - ")
        if sep and right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split(" ")[4])
    return None


def own_cgroup() -> str | None:
    """This process's cgroup v2 path (``0::/PATH`` in /proc/self/cgroup)."""
    return next((line[3:] for line in _self_lines("cgroup") if line.startswith("0::")), None)


def join(cgroup: str | os.PathLike[str], pid: int = 0) -> None:
    """Move ``pid`` (0: the calling process) into ``cgroup``. Raises OSError."""
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write(str(pid))


def pids(cgroup: str | os.PathLike[str]) -> list[int]:
    """Every process in ``cgroup`` and its descendants."""
    out: list[int] = []
    for folder, _, _ in os.walk(cgroup):
        with contextlib.suppress(OSError), open(os.path.join(folder, "cgroup.procs")) as f:
            out.extend(int(x) for x in f.read().split())
    return sorted(set(out))


def kill(cgroup: str | os.PathLike[str]) -> None:
    """SIGKILL every process in ``cgroup`` and below (``cgroup.kill``)."""
    with contextlib.suppress(OSError), open(os.path.join(cgroup, "cgroup.kill"), "w") as f:
        f.write("1")


def remove(cgroup: str | os.PathLike[str]) -> None:
    """Remove an empty run cgroup and its ``job`` child (a populated one stays)."""
    for path in (os.path.join(cgroup, JOB_CHILD), str(cgroup)):
        with contextlib.suppress(OSError):
            os.rmdir(path)


def of_run(run_dir: str | os.PathLike[str]) -> str | None:
    """The cgroup recorded for a run, if it had one."""
    try:
        with open(os.path.join(run_dir, CGROUP_FILE)) as f:
            text = f.read(4096).strip()
    except OSError:
        return None
    return text or None


def base_for(state_dir: Path) -> Path | None:
    """Where the runs of ``state_dir`` get their cgroups, under this process's cgroup (not created)."""
    mount, own = cgroup2_mount(), own_cgroup()
    if mount is None or own is None:
        return None
    key = hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]
    return mount / own.lstrip("/") / f"tesserae-{key}"


def remove_empty(base: Path) -> None:
    """Remove the run cgroups under ``base`` that hold no process, then ``base`` if it is empty."""
    with contextlib.suppress(OSError), os.scandir(base) as it:
        for entry in it:
            if entry.is_dir() and entry.name.startswith("run-"):
                remove(entry.path)
    with contextlib.suppress(OSError):
        os.rmdir(base)


class Cgroups:
    """The cgroup v2 folder of one state folder's runs: ``<server's cgroup>/tesserae-KEY``."""

    def __init__(self, base: Path) -> None:
        self.base = base

    @classmethod
    def detect(cls, state_dir: Path, log: Callable[[str], None] | None = None) -> Cgroups | None:
        """The usable cgroup v2 base for this state folder, or None (with a one-line reason)."""
        say = log or (lambda msg: None)
        base = base_for(state_dir)
        if base is None:
            say("no cgroup v2 hierarchy here (cgroup v1 only): a job's processes are tracked by session, "
                "process group and run marker")
            return None
        mount = cgroup2_mount()
        try:
            base.mkdir(exist_ok=True)
        except OSError as e:
            say(f"cannot create a cgroup under {base.parent} ({e.strerror}; not delegated to this user?): a "
                "job's processes are tracked by session, process group and run marker")
            return None
        if not (base / "cgroup.kill").exists() or not os.access(base / "cgroup.procs", os.W_OK):
            say(f"the cgroup v2 hierarchy at {mount} has no cgroup.kill (Linux < 5.14) or is read-only: a job's "
                "processes are tracked by session, process group and run marker")
            remove(base)
            return None
        return cls(base)

    def create(self, run_dir: Path) -> str:
        """A fresh cgroup (and its ``job`` child) for the run in ``run_dir``, recorded there."""
        name = "run-" + "-".join(run_dir.parts[-3::2])  # .../jobs/ID/runs/RUN -> run-ID-RUN
        path = self.base / name
        path.mkdir(exist_ok=True)
        (path / JOB_CHILD).mkdir(exist_ok=True)
        (run_dir / CGROUP_FILE).write_text(str(path) + "\n")
        return str(path)
