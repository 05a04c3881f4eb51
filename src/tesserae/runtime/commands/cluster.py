"""``tesserae cluster``: the GPUs, what runs on each, and the queue (waiting jobs in order, with why they wait)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from tesserae.cli_fit import Col, print_table
from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.runtime.commands.common import client, console, duration

#: Most waiting jobs the table shows.
MAX_SHOWN = 50


def register(app: typer.Typer) -> None:
    app.command(cls=OneLineErrors)(cluster)


def cluster(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """GPUs, what runs on each, and the queue."""
    with client() as c:
        info = c.cluster()
    if as_json:
        print(json.dumps(info, indent=2))
        return
    counts = ", ".join(f"{n} {s}" for s, n in info["jobs"].items() if n)
    down = info.get("gpus_unavailable") or 0
    console.print(f"[bold]{info['gpus_in_use']}/{info['gpus_total']} GPUs in use[/]"
                  + (f", [bold]{down} unavailable[/]" if down else "") + f" ({info['cluster']}, "
                  f"{info['gpu_source']}); policy {info['policy']}, placement {info['placement']}, rounds of "
                  f"{info['round_seconds']:g} s; jobs: {counts or 'none'}", highlight=False)
    gpu_rows = []
    for g in info["gpus"]:
        jobs_text = ", ".join(f"{j['job']} ({j['user']}{', ' + j['phase'] if j['phase'] != 'running' else ''})"
                              for j in g["jobs"]) or "-"
        if not g.get("available", True):
            jobs_text = f"unavailable (node {g['node_state']})" + ("" if jobs_text == "-" else f": {jobs_text}")
        gpu_rows.append([str(g["id"]), g["type"], g["device"], jobs_text])
    print_table(console, [Col("GPU", "right"), Col("TYPE"), Col("DEVICE", priority=1),
                          Col("JOBS", wrap=True, min_width=16)], gpu_rows)
    queue = info.get("queue") or []
    waiting = int(info.get("queue_total", len(queue)))  # the server sends the head of the queue and the count
    console.print(f"[bold]queue[/]: {waiting} waiting" + ("" if waiting else " (empty)"), highlight=False)
    if queue:
        cols = [Col("#", "right", priority=3), Col("ID", "right"), Col("NAME", wrap=True, min_width=8),
                Col("USER", priority=2), Col("STATE"), Col("GPUS", "right"), Col("WAITED", priority=1),
                Col("WHY", wrap=True, min_width=16)]
        print_table(console, cols, [[str(j["position"] or "-"), str(j["id"]), j["name"] or "-", j["user"],
                                     j["state"], str(j["gpus"]), duration(j["waited_seconds"]), j["reason"]]
                                    for j in queue[:MAX_SHOWN]])
        if waiting > MAX_SHOWN:
            console.print(f"... and {waiting - MAX_SHOWN} more (tesserae jobs --state queued)", highlight=False)
