"""``tesserae queue list|show|set``: the server's tenant queues from the command line.

``set FILE`` reads the same YAML as ``tesserae server --config`` (checked here first, so a mistake
names the file, line and key before anything is sent) and replaces the queues (admin token).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tesserae.cli_fit import Col, print_table
from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.cli_help import TesseraeGroup
from tesserae.runtime.commands.common import client, fields_table
from tesserae.runtime.commands.common import wide_console as console


def _gpus(value: int | None) -> str:
    return "-" if value is None else str(value)


def _limit(q: dict[str, Any]) -> str:
    return "none" if q["borrow_limit"] is None else str(q["borrow_limit"])


#: ``queue list``'s columns; a narrow terminal leaves out the highest priority numbers first.
QUEUE_COLUMNS = [Col("QUEUE"), Col("GUARANTEE", "right"), Col("BORROW LIMIT", "right", priority=3),
                 Col("WEIGHT", "right", priority=4), Col("POLICY", priority=5), Col("BUDGET", "right", priority=2),
                 Col("IN USE", "right"), Col("BORROWED", "right", priority=1), Col("WAITING", "right"),
                 Col("RUNNING", "right"), Col("RECLAIMS", "right", priority=6)]


def queue_rows(queues: list[dict[str, Any]]) -> list[list[str]]:
    return [["  " * q["path"].count("/") + q["name"], str(q["guarantee"]), _limit(q), f"{q['weight']:g}",
             q["policy"] or "-", _gpus(q.get("budget")), _gpus(q.get("gpus_in_use")), _gpus(q.get("gpus_borrowed")),
             _gpus(q.get("jobs_waiting")), _gpus(q.get("jobs_running")), _gpus(q.get("reclaims"))] for q in queues]


def register(app: typer.Typer) -> None:
    queue_app = typer.Typer(cls=TesseraeGroup, no_args_is_help=True, rich_markup_mode=None,
                            help="Tenant queues: quotas, borrowing, use.")
    app.add_typer(queue_app, name="queue")

    @queue_app.command("list", cls=OneLineErrors)
    def queue_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
        """Every queue: guarantee, borrowing limit, weight, policy, and its GPUs at the latest decision."""
        with client() as c:
            doc = c.call("GET", "/v1/queues").json()
        if as_json:
            print(json.dumps(doc, indent=2))
            return
        if not doc["queues"]:
            console.print("this server has no tenant queues: every job is in one global queue")
            return
        print_table(console, QUEUE_COLUMNS, queue_rows(doc["queues"]))
        console.print(f"default queue: {doc['default_queue'] or '-'}; config from {doc['source']}", highlight=False)

    @queue_app.command("show", cls=OneLineErrors)
    def queue_show(name: Annotated[str, typer.Argument(help="Queue name.")],
                   as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
        """One queue in detail: quota, users, and its use at the latest decision."""
        with client() as c:
            q = c.call("GET", f"/v1/queues/{name}").json()
        if as_json:
            print(json.dumps(q, indent=2))
            return
        by_type = ", ".join(f"{n} {t}" for t, n in q["guarantee_by_type"].items())
        rows = [("queue", q["path"]), ("guarantee", f"{q['guarantee']} GPUs" + (f" ({by_type})" if by_type else "")),
                ("borrowing limit", _limit(q)), ("weight", f"{q['weight']:g}"), ("policy", q["policy"] or "-"),
                ("users", ", ".join(q["users"]) or "(anyone on this path)"),
                ("budget now", _gpus(q.get("budget"))), ("GPUs in use", _gpus(q.get("gpus_in_use"))),
                ("borrowed", _gpus(q.get("gpus_borrowed"))), ("asked for", _gpus(q.get("gpus_demanded"))),
                ("jobs waiting", _gpus(q.get("jobs_waiting"))), ("jobs running", _gpus(q.get("jobs_running"))),
                ("reclaims", _gpus(q.get("reclaims")))]
        console.print(fields_table(rows))

    @queue_app.command("set", cls=OneLineErrors)
    def queue_set(path: Annotated[Path, typer.Argument(help="Queue config (YAML), as for 'server --config'.")]
                  ) -> None:
        """Replace the server's queues (admin token); effective at the next decision, kept in the store."""
        from tesserae.queue_file import read_queue_config

        config, _ = read_queue_config(path)
        with client() as c:
            doc = c.call("PUT", "/v1/queues", json=config.model_dump(mode="json", exclude_none=True)).json()
        console.print(f"{len(doc['queues'])} queue(s) set; they take effect at the next decision", highlight=False)

