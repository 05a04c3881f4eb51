"""``tesserae what-if``: your jobs' predicted start and finish now, and under another policy,
placement or queue config, both simulated from the same snapshot of the latest decision."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from tesserae.cli_fit import Col, print_table
from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.runtime.commands.common import client, until
from tesserae.runtime.commands.common import wide_console as console


def register(app: typer.Typer) -> None:
    app.command("what-if", cls=OneLineErrors)(what_if)


def _hours(v: float | None) -> str:
    return "-" if v is None else f"{v / 3600:.2f} h"


def what_if(
    policy: Annotated[str | None, typer.Option("--policy", help="Another scheduling policy.")] = None,
    placement: Annotated[str | None, typer.Option("--placement", help="Another placement.")] = None,
    queue_config: Annotated[Path | None, typer.Option("--queue-config", metavar="FILE", help="Other tenant "
                                                      "queues (YAML, as for 'server --config').")] = None,
    no_queues: Annotated[bool, typer.Option("--no-queues", help="One global queue instead of the tenant "
                                            "queues.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Your jobs' predicted start and finish now, and with another policy, placement or quota.

    Both are simulated from the same snapshot of the server's latest decision.
    """
    body: dict[str, Any] = {"no_queues": no_queues}
    if policy is not None:
        body["policy"] = policy
    if placement is not None:
        body["placement"] = placement
    if queue_config is not None:
        from tesserae.queue_file import read_queue_config

        config, _ = read_queue_config(queue_config)
        body["queues"] = config.model_dump(mode="json", exclude_none=True)
    with client() as c:
        doc = c.call("POST", "/v1/what-if", json=body).json()
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    now = time.time()
    cols = [Col("ID", "right"), Col("NAME", wrap=True, min_width=8), Col("STATE"), Col("STARTS"),
            Col("ENDS", priority=1), Col("STARTS (WHAT-IF)"), Col("ENDS (WHAT-IF)", priority=1)]
    rows = [[str(j["id"]), j["name"], j["state"],
             "running" if j["state"] == "running" else until(j["start"], now), until(j["finish"], now),
             "running" if j["state"] == "running" and j["what_if_start"] is None
             else until(j["what_if_start"], now), until(j["what_if_finish"], now)] for j in doc["jobs"]]
    print_table(console, cols, rows)
    console.print(f"average JCT of the active jobs: {_hours(doc['avg_jct'])} under {doc['policy']}, "
                  f"{_hours(doc['what_if_avg_jct'])} under {doc['what_if_policy']}"
                  + ("" if doc["complete"] else " (some jobs beyond the prediction's reach)"), highlight=False)
