"""Accounting on the command line, like Slurm's ``sacct``: ``tesserae usage`` (GPU-hours per user over a
window). ``tesserae jobs --since/--until/--fields`` is its list of jobs (times and fields: ``job_fields``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.runtime.commands.common import client, console
from tesserae.runtime.commands.job_fields import TIME_HELP, local_time, window


def register(app: typer.Typer) -> None:
    app.command(cls=OneLineErrors)(usage)


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
    start = local_time(doc["since"]) if doc["since"] is not None else "the beginning"
    span = f"{start} to {local_time(doc['until']) if doc['until'] is not None else 'now'}"
    table = Table(box=None, pad_edge=False, title=f"GPU-hours from {span}", title_justify="left")
    for col in ("USER", "JOBS", "GPU-HOURS", "CPU-HOURS"):
        table.add_column(col, justify="left" if col == "USER" else "right")
    for u in doc["users"]:
        table.add_row(u["user"], str(u["jobs"]), f"{u['gpu_hours']:.3f}", f"{u['cpu_hours']:.3f}")
    table.add_row("total", str(doc["total_jobs"]), f"{doc['total_gpu_hours']:.3f}", f"{doc['total_cpu_hours']:.3f}",
                  style="bold")
    console.print(table)
