"""Nested dictionaries (what ``trace info`` computes) as Rich tables a person can read.

A mapping becomes a two-column table of its keys and values; a mapping whose values are all
mappings with the same keys (the GPU-count mix: ``{1: {"count": .., "share": ..}, ...}``) becomes
one table with a header row; lists are comma-separated (long ones cut, with a count of the rest);
numbers get thousands separators and a sensible number of digits, and ``share`` reads as a
percentage. Never JSON inside a cell, and never Rich markup: a trace's strings are shown as they are.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

# Wide tables when output is piped (Rich would fall back to 80 columns and wrap every cell).
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

#: Keys whose values are fractions of a whole, shown as percentages.
PERCENT_KEYS = frozenset({"share"})
#: How many items of a list are shown before "... (N more)".
LIST_ITEMS = 10


def format_scalar(value: Any, key: str | None = None) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if key in PERCENT_KEYS:
            return f"{value:.2%}" if abs(value) >= 1e-4 or value == 0 else f"{value * 100:.2g}%"
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:,.2f}"
        return f"{value:.4g}"
    return str(value)


def _is_table_of_records(value: Mapping[Any, Any]) -> bool:
    rows = list(value.values())
    return bool(rows) and all(isinstance(r, Mapping) for r in rows) and all(
        list(r.keys()) == list(rows[0].keys()) for r in rows) and all(
        not isinstance(v, Mapping | list | tuple) for r in rows for v in r.values())


def render(value: Any, key: str | None = None, *, index_label: str = "") -> RenderableType:
    """``value`` as a renderable: nested tables for mappings, text for everything else."""
    if isinstance(value, Mapping):
        if not value:
            return Text("-")
        if _is_table_of_records(value):
            first = next(iter(value.values()))
            table = Table(box=None, pad_edge=False, show_edge=False)
            table.add_column(Text(index_label or (key or "")), justify="right")
            for col in first:
                table.add_column(Text(str(col)), justify="right")
            for k, row in value.items():
                table.add_row(Text(format_scalar(k)), *(Text(format_scalar(v, str(c))) for c, v in row.items()))
            return table
        table = Table(box=None, show_header=False, pad_edge=False, show_edge=False)
        table.add_column(style="bold")
        table.add_column()
        for k, v in value.items():
            table.add_row(Text(str(k)), render(v, str(k)))
        return table
    if isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            return Text("-")
        shown = ", ".join(format_scalar(v, key) for v in value[:LIST_ITEMS])
        more = len(value) - LIST_ITEMS
        return Text(shown + (f", ... ({more:,} more)" if more > 0 else ""))
    return Text(format_scalar(value, key))
