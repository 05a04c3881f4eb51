"""What the runtime's client commands share: the consoles, the API client, job ids, and how a job reads."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from tesserae.core.errors import InputError

console = Console()
err = Console(stderr=True)
#: For wide tables: when output is piped, Rich would fall back to 80 columns and cut the headers.
wide_console = Console(width=None if sys.stdout.isatty() else 160)

FINAL_STATES = ("completed", "failed", "cancelled")
_STATE_STYLE = {"queued": "yellow", "running": "green", "preempted": "magenta", "completed": "blue",
                "failed": "red", "cancelled": "dim"}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def iterations(job: dict[str, Any]) -> str:
    done, total = job["iterations_done"], job["iterations_total"]
    text = f"{done:g}"
    return f"{text}/{total}" if total else text


def state_text(job: dict[str, Any]) -> str:
    value = job["state"]
    extra = " (cancelling)" if job.get("cancel_requested") and value == "running" else ""
    return f"[{_STATE_STYLE.get(value, '')}]{value}[/]{extra}"


def fields_table(rows: list[tuple[str, str]]) -> Table:
    """One thing in detail: a bold name and its value per line."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    return table


def until(t: float | None, now: float) -> str:
    """A predicted instant as 'in 3m20s' ('-' when none)."""
    if t is None:
        return "-"
    return "now" if t <= now else f"in {duration(t - now)}"


def when(t: float, now: float) -> str:
    """A predicted instant as local time and 'in ...'."""
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))} ({until(t, now)})"


def client() -> Any:
    from tesserae.runtime.client import Client

    return Client()


def parse_job_id(text: str, field: str = "ID") -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"'{text}' is not a job id (a positive integer)", field=field) from None
    if not 1 <= value <= 2**53:
        raise InputError(f"'{text}' is not a job id (a positive integer)", field=field)
    return value
