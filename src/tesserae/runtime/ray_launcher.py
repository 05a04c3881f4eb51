"""The launcher of one part of a run on a Ray node (the ``ray`` executor's counterpart of ``launcher``).

    python -I ray_launcher.py PART_DIR LOG NPROC FIRST_RANK WORLD_SIZE AGENT_PID AGENT_TICKS -- CMD ARGS...

The node's agent actor starts it. It detaches at once (fork, ``setsid``; the intermediate
process prints the launcher's pid on stdout and exits), so it is not a child of the Ray worker:
Ray SIGKILLs a worker's children when the worker exits, which would orphan the job. Then it
starts NPROC copies of the command with ``RANK = FIRST_RANK + i``, ``LOCAL_RANK = i``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE = NPROC``; stdout and stderr append to LOG.

Like ``launcher``, and with the same code (``supervise``): SIGTERM/SIGINT are forwarded to the
copies; when one copy fails the others get SIGTERM, then SIGKILL after a grace; when all have
exited the exit code is written to ``PART_DIR/exit.json`` (atomically) and the launcher exits with it.

Unlike it, it watches its agent (pid and kernel start time): when the agent is gone (its node
left the Ray cluster, or the actor died) the run is written off by the controller and will be
restarted elsewhere from its checkpoint, so this part must stop writing at once: the launcher
records ``"orphaned": true`` in ``exit.json`` and SIGKILLs its process group and every process
carrying the part's marker (``TESSERAE_RAY_PART``).

Standard library only (and the runtime's standard-library-only ``procs`` and ``supervise``; nothing
of Ray): it starts in a few tens of milliseconds, detached from the Ray worker.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable

from tesserae.runtime import procs
from tesserae.runtime.supervise import EXIT_FILE, Copies, status_code, write_exit

PART_VAR = "TESSERAE_RAY_PART"  # set by the agent: the part folder, in every process of the part
_WATCH_INTERVAL = 0.25


def read_exit(part_dir: str) -> dict[str, object] | None:
    """The record of a part's end: ``{"code", "time", "orphaned"}``, or None if it wrote none."""
    try:
        with open(os.path.join(part_dir, EXIT_FILE)) as f:
            doc = json.load(f)
        return {"code": int(doc["code"]), "time": float(doc["time"]), "orphaned": bool(doc.get("orphaned"))}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _detach(log: str) -> None:
    """Fork; the parent prints the child's pid and exits; the child leads a new session, logs to LOG."""
    pid = os.fork()
    if pid > 0:
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()
        os._exit(0)
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def _agent_watch(part_dir: str, agent_pid: int, agent_ticks: int | None) -> Callable[[float], None]:
    """A ``Copies.wait`` watch: the moment the agent is gone, record the part as orphaned and SIGKILL it
    (every process with its part marker, then this launcher's own process group, itself included)."""
    next_watch = [0.0]

    def watch(now: float) -> None:
        if now < next_watch[0]:
            return
        next_watch[0] = now + _WATCH_INTERVAL
        if not procs.alive(agent_pid, agent_ticks):
            print(f"tesserae: the node's agent (pid {agent_pid}) is gone; stopping this part at once", flush=True)
            write_exit(part_dir, -signal.SIGKILL, orphaned=True)
            if PART_VAR in os.environ:
                procs.kill_pids(procs.pids_with_marker(os.environ[PART_VAR], PART_VAR))
            os.killpg(os.getpgrp(), signal.SIGKILL)

    return watch


def main(argv: list[str]) -> int:
    if len(argv) < 9 or argv[7] != "--":
        print("usage: ray_launcher.py PART_DIR LOG NPROC FIRST_RANK WORLD_SIZE AGENT_PID AGENT_TICKS -- CMD...",
              file=sys.stderr)
        return 2
    part_dir, log = argv[0], argv[1]
    nproc, first_rank, world = int(argv[2]), int(argv[3]), int(argv[4])
    agent_pid, agent_ticks = int(argv[5]), (int(argv[6]) if argv[6] != "-" else None)
    cmd = argv[8:]
    _detach(log)
    copies = Copies()
    copies.catch_signals()
    envs = [{**os.environ, "RANK": str(first_rank + i), "LOCAL_RANK": str(i), "WORLD_SIZE": str(world),
             "LOCAL_WORLD_SIZE": str(nproc)} for i in range(nproc)]
    copies.start(cmd, envs)
    code = copies.wait(_agent_watch(part_dir, agent_pid, agent_ticks))
    write_exit(part_dir, code, orphaned=False)
    return status_code(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
