"""Accounting on the command line, like Slurm's ``sacct``: ``tesserae usage`` (GPU-hours per user over a
window). ``tesserae jobs --since/--until/--fields`` is its list of jobs (times and fields: ``job_fields``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.text import Text

from tesserae.cli_fit import Col, print_table
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
    # The span is a line of its own: as the table's title it was wrapped to the (narrow) table's width.
    console.print(f"GPU-hours from {span}", highlight=False, soft_wrap=True)
    rows = [[u["user"], str(u["jobs"]), f"{u['gpu_hours']:.3f}", f"{u['cpu_hours']:.3f}"] for u in doc["users"]]
    total = ["total", str(doc["total_jobs"]), f"{doc['total_gpu_hours']:.3f}", f"{doc['total_cpu_hours']:.3f}"]
    rows.append([Text(cell, style="bold") for cell in total])
    print_table(console, [Col("USER", wrap=True, min_width=8), Col("JOBS", "right"), Col("GPU-HOURS", "right"),
                          Col("CPU-HOURS", "right", priority=1)], rows)
