"""Option parsing shared by the simulator's and the runtime's commands (one place, one message)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from tesserae.core.errors import InputError


def parse_queues(text: str | None, old_name: str | None = None) -> tuple[float, ...] | None:
    """``--tiresias-thresholds 3250,7200``: positive, increasing thresholds in GPU-seconds of Tiresias'
    priority queues. ``old_name`` is the value of the flag's deprecated name ``--queues`` (it read as
    if it set the tenant queues of ``--queue-config``): still taken, with a warning on stderr."""
    field = "tiresias-thresholds"
    if old_name is not None:
        if text is not None:
            raise InputError("--queues is the deprecated name of --tiresias-thresholds: give one of them", field=field)
        sys.stderr.write("warning: --queues is deprecated: it is --tiresias-thresholds (Tiresias' priority queues; "
                         "tenant queues are --queue-config)\n")
        text, field = old_name, "queues"
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"'{text}' is not a comma-separated list of numbers", field=field) from None
    if not values or any(v <= 0 for v in values) or list(values) != sorted(values):
        raise InputError(f"'{text}' must be positive, increasing thresholds", field=field)
    return values


ThresholdsOpt = Annotated[str | None, typer.Option(
    "--tiresias-thresholds", metavar="T1,T2,...", help="Tiresias' priority queues (tiresias-las, tiresias-gittins): "
    "increasing thresholds on a job's attained GPU-seconds; K thresholds make K+1 queues, e.g. 3250,7200. Not the "
    "tenant queues (--queue-config). Formerly --queues, which is still taken (deprecated).")]
OldQueuesOpt = Annotated[str | None, typer.Option("--queues", hidden=True, help="Deprecated: --tiresias-thresholds.")]
KnobOpt = Annotated[float | None, typer.Option(
    "--promote-knob", min=0.0, help="Tiresias' starvation guard P: a waiting job that has run before goes back to "
    "the top queue once it has waited P x its run time since it last ran (0 = off).")]
SkewOpt = Annotated[float | None, typer.Option(
    "--skew-threshold", help="tiresias placement: model skew above which a job must be consolidated on as few "
    "nodes as possible (and waits otherwise); below it, any free GPUs.")]


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
