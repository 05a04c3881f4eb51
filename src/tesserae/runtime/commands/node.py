"""``tesserae node list|drain|undrain``: the cluster's nodes and their health; keep new runs off a node
while its running jobs go on (admin tokens), and put it back in service."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from tesserae.cli_fit import Col, print_table
from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.cli_help import TesseraeGroup
from tesserae.runtime.commands.common import client, console, duration, err


def register(app: typer.Typer) -> None:
    node_app = typer.Typer(cls=TesseraeGroup, no_args_is_help=True, rich_markup_mode=None,
                           help="The cluster's nodes: list them, drain one, undrain it.")
    app.add_typer(node_app, name="node")
    node_app.command("list", cls=OneLineErrors)(node_list)
    node_app.command("drain", cls=OneLineErrors)(node_drain)
    node_app.command("undrain", cls=OneLineErrors)(node_undrain)


def node_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Nodes, their GPUs, state, last heartbeat, lost runs in 24 h, GPUs the health probe found failing,
    and drains."""
    with client() as c:
        nodes = c.nodes()
    if as_json:
        print(json.dumps(nodes, indent=2))
        return
    now = time.time()
    rows = []
    for n in nodes:
        beat = n.get("last_heartbeat")
        drained = n.get("drained")
        state = "drained" if drained and n["state"] == "alive" else n["state"]
        lost = sum((n.get("lost_runs") or {}).values())
        bad = "; ".join(f"GPU {g}: {why}" for g, why in (n.get("unhealthy") or {}).items()) or "-"
        note = "" if not drained else f"by {drained['by']} {duration(now - drained['since'])} ago" + (
            f": {drained['reason']}" if drained.get("reason") else "")
        rows.append([n["name"], n["id"], n["gpu_type"], ",".join(map(str, n["gpus"])), state,
                     "-" if beat is None else f"{duration(max(0.0, now - beat))} ago", str(lost), bad, note or "-"])
    print_table(console, [Col("NAME", wrap=True, min_width=8), Col("ID", priority=2), Col("TYPE"),
                          Col("GPUS", wrap=True, priority=1), Col("STATE"), Col("HEARTBEAT", priority=1),
                          Col("LOST", "right", priority=2), Col("FAILING GPUS", wrap=True, min_width=10),
                          Col("DRAIN", wrap=True, min_width=10, priority=1)], rows)


def node_drain(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The node's name or id (tesserae node list).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (shown beside the node).")] = "",
) -> None:
    """Keep new runs off a node's GPUs; the jobs running there go on until they end (admin token)."""
    with client() as c:
        out = c.node_action(name, "drain", reason)
    err.print(f"node {out['node']} " + ("drained: no new run starts there; its running jobs go on" if out["changed"]
                                        else "was drained already"), highlight=False)


def node_undrain(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The node's name or id (tesserae node list).")],
) -> None:
    """Put a drained node back in service (admin token)."""
    with client() as c:
        out = c.node_action(name, "undrain")
    err.print(f"node {out['node']} " + ("is back in service" if out["changed"] else "was not drained"),
              highlight=False)
