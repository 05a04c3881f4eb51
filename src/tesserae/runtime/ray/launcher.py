"""The launcher of one part of a run on a Ray node (the ``ray`` executor's counterpart of ``local.launcher``).

    python -I ray/launcher.py PART_DIR LOG NPROC FIRST_RANK WORLD_SIZE AGENT_PID AGENT_TICKS LEASE_FILE -- CMD ARGS...

The node's agent actor starts it. It detaches at once (fork, ``setsid``; the intermediate
process prints the launcher's pid on stdout and exits), so it is not a child of the Ray worker:
Ray SIGKILLs a worker's children when the worker exits, which would orphan the job. Then it
starts NPROC copies of the command with ``RANK = FIRST_RANK + i``, ``LOCAL_RANK = i``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE = NPROC``; stdout and stderr append to LOG.

Like ``launcher``, it runs with a fixed environment and gives the part's own (``PART_DIR/env.json``,
read and removed before it detaches: ``env_handoff``) to the copies only. And with the same code
(``supervise``): SIGTERM/SIGINT are forwarded to the copies; when one copy fails the others get
SIGTERM, then SIGKILL after a grace; when all have exited the exit code is written to
``PART_DIR/exit.json`` (atomically) and the launcher exits with it.

Unlike it, it watches its agent (pid and kernel start time) and its lease (``ray.lease``: the end
of the part's lease in the agent's node-local LEASE_FILE), every 0.25 s. When the agent is gone
(its node left the Ray cluster, or the actor died) or the lease ran out (no renewal from the
controller for a lease: a partition, a stuck agent), the controller writes the part off and will
restart the job elsewhere from its checkpoint, so this part must stop at once: the launcher
SIGKILLs its copies and every process carrying the part's marker (``TESSERAE_RAY_PART``), waits
until they are gone, records ``"orphaned": true`` (and why) in ``exit.json``, and ends its own
process group. The record comes after the kill, so the controller may take it as proof that
nothing of the part still runs.

Standard library only (and the runtime's standard-library-only ``procs``, ``supervise`` and ``env_handoff``; nothing
of Ray): it starts in a few tens of milliseconds, detached from the Ray worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable

from tesserae.runtime.job import env_handoff
from tesserae.runtime.launch import procs
from tesserae.runtime.launch.supervise import EXIT_FILE, Copies, status_code, write_exit
from tesserae.runtime.ray.lease import held_until

PART_VAR = "TESSERAE_RAY_PART"  # set by the agent: the part folder, in every process of the part
_WATCH_INTERVAL = 0.25
#: How long the launcher waits for its killed processes to be gone before it records the part's end.
_KILL_WAIT = 5.0


def read_exit(part_dir: str) -> dict[str, object] | None:
    """The record of a part's end: ``{"code", "time", "orphaned", "why"}``, or None if it wrote none."""
    try:
        with open(os.path.join(part_dir, EXIT_FILE)) as f:
            doc = json.loads(f.read(1 << 16))
        return {"code": int(doc["code"]), "time": float(doc["time"]), "orphaned": bool(doc.get("orphaned")),
                "why": str(doc.get("why", ""))[:200]}
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


def fence(copies: Copies, part_dir: str, why: str, marker_var: str = PART_VAR, marker: str | None = None) -> None:
    """Stop this part at once (see the module docstring): kill, wait until gone, record, end the group.
    The part's processes carry ``marker_var=marker`` (default: this launcher's own ``PART_VAR``; the Slurm
    launcher gives its own)."""
    print(f"tesserae: {why}; stopping this part at once", flush=True)
    marker = os.environ.get(marker_var) if marker is None else marker
    for child in copies.children.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            child.kill()
    deadline = time.monotonic() + _KILL_WAIT
    while time.monotonic() < deadline:
        left = procs.pids_with_marker(marker, marker_var) if marker else []
        procs.kill_pids(left)
        for pid, child in list(copies.children.items()):
            if child.poll() is not None:  # reaped now, or by Popen itself in kill() (it polls first)
                copies.children.pop(pid)
        if not left and not copies.children:
            break
        time.sleep(0.02)
    write_exit(part_dir, -signal.SIGKILL, orphaned=True, why=why)
    if os.getpgrp() == os.getpid():  # this launcher leads its group (it always does on a node): all of it
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(128 + signal.SIGKILL)  # a launcher started in someone else's group (by hand, in a test)


def _watch(copies: Copies, part_dir: str, agent_pid: int, agent_ticks: int | None,
           lease_file: str) -> Callable[[float], None]:
    """A ``Copies.wait`` watch (every ``_WATCH_INTERVAL``): the agent still there, the lease still held."""
    next_watch = [0.0]

    def watch(now: float) -> None:
        if now < next_watch[0]:
            return
        next_watch[0] = now + _WATCH_INTERVAL
        if not procs.alive(agent_pid, agent_ticks):
            fence(copies, part_dir, f"the node's agent (pid {agent_pid}) is gone")
        until = held_until(lease_file, part_dir)
        if until is None or time.monotonic() > until:
            fence(copies, part_dir, "this part's lease ran out (no word from the controller)" if until is not None
                  else "this part holds no lease")

    return watch


def main(argv: list[str]) -> int:
    if len(argv) < 10 or argv[8] != "--":
        print("usage: ray/launcher.py PART_DIR LOG NPROC FIRST_RANK WORLD_SIZE AGENT_PID AGENT_TICKS LEASE_FILE "
              "-- CMD...", file=sys.stderr)
        return 2
    part_dir, log = argv[0], argv[1]
    nproc, first_rank, world = int(argv[2]), int(argv[3]), int(argv[4])
    agent_pid, agent_ticks = int(argv[5]), (int(argv[6]) if argv[6] != "-" else None)
    lease_file, cmd = argv[7], argv[9:]
    try:  # before detaching: the agent learns at once that the part cannot start
        job_env = env_handoff.take(part_dir)
    except ValueError as e:
        print(f"tesserae: the part's environment cannot be read: {e}", file=sys.stderr)
        return 126
    _detach(log)
    copies = Copies()
    copies.catch_signals()
    envs = [{**job_env, "RANK": str(first_rank + i), "LOCAL_RANK": str(i), "WORLD_SIZE": str(world),
             "LOCAL_WORLD_SIZE": str(nproc)} for i in range(nproc)]
    copies.start(cmd, envs)
    code = copies.wait(_watch(copies, part_dir, agent_pid, agent_ticks, lease_file))
    write_exit(part_dir, code, orphaned=False)
    return status_code(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
