"""The per-run launcher: ``python -m tesserae.runtime.launcher RUN_DIR NPROC -- CMD ARGS...``.

The local executor starts this small supervisor (in a session of its own) instead of the job
command itself. It starts NPROC copies of the command (``RANK``/``LOCAL_RANK`` set per copy when
NPROC > 1), forwards SIGTERM/SIGINT to them, and when they have all exited writes their exit code
to ``RUN_DIR/exit.json`` (atomically) before exiting with the same code. Because that file
outlives both the job and the controller, a controller restarted after a crash still learns how
a job that ended meanwhile ended, and never runs a completed job again.

Exit code: 0 when every copy succeeded; otherwise the first failing copy's code (a copy killed by
signal N counts as -N in ``exit.json``, 128+N as this process's status); 127 when the command
cannot be started (not found), 126 when it is not executable.

It imports only the standard library: it starts in a few tens of milliseconds.
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
# How long the other copies of a multi-process job get after one copy failed (then SIGKILL).
_PEER_GRACE = 10.0


def write_exit(run_dir: str, code: int) -> None:
    path = os.path.join(run_dir, EXIT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"code": code, "time": time.time()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        fd = os.open(run_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_exit(run_dir: str) -> tuple[int, float] | None:
    """(exit code, time) recorded by the launcher of a run, or None if it wrote nothing."""
    try:
        with open(os.path.join(run_dir, EXIT_FILE)) as f:
            doc = json.load(f)
        return int(doc["code"]), float(doc["time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m tesserae.runtime.launcher RUN_DIR NPROC -- CMD ARGS...", file=sys.stderr)
        return 2
    run_dir, nproc, cmd = argv[0], int(argv[1]), argv[3:]
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
    for rank in range(nproc):
        env = dict(os.environ)
        if nproc > 1:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc))
        try:
            child = subprocess.Popen(cmd, env=env)
        except OSError as e:
            print(f"tesserae: cannot start {cmd[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
            code = 126 if isinstance(e, PermissionError) else 127
            forward(signal.SIGTERM, None)
            break
        children[child.pid] = child
        if pending:  # a stop request arrived while the copies were starting
            child.send_signal(pending[-1])
    failed_at: float | None = None
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG if failed_at is not None else 0)
        except ChildProcessError:
            break
        if pid == 0:
            if time.monotonic() - failed_at > _PEER_GRACE:  # type: ignore[operator]
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
            if children and failed_at is None:  # one copy failed: stop the others
                failed_at = time.monotonic()
                for other in children.values():
                    with contextlib.suppress(ProcessLookupError):
                        other.terminate()
    write_exit(run_dir, code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
