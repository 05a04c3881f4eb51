"""Option parsing shared by the simulator's and the runtime's commands (one place, one message)."""

from __future__ import annotations

from typing import Annotated

import typer

from tesserae.core.errors import InputError


def parse_queues(text: str | None) -> tuple[float, ...] | None:
    """``--queues 3250,7200``: positive, increasing Tiresias thresholds in GPU-seconds."""
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"'{text}' is not a comma-separated list of numbers", field="queues") from None
    if not values or any(v <= 0 for v in values) or list(values) != sorted(values):
        raise InputError(f"'{text}' must be positive, increasing thresholds", field="queues")
    return values


def parse_plugin_options(values: list[str] | None, flag: str) -> dict[str, str]:
    """``--policy-opt KEY=VALUE`` (repeated) as a dict; the plug-in validates each value by its type."""
    out: dict[str, str] = {}
    for item in values or []:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise InputError(f"'{item}' is not KEY=VALUE", field=flag)
        if key in out:
            raise InputError(f"option '{key}' is given twice", field=flag)
        out[key] = value.strip()
    return out


PolicyOptionsOpt = Annotated[list[str] | None, typer.Option(
    "--policy-opt", metavar="KEY=VALUE", help="An option of the policy (repeatable); POLICY.KEY=VALUE gives it "
    "only to that policy's runs. 'tesserae plugins' lists every policy's options.")]
PlacementOptionsOpt = Annotated[list[str] | None, typer.Option(
    "--placement-opt", metavar="KEY=VALUE", help="An option of the placement (repeatable); PLACEMENT.KEY=VALUE "
    "gives it only to that placement's runs. 'tesserae plugins' lists every placement's options.")]
