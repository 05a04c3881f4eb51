"""``tesserae jobs`` and ``show``: your jobs, one job in detail (``cancel`` is ``control``'s)."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from rich.text import Text

from tesserae.cli_fit import Col, print_table
from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.runtime.commands.common import (
    client,
    console,
    duration,
    fields_table,
    iterations,
    parse_job_id,
    state_text,
    when,
)
from tesserae.runtime.commands.common import until as time_until
from tesserae.runtime.commands.job_fields import FIELDS, TIME_HELP, parse_fields, print_fields, why, window
from tesserae.runtime.commands.learned_view import learned_table, partner_lines


def register(app: typer.Typer) -> None:
    for command in (jobs, show):
        app.command(cls=OneLineErrors)(command)


def jobs(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    state: Annotated[str | None, typer.Option("--state", help="Only jobs in this state.")] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's jobs (another user's: admin "
                                             "token).")] = None,
    since: Annotated[str | None, typer.Option("--since", metavar="TIME", help="Only jobs not ended before "
                                              f"TIME: {TIME_HELP}.")] = None,
    until: Annotated[str | None, typer.Option("--until", metavar="TIME", help="Only jobs submitted by TIME.")
                     ] = None,
    fields: Annotated[str | None, typer.Option("--fields", metavar="A,B,...", help="Columns (and JSON keys): "
                                               f"{', '.join(FIELDS)}.")] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, max=100000,
                                       help="The most recent N jobs.")] = 1000,
) -> None:
    """List your jobs (every job for an admin); with --since/--until/--fields, accounting like sacct."""
    names = parse_fields(fields) if fields is not None else None
    lo, hi = window(since, until)
    with client() as c:
        items = c.jobs(state, user=user, since=lo, until=hi, limit=limit)
    if names is not None:
        print_fields(items, names, as_json)
        return
    if as_json:
        print(json.dumps(items, indent=2))
        return
    if not items:
        console.print("no jobs")
        return
    queues = any(j.get("queue") for j in items)
    predicted = any(j.get("predicted_start") is not None or j.get("predicted_finish") is not None for j in items)
    # Narrow terminals leave out the columns with the highest priority number first (tesserae.cli_fit).
    cols = [Col("ID", "right"), Col("NAME", wrap=True, min_width=8), Col("USER", priority=3),
            *([Col("QUEUE", priority=4)] if queues else []), Col("STATE"), Col("GPUS", "right"),
            Col("ITERS", priority=7), Col("WAITED", priority=5), Col("RAN", priority=6),
            Col("PREEMPT", "right", priority=8), Col("ON GPUS / WHY", wrap=True, priority=1, min_width=16),
            *([Col("STARTS", priority=2), Col("ENDS", priority=2)] if predicted else [])]
    now = time.time()
    rows: list[list[str | Text]] = []
    for j in items:
        cells: list[str | Text] = [
            str(j["id"]), j["name"], j["user"], *([j.get("queue") or "-"] if queues else []),
            Text.from_markup(state_text(j)), str(j["gpus"]), iterations(j), duration(j["waited_seconds"]),
            duration(j["executed_seconds"]), str(j["preemptions"]),
            ",".join(map(str, j["assigned_gpus"] or [])) or why(j)]
        if predicted:
            cells += [time_until(j.get("predicted_start"), now), time_until(j.get("predicted_finish"), now)]
        rows.append(cells)
    print_table(console, cols, rows, hint="--fields or --json shows them")


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
            ("waited", duration(j["waited_seconds"]) + (f" (first start after {duration(j['queueing_seconds'])})"
                                                       if j["preemptions"] else "")),
            ("ran", duration(j["executed_seconds"])),
            ("jct", duration(j["jct_seconds"])), ("preemptions", str(j["preemptions"])),
            ("migrations", str(j["migrations"]))]
    if j.get("queue"):
        rows.append(("queue", f"{j['queue']} ({j['priority_class']})"))
    now = time.time()
    if j.get("predicted_start") is not None:
        rows.append(("predicted start", when(j["predicted_start"], now)))
    if j.get("predicted_finish") is not None:
        rows.append(("predicted finish", when(j["predicted_finish"], now)))
    if j["exit_code"] is not None:
        rows.append(("exit code", str(j["exit_code"])))
    if j.get("pending_reason"):
        rows.append(("waiting", why(j)))
    elif j["reason"]:
        rows.append(("reason", j["reason"]))
    rows += lifecycle_rows(j)
    console.print(fields_table(rows))
    learned = j.get("learned")
    if learned:
        hint = learned.get("declared_type")
        console.print(f"[bold]learned rates[/] ({learned.get('num_gpus')} GPU(s), consolidated"
                      f"{'' if not hint else f'; type hint {hint}'})", highlight=False)
        console.print(learned_table(learned))
        lines = partner_lines(learned)
        if lines:
            console.print("[bold]partners[/]")
            for line in lines:
                console.print(line, highlight=False)
    events = j.get("events") or []
    if events:
        console.print("[bold]events[/]")
        t0 = j["submit_time"]
        for e in events[-20:]:
            console.print(f"  +{e['time'] - t0:8.1f}s  {e['kind']}", highlight=False)


def lifecycle_rows(j: dict[str, Any]) -> list[tuple[str, str]]:
    """The lifecycle controls and resource requests a job was given (``controller.lifecycle``, ``job.resources``)."""
    rows = []
    if j.get("time_limit_seconds") is not None:
        rows.append(("time limit", duration(j["time_limit_seconds"])))
    if j.get("retries"):
        rows.append(("retries", f"{j['retries_used']} of {j['retries']} used (backoff from "
                                f"{duration(j['retry_backoff_seconds'])})"))
    for key, label in (("after", "after"), ("after_ok", "after ok")):
        if j.get(key):
            rows.append((label, ", ".join(map(str, j[key]))))
    if j.get("array_index") is not None:
        rows.append(("array", f"task {j['array_index']} of array {j['array_job']}"))
    if j.get("held"):
        rows.append(("held", "yes"))
    if j.get("resubmit_of") is not None:
        rows.append(("resubmit of", str(j["resubmit_of"])))
    if j.get("gpu_type"):
        rows.append(("gpu type", j["gpu_type"]))
    if j.get("node"):
        rows.append(("node", j["node"]))
    if j.get("cpus") is not None:
        rows.append(("cpus", f"{j['cpus']:g}"))
    if j.get("memory_mb") is not None:
        rows.append(("memory", f"{j['memory_mb']} MiB"))
    for key in ("output", "error"):
        if j.get(key):
            rows.append((key, j[key]))
    return rows
