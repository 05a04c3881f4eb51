"""What ``tesserae jobs --since/--until/--fields`` and ``tesserae usage`` share: times and windows on the
command line, the fields a job list can show, and why a job waits or ended.

A time is an ISO date or date and time in local time (``2026-12-01``, ``2026-12-01T14:30``),
``now``, a duration back from now (``2h``, ``now-2h``, ``1d``), or Unix seconds (``@1764590000``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tesserae.cli_fit import Col, print_table
from tesserae.core.errors import InputError
from tesserae.runtime.commands.common import console, duration, iterations
from tesserae.runtime.controller.lifecycle import parse_duration

TIME_HELP = "ISO date/time (local), now, 2h (ago), now-1d, or @UNIX-SECONDS"


def parse_time(text: str, field: str, now: float | None = None) -> float:
    """Unix seconds from one of the forms of the module docstring."""
    now = time.time() if now is None else now
    t = text.strip()
    try:
        if t == "now":
            return now
        if t.startswith("@"):
            value = float(t[1:])
            if not 0 <= value <= 1e11:
                raise ValueError
            return value
        if t.startswith("now-"):
            return now - parse_duration(t[4:])
        if t[:1].isdigit() and "-" in t[:5]:
            return datetime.fromisoformat(t).timestamp()
        return now - parse_duration(t)
    except ValueError:
        raise InputError(f"'{text}' is not a time: use {TIME_HELP}", field=field) from None


def local_time(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def why(job: dict[str, Any]) -> str:
    """A waiting job's queue position and reason; an ended job's reason."""
    if job.get("pending_reason"):
        position = job.get("queue_position")
        return (f"#{position} " if position else "") + job["pending_reason"]
    return job.get("reason") or "-"


#: ``--fields``: name -> (header, the value as JSON, the value as a table shows it).
FIELDS: dict[str, tuple[str, Callable[[dict[str, Any]], Any], Callable[[dict[str, Any]], str]]] = {
    "id": ("ID", lambda j: j["id"], lambda j: str(j["id"])),
    "name": ("NAME", lambda j: j["name"], lambda j: j["name"]),
    "user": ("USER", lambda j: j["user"], lambda j: j["user"]),
    "state": ("STATE", lambda j: j["state"], lambda j: j["state"]),
    "gpus": ("GPUS", lambda j: j["gpus"], lambda j: str(j["gpus"])),
    "type": ("TYPE", lambda j: j["job_type"], lambda j: j["job_type"]),
    "iters": ("ITERS", lambda j: j["iterations_done"], iterations),
    "submit": ("SUBMIT", lambda j: j["submit_time"], lambda j: local_time(j["submit_time"])),
    "start": ("START", lambda j: j["first_start_time"], lambda j: local_time(j["first_start_time"])),
    "end": ("END", lambda j: j["finish_time"], lambda j: local_time(j["finish_time"])),
    "elapsed": ("ELAPSED", lambda j: j["jct_seconds"], lambda j: duration(j["jct_seconds"])),
    "waited": ("WAITED", lambda j: j["waited_seconds"], lambda j: duration(j["waited_seconds"])),
    "ran": ("RAN", lambda j: j["executed_seconds"], lambda j: duration(j["executed_seconds"])),
    "gpu_hours": ("GPU-H", lambda j: round(j["gpu_hours"], 6), lambda j: f"{j['gpu_hours']:.3f}"),
    "preempt": ("PREEMPT", lambda j: j["preemptions"], lambda j: str(j["preemptions"])),
    "retries": ("RETRIES", lambda j: j["retries_used"], lambda j: f"{j['retries_used']}/{j['retries']}"),
    "exit": ("EXIT", lambda j: j["exit_code"], lambda j: "-" if j["exit_code"] is None else str(j["exit_code"])),
    "gpu_type": ("GPU TYPE", lambda j: j["gpu_type"], lambda j: j["gpu_type"] or "any"),
    "cpus": ("CPUS", lambda j: j["cpus"], lambda j: "-" if j["cpus"] is None else f"{j['cpus']:g}"),
    "memory": ("MEM (MiB)", lambda j: j["memory_mb"], lambda j: "-" if j["memory_mb"] is None else str(j["memory_mb"])),
    "why": ("WHY", why, why),
}


def parse_fields(text: str) -> list[str]:
    names = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in names if f not in FIELDS]
    if bad or not names:
        raise InputError(f"unknown field '{bad[0] if bad else text}'; the fields are {', '.join(FIELDS)}",
                         field="--fields")
    return names


def print_fields(items: list[dict[str, Any]], names: list[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps([{n: FIELDS[n][1](j) for n in names} for j in items], indent=2))
        return
    # The fields asked for are all shown: names and reasons wrap, the other values are never cut.
    cols = [Col(FIELDS[n][0], "right" if n in ("id", "gpus", "gpu_hours", "preempt") else "left",
                wrap=n in ("name", "why"), min_width=8) for n in names]
    print_table(console, cols, [[FIELDS[n][2](j) for n in names] for j in items])


def window(since: str | None, until: str | None) -> tuple[float | None, float | None]:
    lo = None if since is None else parse_time(since, "--since")
    hi = None if until is None else parse_time(until, "--until")
    if lo is not None and hi is not None and hi < lo:
        raise InputError(f"--until ({local_time(hi)}) is before --since ({local_time(lo)})", field="--until")
    return lo, hi
