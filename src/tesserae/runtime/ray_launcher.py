"""The launcher of one part of a run on a Ray node (the ``ray`` executor's counterpart of ``launcher``).

    python -I ray_launcher.py PART_DIR LOG NPROC FIRST_RANK WORLD_SIZE AGENT_PID AGENT_TICKS -- CMD ARGS...

The node's agent actor starts it. It detaches at once (fork, ``setsid``; the intermediate
process prints the launcher's pid on stdout and exits), so it is not a child of the Ray worker:
Ray SIGKILLs a worker's children when the worker exits, which would orphan the job. Then it
starts NPROC copies of the command with ``RANK = FIRST_RANK + i``, ``LOCAL_RANK = i``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE = NPROC``; stdout and stderr append to LOG.

Like ``launcher``: SIGTERM/SIGINT are forwarded to the copies; when one copy fails the others
get SIGTERM, then SIGKILL after a grace; when all have exited the exit code is written to
``PART_DIR/exit.json`` (atomically) and the launcher exits with it.

Unlike it, it watches its agent (pid and kernel start time): when the agent is gone (its node
left the Ray cluster, or the actor died) the run is written off by the controller and will be
restarted elsewhere from its checkpoint, so this part must stop writing at once: the launcher
records ``"orphaned": true`` in ``exit.json`` and SIGKILLs its process group and every process
carrying the part's marker (``TESSERAE_RAY_PART``).

Standard library only: it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

EXIT_FILE = "exit.json"
PART_VAR = "TESSERAE_RAY_PART"  # set by the agent: the part folder, in every process of the part
_PEER_GRACE = 10.0
_WATCH_INTERVAL = 0.25


def _ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2:].split()
    if not rest or rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def _alive(pid: int, ticks: int | None) -> bool:
    if os.path.exists("/proc/self/stat"):
        now = _ticks(pid)
        return now is not None and (ticks is None or now == ticks)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_marked(var: str, value: str) -> None:
    """SIGKILL every other process whose environment holds ``var=value`` (jobs that left our group)."""
    key = f"{var}={value}".encode()
    me = os.getpid()
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    found = key in f.read().split(b"\0")
            except OSError:
                continue
            if found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry), signal.SIGKILL)


def write_exit(part_dir: str, code: int, orphaned: bool = False) -> None:
    path = os.path.join(part_dir, EXIT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"code": code, "time": time.time(), "orphaned": orphaned}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
    children: dict[int, subprocess.Popen[bytes]] = {}
    pending: list[int] = []

    def forward(signum: int, frame: object) -> None:
        pending.append(signum)
        for child in children.values():
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 0
    for i in range(nproc):
        env = dict(os.environ)
        env.update(RANK=str(first_rank + i), LOCAL_RANK=str(i), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(nproc))
        try:
            child = subprocess.Popen(cmd, env=env)
        except OSError as e:
            print(f"tesserae: cannot start {cmd[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
            code = 126 if isinstance(e, PermissionError) else 127
            forward(signal.SIGTERM, None)
            break
        children[child.pid] = child
        if pending:
            child.send_signal(pending[-1])
    failed_at: float | None = None
    next_watch = 0.0
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            now = time.monotonic()
            if now >= next_watch:
                next_watch = now + _WATCH_INTERVAL
                if not _alive(agent_pid, agent_ticks):
                    print(f"tesserae: the node's agent (pid {agent_pid}) is gone; stopping this part at once",
                          flush=True)
                    write_exit(part_dir, -signal.SIGKILL, orphaned=True)
                    if PART_VAR in os.environ:
                        _kill_marked(PART_VAR, os.environ[PART_VAR])
                    os.killpg(os.getpgrp(), signal.SIGKILL)
            if failed_at is not None and now - failed_at > _PEER_GRACE:
                for child in children.values():
                    with contextlib.suppress(ProcessLookupError):
                        child.kill()
            time.sleep(0.05)
            continue
        child = children.pop(pid, None)
        if child is None:
            continue
        rc = os.waitstatus_to_exitcode(status)
        child.returncode = rc
        if rc != 0 and code == 0:
            code = rc
            if children and failed_at is None:
                failed_at = time.monotonic()
                for other in children.values():
                    with contextlib.suppress(ProcessLookupError):
                        other.terminate()
    write_exit(part_dir, code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
