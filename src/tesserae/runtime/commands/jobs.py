"""``tesserae jobs``, ``show`` and ``cancel``: your jobs, one job in detail, cancelling one."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.table import Table

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.runtime.commands.common import (
    client,
    console,
    duration,
    fields_table,
    iterations,
    parse_job_id,
    state_text,
    until,
    when,
)


def register(app: typer.Typer) -> None:
    for command in (jobs, show, cancel):
        app.command(cls=OneLineErrors)(command)


def jobs(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    state: Annotated[str | None, typer.Option("--state", help="Only jobs in this state.")] = None,
) -> None:
    """List your jobs (every job for an admin)."""
    with client() as c:
        items = c.jobs(state)
    if as_json:
        print(json.dumps(items, indent=2))
        return
    if not items:
        console.print("no jobs")
        return
    table = Table(box=None, pad_edge=False)
    queues = any(j.get("queue") for j in items)
    predicted = any(j.get("predicted_start") is not None or j.get("predicted_finish") is not None for j in items)
    cols = ["ID", "NAME", "USER", *(["QUEUE"] if queues else []), "STATE", "GPUS", "ITERS", "WAITED", "RAN",
            "PREEMPT", "ON GPUS", *(["STARTS", "ENDS"] if predicted else [])]
    for col in cols:
        table.add_column(col, justify="right" if col in ("ID", "GPUS", "PREEMPT") else "left")
    now = time.time()
    for j in items:
        cells = [str(j["id"]), j["name"], j["user"], *([j.get("queue") or "-"] if queues else []), state_text(j),
                 str(j["gpus"]), iterations(j), duration(j["queueing_seconds"]), duration(j["executed_seconds"]),
                 str(j["preemptions"]), ",".join(map(str, j["assigned_gpus"] or [])) or "-"]
        if predicted:
            cells += [until(j.get("predicted_start"), now), until(j.get("predicted_finish"), now)]
        table.add_row(*cells)
    console.print(table)


def show(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """One job in detail, with its events."""
    with client() as c:
        j = c.show(parse_job_id(job_id))
    if as_json:
        print(json.dumps(j, indent=2))
        return
    cmd = j["command"][0] if j["shell"] else " ".join(j["command"])
    rows = [("id", str(j["id"])), ("name", j["name"]), ("user", j["user"]), ("state", state_text(j)),
            ("gpus", f"{j['gpus']}" + (f" (on {','.join(map(str, j['assigned_gpus']))})"
                                       if j["assigned_gpus"] else "")),
            ("type", j["job_type"]), ("command", cmd), ("iterations", iterations(j)),
            ("submitted", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j["submit_time"]))),
            ("waited", duration(j["queueing_seconds"])), ("ran", duration(j["executed_seconds"])),
            ("jct", duration(j["jct_seconds"])), ("preemptions", str(j["preemptions"])),
            ("migrations", str(j["migrations"]))]
    if j.get("queue"):
        rows.append(("queue", f"{j['queue']} ({j['priority_class']})"))
    if j.get("pending_reason"):
        rows.append(("waiting because", j["pending_reason"]))
    now = time.time()
    if j.get("predicted_start") is not None:
        rows.append(("predicted start", when(j["predicted_start"], now)))
    if j.get("predicted_finish") is not None:
        rows.append(("predicted finish", when(j["predicted_finish"], now)))
    if j["exit_code"] is not None:
        rows.append(("exit code", str(j["exit_code"])))
    if j["reason"]:
        rows.append(("reason", j["reason"]))
    console.print(fields_table(rows))
    events = j.get("events") or []
    if events:
        console.print("[bold]events[/]")
        t0 = j["submit_time"]
        for e in events[-20:]:
            console.print(f"  +{e['time'] - t0:8.1f}s  {e['kind']}", highlight=False)


def cancel(job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id.")]) -> None:
    """Cancel a job (a running job gets SIGTERM, then SIGKILL after the grace period)."""
    with client() as c:
        j = c.cancel(parse_job_id(job_id))
    console.print(f"job {j['id']}: {'cancelled' if j['state'] == 'cancelled' else 'cancelling'}")
