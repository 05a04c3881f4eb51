"""Reading and writing the files a job can touch, as hostile input.

A job may replace any file it can write (``progress.json``, ``output.log`` in same-user mode, an
exit record) with a FIFO, a device, a symlink, a huge file or nonsense. The controller must never
block on such a file, never follow a job's symlink, never read more than a small cap, and never
take a number it cannot store. Every open here is ``O_NONBLOCK | O_NOFOLLOW`` and is checked to be
a regular file (``fstat``) before a byte is read.

Standard library only: the launcher imports nothing heavier.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Largest integer the API and the store accept (exactly representable as a double, as in JSON).
MAX_INT = 2**53
#: Cap on a progress report (a few numbers in JSON; anything larger is not a report).
PROGRESS_CAP = 64 * 1024
#: Cap on a launcher's exit record.
EXIT_RECORD_CAP = 4096

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_regular(path: str | os.PathLike[str]) -> int | None:
    """A read-only descriptor on ``path`` if it is a regular file (not a symlink, FIFO, device...)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
    except OSError:
        os.close(fd)
        return None
    return fd


def read_capped(path: str | os.PathLike[str], cap: int) -> bytes | None:
    """The whole content of a regular file of at most ``cap`` bytes; None otherwise."""
    fd = open_regular(path)
    if fd is None:
        return None
    try:
        if os.fstat(fd).st_size > cap:
            return None
        data = os.read(fd, cap + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= cap else None


def _bounded_number(value: Any, *, integer: bool, low: float) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        if not low <= value <= MAX_INT:
            return None
        return int(value) if integer else float(value)
    if integer or not math.isfinite(value) or not low <= value <= MAX_INT:
        return None
    return float(value)


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """What a job's ``progress.json`` says, each field bounded (None: missing, malformed or out of bounds).

    ``iterations`` in [0, 2^53]; ``total`` an integer in [1, 2^53]; ``time`` (when the job wrote it, its
    clock) in [0, 2^53]; ``run`` (the ``TESSERAE_RUN_ID`` of the run that wrote it) an integer in [0, 2^53].
    All of it is the job's word: the controller bounds ``time`` by when it saw the report, and takes a
    report of another run than the current one as stale (``controller.learning``)."""

    iterations: float | None = None
    total: int | None = None
    time: float | None = None
    run: int | None = None


def read_progress_report(path: str | os.PathLike[str]) -> ProgressReport:
    """A job's ``progress.json`` as a :class:`ProgressReport` (every field None when unreadable)."""
    data = read_capped(path, PROGRESS_CAP)
    if data is None:
        return ProgressReport()
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # ValueError covers bad UTF-8 and integers too long to parse
        return ProgressReport()
    if not isinstance(doc, dict):
        return ProgressReport()
    return ProgressReport(_bounded_number(doc.get("iterations"), integer=False, low=0),
                          _bounded_number(doc.get("total"), integer=True, low=1),  # type: ignore[arg-type]
                          _bounded_number(doc.get("time"), integer=False, low=0),
                          _bounded_number(doc.get("run"), integer=True, low=0))  # type: ignore[arg-type]


def read_progress(path: str | os.PathLike[str]) -> tuple[float | None, int | None]:
    """(iterations done, total iterations) from a job's ``progress.json``; None for what is missing,
    malformed or out of bounds (iterations in [0, 2^53], total an integer in [1, 2^53])."""
    report = read_progress_report(path)
    return report.iterations, report.total


def read_exit_record(run_dir: str | os.PathLike[str]) -> tuple[int, float] | None:
    """(exit code, time) that a run's launcher wrote to ``RUN_DIR/exit.json``, or None."""
    data = read_capped(Path(run_dir) / "exit.json", EXIT_RECORD_CAP)
    if data is None:
        return None
    try:
        doc = json.loads(data)
        code, t = doc["code"], doc["time"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    if isinstance(code, bool) or not isinstance(code, int) or not -255 <= code <= 255:
        return None
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
        return None
    return code, float(t)


def open_log_append(path: Path) -> int:
    """A descriptor appending to the log ``path``, created 0600 if missing.

    Whatever a job left in its place (a FIFO, a symlink, a directory) is moved aside first, so the
    controller never blocks on it or writes through it. Raises OSError if that fails too.
    """
    try:
        fd = os.open(path, _APPEND_FLAGS | os.O_CREAT, 0o600)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.set_blocking(fd, True)
                return fd
        except OSError:
            pass
        os.close(fd)
    _move_aside(path)
    fd = os.open(path, _APPEND_FLAGS | os.O_CREAT | os.O_EXCL, 0o600)
    os.set_blocking(fd, True)
    return fd


def append_server_line(path: Path, line: str) -> None:
    """A line of the server's own in a job's log, ``--- tesserae TIME: LINE ---``, appended through
    ``open_log_append`` (never blocking on, nor writing through, what the job put there). Raises OSError."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = open_log_append(path)
    try:
        os.write(fd, f"--- tesserae {stamp}: {line} ---\n".encode(errors="backslashreplace"))
    finally:
        os.close(fd)


def _move_aside(path: Path) -> None:
    """Rename a non-regular file out of the way (``NAME.not-a-file.N``); remove an empty directory."""
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
            return
    for n in range(1000):
        other = path.with_name(f"{path.name}.not-a-file.{n}")
        if not os.path.lexists(other):
            os.rename(path, other)
            return
    raise OSError(f"cannot move {path} aside")


def read_log(path: Path, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of a job's log from ``offset``; empty unless the log is a regular file."""
    fd = open_regular(path)
    if fd is None:
        return b""
    try:
        return os.pread(fd, limit, offset)
    except OSError:
        return b""
    finally:
        os.close(fd)


def tail_offset(path: Path, lines: int, window: int) -> int:
    """Where the last ``lines`` lines of a job's log begin, looking back at most ``window`` bytes: a
    longer tail starts at the first line that begins inside that window (or, when none does, at the
    window's start). 0 when the log is missing or shorter."""
    fd = open_regular(path)
    if fd is None:
        return 0
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - window)
        data = os.pread(fd, size - start, start)
    except OSError:
        return 0
    finally:
        os.close(fd)
    end = len(data) - 1 if data.endswith(b"\n") else len(data)  # a last line without its newline counts
    for _ in range(lines):
        end = data.rfind(b"\n", 0, end)
        if end < 0:
            first = data.find(b"\n")
            return start if start == 0 or first < 0 or first == len(data) - 1 else start + first + 1
    return start + end + 1
