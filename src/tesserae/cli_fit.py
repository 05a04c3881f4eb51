"""Tables that fit the terminal: columns left out by priority, never a value cut.

A column either never wraps (ids, states, times, numbers: its width is its widest cell, so a state
name is never cut to ``runni…``) or may wrap at spaces down to a narrowest width (names, reasons).
When the columns do not fit the console's width, the optional columns go, the least important
first (highest ``priority``; ties: the rightmost), and a line under the table says which went.
Cells are plain text (a job's name is shown as it is, never read as Rich markup) unless a caller
passes a ``rich.text.Text``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

#: Rich's padding of one cell on each side, without the outer edges (``pad_edge=False``).
GAP = 2


@dataclass(frozen=True)
class Col:
    """A column: its header, how it is aligned, whether it may wrap, and how optional it is."""

    header: str
    justify: str = "left"
    #: 0: always shown; otherwise left out when the table does not fit, highest first.
    priority: int = 0
    #: May wrap at spaces (free text); the others are as wide as their widest cell.
    wrap: bool = False
    #: The narrowest a wrapping column gets before columns are left out.
    min_width: int = 12


def _text(cell: str | Text) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)


def _width(text: Text) -> int:
    return max((Text(line).cell_len for line in text.plain.split("\n")), default=0)


def fitted_columns(cols: Sequence[Col], rows: Sequence[Sequence[str | Text]], width: int) -> list[tuple[int, int]]:
    """The columns kept so that the table fits ``width`` (every priority-0 column stays), each with its
    width: a column that does not wrap gets its widest cell; the wrapping ones share what is left, each
    at least its narrowest, none beyond its widest cell."""
    natural = [max([len(c.header), *(_width(_text(r[i])) for r in rows)]) for i, c in enumerate(cols)]
    need = [min(n, max(c.min_width, len(c.header))) if c.wrap else n for c, n in zip(cols, natural, strict=True)]
    kept = list(range(len(cols)))

    def total() -> int:
        return sum(need[i] for i in kept) + GAP * (len(kept) - 1)

    while total() > width:
        optional = [i for i in kept if cols[i].priority > 0]
        if not optional:
            break
        kept.remove(max(optional, key=lambda i: (cols[i].priority, i)))
    widths = {i: need[i] for i in kept}
    spare = width - total()
    for i in kept:  # left to right: the first wrapping column (a name) widens first
        if cols[i].wrap and spare > 0:
            grow = min(spare, natural[i] - need[i])
            widths[i] += grow
            spare -= grow
    return [(i, widths[i]) for i in kept]


def fit_table(cols: Sequence[Col], rows: Sequence[Sequence[str | Text]], width: int,
              title: str | None = None) -> tuple[Table, list[str]]:
    """The table of the columns that fit ``width``, and the headers left out."""
    kept = fitted_columns(cols, rows, width)
    table = Table(box=None, pad_edge=False, title=title, title_justify="left")
    for i, w in kept:
        c = cols[i]
        table.add_column(c.header, justify=c.justify, width=w, no_wrap=not c.wrap,  # type: ignore[arg-type]
                         overflow="fold")
    for r in rows:
        table.add_row(*(_text(r[i]) for i, _ in kept))
    shown = {i for i, _ in kept}
    return table, [cols[i].header for i in range(len(cols)) if i not in shown]


def print_table(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[str | Text]],
                hint: str = "--json shows every field") -> None:
    """Print the fitted table on ``console``, and which columns it left out (and where to see them)."""
    table, dropped = fit_table(cols, rows, console.width)
    console.print(table)
    if dropped:
        console.print(Text(f"(left out at {console.width} columns: {', '.join(dropped)}; {hint})", style="dim"))
