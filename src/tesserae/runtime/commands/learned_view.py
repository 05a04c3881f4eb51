"""How ``tesserae show`` prints a job's learned rates (``--throughputs learned``): per GPU type its rate,
how sure the estimate is, how many windows of its progress measured it, and whether it was measured or
comes from a prior (and which); then the partners it was measured next to, and their factor."""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table


def spread_text(sd: float | None) -> str:
    """A log-space standard deviation as a relative one ('±12%'); '-' when unknown."""
    if sd is None or not math.isfinite(sd):
        return "-"
    return f"±{(math.exp(sd) - 1.0) * 100:.0f}%"


def source_text(entry: dict[str, Any]) -> str:
    return "measured" if entry.get("measured") else f"prior ({entry.get('source', 'model')})"


def rate_text(rate: float | None) -> str:
    if rate is None or not math.isfinite(rate):
        return "-"
    if rate == 0:
        return "cannot run"
    return f"{rate:.4g} it/s"


def learned_table(learned: dict[str, Any]) -> Table:
    """Per GPU type: rate, confidence, observations, measured or prior."""
    table = Table(box=None, pad_edge=False)
    for col in ("GPU TYPE", "RATE", "CONFIDENCE", "OBSERVED", "FROM"):
        table.add_column(col, justify="right" if col in ("RATE", "CONFIDENCE", "OBSERVED") else "left")
    for gpu_type, e in sorted((learned.get("gpu_types") or {}).items()):
        table.add_row(gpu_type, rate_text(e.get("rate")), spread_text(e.get("sd")), str(e.get("observations", 0)),
                      source_text(e))
    return table


def partner_lines(learned: dict[str, Any]) -> list[str]:
    """One line per measured partner: its job, the GPU type, the factor (rate next to it / rate alone)."""
    out = []
    for p in learned.get("partners") or []:
        factor = p.get("factor")
        shown = "-" if factor is None else f"{factor:.2f}"
        out.append(f"  next to job {p.get('partner')} on {p.get('gpu_type')}: x{shown} of its rate alone "
                   f"({p.get('observations', 0)} observation(s))")
    return out
