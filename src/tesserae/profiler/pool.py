"""The profiler's processes: a zygote that imported PyTorch once and forks a worker per process of a
measurement, connected back over a Unix socket (:mod:`tesserae.profiler.worker` is the other side).

A fork of a process that already imported PyTorch starts in milliseconds where a fresh interpreter
takes seconds; the zygote never initialises CUDA itself, so its children can.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError

PROBE_TIMEOUT_S = 300.0


class ProfilerError(RuntimeError):
    """A measurement failed for a reason other than running out of memory (a bug, a crash, a hang)."""


class WorkerPool:
    """The zygote (``python -m tesserae.profiler.worker --serve``) and the socket its children call.

    ``start()`` has the zygote fork a worker and returns it connected; ``probe()`` asks a forked
    child what it can measure on. Use as a context manager: leaving it ends the zygote and kills any
    worker still connected (a worker's connection closes when its process ends, so a worker whose
    connection is open is alive and its pid is its own).
    """

    def __init__(self, timeout: float = PROBE_TIMEOUT_S, python: str = sys.executable) -> None:
        self.timeout = timeout
        self.python = python
        self.dir = Path(tempfile.mkdtemp(prefix="tesserae-profile-"))
        self.socket_path = str(self.dir / "workers.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket_path)
        self.listener.listen(64)
        self._log = (self.dir / "zygote.log").open("w")
        # Anything in the zygote that asks whether CUDA is available must ask NVML, not the CUDA runtime:
        # a runtime initialised before fork() leaves the children unable to use CUDA.
        env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
        self.zygote = subprocess.Popen([python, "-m", "tesserae.profiler.worker", "--serve", self.socket_path],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                       env=env)
        self.live: dict[int, Connection] = {}
        self._tags = 0
        try:
            hello = self._reply()
        except BaseException:
            self.close()
            raise
        if "torch_error" in hello:
            self.close()
            raise InputError(f"PyTorch cannot be imported ({hello['torch_error']}); install the profiler's "
                             "extra: pip install 'tesserae[profiler]'")

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reply(self) -> dict[str, Any]:
        out = self.zygote.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], self.timeout)
        line = out.readline() if ready else ""
        if not line:
            self.zygote.poll()
            raise ProfilerError("the profiler's worker server did not answer "
                                f"(status {self.zygote.returncode}); log: {self._zygote_log()}")
        return dict(json.loads(line))

    def _zygote_log(self) -> str:
        try:
            return log_tail((self.dir / "zygote.log").read_text(errors="replace"))
        except OSError:
            return "(no log)"

    def start(self, spec: dict[str, Any] | None = None, log: Path | None = None) -> tuple[int, Connection]:
        """Fork a worker for ``spec`` (a probe when None); returns its pid and connection."""
        self._tags += 1
        request: dict[str, Any] = {"tag": self._tags, "log": None if log is None else str(log)}
        request.update({"probe": True} if spec is None else {"spec": spec})
        assert self.zygote.stdin is not None
        try:
            self.zygote.stdin.write(json.dumps(request) + "\n")
            self.zygote.stdin.flush()
        except (BrokenPipeError, OSError):
            raise ProfilerError(f"the profiler's worker server has exited; log: {self._zygote_log()}") from None
        pid = int(self._reply()["pid"])
        self.listener.settimeout(self.timeout)
        try:
            sock, _ = self.listener.accept()
        except TimeoutError:
            raise ProfilerError(f"a worker did not connect within {self.timeout:.0f} s") from None
        sock.settimeout(None)
        conn = Connection(sock.detach())
        hello = conn.recv() if conn.poll(self.timeout) else {}
        if not isinstance(hello, dict) or hello.get("tag") != self._tags:
            conn.close()
            raise ProfilerError(f"unexpected worker greeting {hello!r}")
        self.live[pid] = conn
        return pid, conn

    def ended(self, pid: int) -> None:
        """The worker's connection reached its end: the process is gone."""
        conn = self.live.pop(pid, None)
        if conn is not None:
            conn.close()

    def kill(self, pid: int) -> None:
        """Kill a worker whose connection is still open (so ``pid`` is still that worker's)."""
        conn = self.live.pop(pid, None)
        if conn is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError, EOFError):  # wait for the end of the connection: the process is gone
            while conn.poll(10):
                conn.recv()
        conn.close()

    def probe(self) -> dict[str, Any]:
        """What a fresh worker process can measure on (see :func:`tesserae.profiler.worker.probe`)."""
        pid, conn = self.start(None, self.dir / "probe.log")
        try:
            if not conn.poll(self.timeout):
                raise ProfilerError(f"probing the devices took more than {self.timeout:.0f} s")
            info = dict(conn.recv())
        except EOFError:
            self.ended(pid)
            log = log_tail(read_log(self.dir / "probe.log"))
            raise ProfilerError(f"probing the devices failed; log: {log}") from None
        except BaseException:
            self.kill(pid)
            raise
        self.ended(pid)
        return info

    def close(self) -> None:
        for pid in list(self.live):
            self.kill(pid)
        if self.zygote.stdin is not None:
            with contextlib.suppress(OSError):
                self.zygote.stdin.close()
        try:
            self.zygote.wait(30)
        except subprocess.TimeoutExpired:
            self.zygote.kill()
            self.zygote.wait()
        if self.zygote.stdout is not None:
            self.zygote.stdout.close()
        self.listener.close()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def log_tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"
