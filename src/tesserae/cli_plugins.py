"""``tesserae plugins``: every policy and placement, where it comes from, and the options it takes.

What ``--policy-opt`` and ``--placement-opt`` accept, read from each plug-in's declared ``Options``
(built-in ones and those installed through the ``tesserae.policies`` / ``tesserae.placements``
entry points alike).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.table import Table
from rich.text import Text

from tesserae.cli_help import TesseraeCommand
from tesserae.cli_render import console


def register(app: typer.Typer) -> None:
    app.command(cls=TesseraeCommand)(plugins)


_WORDS = {"number": "number", "integer": "integer", "string": "text", "boolean": "true/false"}


def _type_name(prop: dict[str, Any]) -> str:
    """An option's type in words, from its JSON schema (``list of numbers``, ``center|max-total``, ...)."""
    if "anyOf" in prop:
        kinds = [p for p in prop["anyOf"] if p.get("type") != "null"]
        text = " or ".join(_type_name(p) for p in kinds)
        return text + (" or none" if len(kinds) < len(prop["anyOf"]) else "")
    if "enum" in prop:
        return "|".join(str(v) for v in prop["enum"])
    if prop.get("type") == "array":
        return f"list of {_type_name(prop.get('items', {}))}s"
    return _WORDS.get(str(prop.get("type")), str(prop.get("type", "any")))


def describe(registry: Any) -> list[dict[str, Any]]:
    """Each plug-in of a registry: name, source, and options (name, type, default, description)."""
    out = []
    for name in registry.names():
        cls = registry.get(name)
        options: type[BaseModel] = cls.Options
        schema = options.model_json_schema().get("properties", {})
        out.append({"name": name, "source": registry.source(name),
                    "options": [{"name": key, "type": _type_name(schema.get(key, {})),
                                 "default": f.get_default(call_default_factory=True),
                                 "description": f.description or ""} for key, f in options.model_fields.items()]})
    return out


def plugins(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the scheduling policies and placements, where each comes from, and the options each takes."""
    from tesserae.placement.base import PLACEMENTS
    from tesserae.scheduling.base import POLICIES

    found = {"policies": describe(POLICIES), "placements": describe(PLACEMENTS)}
    if as_json:
        console.print_json(json.dumps(found, default=str))
        return
    for kind, flag in (("policies", "--policy-opt"), ("placements", "--placement-opt")):
        table = Table(title=f"{kind} (options: {flag} KEY=VALUE)", show_lines=True)
        for col in ("name", "source", "options"):
            table.add_column(col)
        for p in found[kind]:
            opts = "\n".join(f"{o['name']} ({o['type']}, default {o['default']!r}): {o['description']}"
                             for o in p["options"]) or "-"
            table.add_row(Text(p["name"]), Text(p["source"]), Text(opts))
        console.print(table)
