"""What both launchers do (``launcher`` on this machine, ``ray.launcher`` on a Ray node): start the copies
of a job's command, forward SIGTERM/SIGINT to them, stop the others when one fails, and write the
exit record.

- ``Copies.start``: one process per environment given (a launcher sets ``RANK``... per copy); a
  command that cannot start makes the code 127 (not found) or 126 (not executable, or the account
  cannot be taken) and stops the copies already started.
- ``Copies.wait``: reaps the copies; the first failing copy's code is the code (a copy killed by
  signal N counts as -N); the others then get SIGTERM, and SIGKILL after ``PEER_GRACE``.
- ``write_exit``: ``DIR/exit.json`` written atomically (``fsync``, rename, ``fsync`` of the folder),
  so a controller restarted after a crash still learns how the run ended.

Standard library only: both launchers start in a few tens of milliseconds, and the Ray one runs
detached from its Ray worker, with nothing of Ray.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

EXIT_FILE = "exit.json"
#: How long the other copies of a multi-process job get after one copy failed (then SIGKILL).
PEER_GRACE = 10.0


def write_exit(run_dir: str, code: int, **extra: object) -> None:
    """``RUN_DIR/exit.json`` = ``{"code", "time", **extra}``, atomically and durably."""
    path = os.path.join(run_dir, EXIT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"code": code, "time": time.time(), **extra}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        fd = os.open(run_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def status_code(code: int) -> int:
    """A launcher's own exit status for the code it recorded (a copy killed by signal N: 128+N)."""
    return code if code >= 0 else 128 - code


class Copies:
    """The copies of a job's command a launcher supervises."""

    def __init__(self) -> None:
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.pending: list[int] = []
        self.code = 0
        self.failed_at: float | None = None

    def forward(self, signum: int, frame: object = None) -> None:
        """Pass a stop request on to every copy (and to the copies started after it)."""
        self.pending.append(signum)
        for child in self.children.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                child.send_signal(signum)

    def catch_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.forward)
        signal.signal(signal.SIGINT, self.forward)

    def start(self, cmd: list[str], envs: list[dict[str, str]], preexec: Callable[[], None] | None = None,
              who: str = "") -> None:
        """One copy of ``cmd`` per environment; ``who`` names the account in an error (' as uid N')."""
        for env in envs:
            try:
                child = subprocess.Popen(cmd, env=env, preexec_fn=preexec)
            except OSError as e:
                print(f"tesserae: cannot start {cmd[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
                self.code = 126 if isinstance(e, PermissionError) else 127
                self.forward(signal.SIGTERM)
                return
            except (subprocess.SubprocessError, ValueError) as e:
                print(f"tesserae: cannot start {cmd[0]!r}{who}: {e}", file=sys.stderr, flush=True)
                self.code = 126
                self.forward(signal.SIGTERM)
                return
            self.children[child.pid] = child
            if self.pending:  # a stop request arrived while the copies were starting
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    child.send_signal(self.pending[-1])

    def wait(self, watch: Callable[[float], None] | None = None) -> int:
        """Reap every copy; returns the code. With ``watch`` it polls (every 50 ms, calling ``watch(now)``)
        instead of blocking until a copy exits."""
        children = self.children
        while children:
            if self._reaped_by_popen():
                continue
            blocking = watch is None and self.failed_at is None
            try:
                pid, status = os.waitpid(-1, 0 if blocking else os.WNOHANG)
            except ChildProcessError:  # the last copies were reaped by Popen meanwhile (a forwarded stop)
                if self._reaped_by_popen():
                    continue
                break
            if pid == 0:
                now = time.monotonic()
                if watch is not None:
                    watch(now)
                if self.failed_at is not None and now - self.failed_at > PEER_GRACE:
                    for child in children.values():
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            child.kill()
                time.sleep(0.05)
                continue
            if pid in children:
                self._ended(pid, os.waitstatus_to_exitcode(status))
        return self.code

    def _reaped_by_popen(self) -> bool:
        """Count the copies ``Popen`` reaped itself; True if there were any. ``send_signal`` polls before it signals
        (bpo-38630), so a copy that died just before a stop was forwarded to it (Slurm signals the job's processes
        too, say) is reaped there, and ``waitpid(-1)`` never sees it: its code is the one ``Popen`` recorded."""
        done = [(pid, child.returncode) for pid, child in self.children.items() if child.returncode is not None]
        for pid, rc in done:
            self._ended(pid, rc)
        return bool(done)

    def _ended(self, pid: int, rc: int) -> None:
        """Copy ``pid`` ended with ``rc`` (-N: killed by signal N): the first failure is the code, and stops the
        others (SIGTERM now, SIGKILL after ``PEER_GRACE``)."""
        child = self.children.pop(pid)
        child.returncode = rc
        if rc != 0 and self.code == 0:
            self.code = rc
            if self.children and self.failed_at is None:  # one copy failed: stop the others
                self.failed_at = time.monotonic()
                for other in self.children.values():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        other.terminate()
