"""Process identity on Linux (``/proc``): is a recorded pid still the process we started?

A pid alone is not an identity (pids are reused), so the runtime records the kernel's start time
of every process it launches (``/proc/PID/stat`` field 22, in clock ticks since boot) and puts a
marker in the process environment (``TESSERAE_RUN_MARKER``, unique per run). After a controller
restart a process is adopted only if its pid, start time and marker all match; processes of a
run whose launcher is gone are found by their marker and killed before the job is requeued.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

MARKER_VAR = "TESSERAE_RUN_MARKER"
_PROC = Path("/proc")


def have_proc() -> bool:
    return (_PROC / "self" / "stat").exists()


def start_ticks(pid: int) -> int | None:
    """Kernel start time of ``pid``; None when it does not exist or is a zombie (it has exited)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = text[text.rfind(")") + 2:].split()
    if not rest or rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def environ_has(pid: int, name: str, value: str) -> bool:
    try:
        data = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{name}={value}".encode() in data.split(b"\0")


def alive(pid: int, ticks: int | None) -> bool:
    """The process ``pid`` exists, has not exited, and started at ``ticks`` (when known)."""
    if have_proc():
        now = start_ticks(pid)
        return now is not None and (ticks is None or now == ticks)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pids_with_marker(marker: str, name: str = MARKER_VAR) -> list[int]:
    """Every live process whose environment holds ``name=marker`` (this user's processes only)."""
    if not have_proc():
        return []
    out = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            if pid != os.getpid() and environ_has(pid, name, marker) and start_ticks(pid) is not None:
                out.append(pid)
    return sorted(out)


def pids_with_marker_prefix(prefix: str, name: str = MARKER_VAR) -> list[int]:
    """Live processes whose marker starts with ``prefix`` (every job process of one state folder)."""
    if not have_proc():
        return []
    key = f"{name}={prefix}".encode()
    out = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            data = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(item.startswith(key) for item in data.split(b"\0")) and start_ticks(int(entry.name)) is not None:
            out.append(int(entry.name))
    return sorted(out)


def pids_in_group(pgid: int) -> list[int]:
    """Live processes whose process group is ``pgid`` (``/proc/PID/stat`` field 5)."""
    if not have_proc():
        return []
    out = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        rest = text[text.rfind(")") + 2:].split()
        if len(rest) > 2 and rest[0] not in ("Z", "X") and rest[2] == str(pgid):
            out.append(int(entry.name))
    return sorted(out)


def kill_pids(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
