"""Accounting on the command line, like Slurm's ``sacct``: ``tesserae usage`` (GPU-hours per user over a
window), and what ``tesserae jobs --since/--until/--fields`` share with it (times, fields).

A time is an ISO date or date and time in local time (``2026-12-01``, ``2026-12-01T14:30``),
``now``, a duration back from now (``2h``, ``now-2h``, ``1d``), or Unix seconds (``@1764590000``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.core.errors import InputError
from tesserae.runtime.commands.common import client, console, duration, iterations
from tesserae.runtime.controller.lifecycle import parse_duration

TIME_HELP = "ISO date/time (local), now, 2h (ago), now-1d, or @UNIX-SECONDS"


def register(app: typer.Typer) -> None:
    app.command(cls=OneLineErrors)(usage)


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


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _why(job: dict[str, Any]) -> str:
    from tesserae.runtime.commands.jobs import why

    return why(job)


#: ``--fields``: name -> (header, the value as JSON, the value as a table shows it).
FIELDS: dict[str, tuple[str, Callable[[dict[str, Any]], Any], Callable[[dict[str, Any]], str]]] = {
    "id": ("ID", lambda j: j["id"], lambda j: str(j["id"])),
    "name": ("NAME", lambda j: j["name"], lambda j: j["name"]),
    "user": ("USER", lambda j: j["user"], lambda j: j["user"]),
    "state": ("STATE", lambda j: j["state"], lambda j: j["state"]),
    "gpus": ("GPUS", lambda j: j["gpus"], lambda j: str(j["gpus"])),
    "type": ("TYPE", lambda j: j["job_type"], lambda j: j["job_type"]),
    "iters": ("ITERS", lambda j: j["iterations_done"], iterations),
    "submit": ("SUBMIT", lambda j: j["submit_time"], lambda j: _when(j["submit_time"])),
    "start": ("START", lambda j: j["first_start_time"], lambda j: _when(j["first_start_time"])),
    "end": ("END", lambda j: j["finish_time"], lambda j: _when(j["finish_time"])),
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
    "why": ("WHY", _why, _why),
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
    table = Table(box=None, pad_edge=False)
    for n in names:
        table.add_column(FIELDS[n][0], justify="right" if n in ("id", "gpus", "gpu_hours", "preempt") else "left")
    for j in items:
        table.add_row(*(FIELDS[n][2](j) for n in names))
    console.print(table)


def window(since: str | None, until: str | None) -> tuple[float | None, float | None]:
    lo = None if since is None else parse_time(since, "--since")
    hi = None if until is None else parse_time(until, "--until")
    if lo is not None and hi is not None and hi < lo:
        raise InputError(f"--until ({_when(hi)}) is before --since ({_when(lo)})", field="--until")
    return lo, hi


def usage(
    since: Annotated[str | None, typer.Option("--since", metavar="TIME", help=f"Window start: {TIME_HELP} "
                                              "(default: the beginning).")] = None,
    until: Annotated[str | None, typer.Option("--until", metavar="TIME", help="Window end (default: now).")
                     ] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user (another user: admin token).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """GPU-hours per user over a time window (the part of each run inside it), and the total."""
    lo, hi = window(since, until)
    params: dict[str, Any] = {k: v for k, v in (("since", lo), ("until", hi), ("user", user)) if v is not None}
    with client() as c:
        doc = c.call("GET", "/v1/accounting", params=params).json()
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    start = _when(doc["since"]) if doc["since"] is not None else "the beginning"
    span = f"{start} to {_when(doc['until']) if doc['until'] is not None else 'now'}"
    table = Table(box=None, pad_edge=False, title=f"GPU-hours from {span}", title_justify="left")
    for col in ("USER", "JOBS", "GPU-HOURS", "CPU-HOURS"):
        table.add_column(col, justify="left" if col == "USER" else "right")
    for u in doc["users"]:
        table.add_row(u["user"], str(u["jobs"]), f"{u['gpu_hours']:.3f}", f"{u['cpu_hours']:.3f}")
    table.add_row("total", str(doc["total_jobs"]), f"{doc['total_gpu_hours']:.3f}", f"{doc['total_cpu_hours']:.3f}",
                  style="bold")
    console.print(table)
