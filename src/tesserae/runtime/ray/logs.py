"""Ray's own messages, kept out of the server's log: they go to ``STATE/ray.log``.

A Ray driver writes to its process's output three ways: Ray's C++ core logs to file descriptor 2
(connection retries, ``InvalidAuthToken``...), the ``ray`` Python loggers write to ``sys.stderr``,
and Ray's background threads (``ray_listen_error_messages``: what raylets and the GCS tell drivers,
such as the memory monitor's reports and the multi-line "node ... marked dead" notices) print to
``sys.stdout``. On a cluster that is busy or losing nodes they drown the server's own lines.

``divert`` (once the state folder is open): descriptors 1 and 2 go to ``ray.log``, so whatever
writes to them directly (Ray's core) lands there; ``sys.stdout``/``sys.stderr`` become writers over
the previous descriptors (the server's log, a terminal or ``STATE/server.log``) that pass on what
the server's own threads write and send what Ray's threads (named ``ray_...``) write to ``ray.log``;
the ``ray`` loggers write to ``ray.log``. What Ray said while connecting (captured then, see
``ray.connect``) is put at its head. The server says where Ray's messages went.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TextIO

LOG_FILE = "ray.log"
_RAY_THREADS = "ray_"


class _Split(io.TextIOBase):
    """A text stream that sends what Ray's threads write to ``ray`` and the rest to ``own``."""

    def __init__(self, own: TextIO, ray: TextIO) -> None:
        self.own, self.ray = own, ray

    def _target(self) -> TextIO:
        return self.ray if threading.current_thread().name.startswith(_RAY_THREADS) else self.own

    def write(self, s: str) -> int:
        return self._target().write(s)

    def flush(self) -> None:
        for stream in (self.own, self.ray):
            stream.flush()

    def fileno(self) -> int:
        return self.own.fileno()

    def isatty(self) -> bool:
        return self.own.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.own.encoding


def divert(state_dir: Path, earlier: str = "") -> Path:
    """Send Ray's messages to ``STATE/ray.log`` from now on (see the module docstring); returns its path.
    ``earlier``: what Ray wrote before (while connecting)."""
    path = state_dir / LOG_FILE
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    ray_stream = os.fdopen(os.dup(fd), "w", buffering=1, errors="replace")
    if earlier.strip():
        ray_stream.write(earlier if earlier.endswith("\n") else earlier + "\n")
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    own_out = os.fdopen(os.dup(1), "w", buffering=1, errors="replace")
    own_err = os.fdopen(os.dup(2), "w", buffering=1, errors="replace")
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = _Split(own_out, ray_stream)  # type: ignore[assignment]
    sys.stderr = _Split(own_err, ray_stream)  # type: ignore[assignment]
    logger = logging.getLogger("ray")
    for h in list(logger.handlers):
        logger.removeHandler(h)
    handler = logging.StreamHandler(ray_stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    return path
