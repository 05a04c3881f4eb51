"""The tables ``simulate`` and ``compare`` print: summaries side by side, tenant queues, sweeps; each fits
the terminal without cutting a value (``tesserae.cli_fit``)."""

from __future__ import annotations

import io
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tesserae.cli_fit import Col, fit_table
from tesserae.cli_render import err
from tesserae.sim.metrics import restart_description


def print_warnings(summaries: list[dict[str, Any]]) -> None:
    """Each distinct warning of the runs, once, on stderr (they are in every summary.json too)."""
    seen: dict[str, None] = {}
    for s in summaries:
        for w in s.get("warnings", []):
            seen.setdefault(w, None)
    for w in seen:
        err.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False, soft_wrap=True)


#: The summary table's rows: a label and the summary key (None: completed / rejected / unfinished).
SUMMARY_ROWS: list[tuple[str, str | None]] = [
    ("jobs done / rejected / unfinished", None), ("avg JCT (h)", "avg_jct"), ("median JCT (h)", "median_jct"),
    ("p95 JCT (h)", "p95_jct"), ("p99 JCT (h)", "p99_jct"), ("makespan (h)", "makespan"),
    ("avg queueing, every wait (h)", "avg_queueing_delay"), ("avg wait to first start (h)", "avg_first_start_delay"),
    ("utilization", "utilization"), ("preemptions", "preemptions"), ("migrations", "migrations"),
    ("decision time mean (ms)", "decision_seconds_mean"), ("restart cost", "restart_cost")]


def _summary_cell(s: dict[str, Any], key: str | None, base: dict[str, Any], compared: bool) -> str:
    if key is None:
        return f"{s['completed']} / {s['rejected']} / {s['unfinished']}"
    v = s.get(key)
    if key == "restart_cost":
        return restart_description(s, short=True) if v is not None else "-"
    if v is None:
        return "-"
    if key == "utilization":
        text = f"{v:.1%}"
    elif key in ("preemptions", "migrations"):
        text = f"{v:d}"
    elif key == "decision_seconds_mean":
        text = f"{v * 1000:.2f}"
    else:
        text = f"{v / 3600:.2f}"
    b = base.get(key)
    if compared and s is not base and b and isinstance(v, float) and key != "utilization":
        text += f" ({v / b:.2f}x)"
    return text


def summary_tables(title: str, summaries: list[dict[str, Any]], width: int = 10_000) -> list[Table]:
    """The runs side by side, one column each, ratios to the first run. Nothing is cut: when the runs do
    not fit ``width``, they are split over several tables, each with the metric names (the later ones
    say which run the ratios are to)."""
    base = summaries[0]
    compared = len(summaries) > 1
    rows = list(SUMMARY_ROWS)
    if any(s.get("lifecycle") for s in summaries):  # a trace with lifecycle controls
        rows.append(("failed / timed out / cancelled / retries", "lifecycle"))

    def cell(s: dict[str, Any], key: str | None) -> str:
        if key == "lifecycle":
            return "{failed} / {timed_out} / {cancelled} / {retries}".format(**s["lifecycle"]) \
                if s.get("lifecycle") else "-"
        return _summary_cell(s, key, base, compared)

    columns = [(str(s.get("label", s["policy"])), [cell(s, k) for _, k in rows]) for s in summaries]

    def table_of(group: list[tuple[str, list[str]]], part: str = "") -> Table:
        table = Table(title=escape(title) + part, box=box.SIMPLE_HEAVY, show_edge=False, pad_edge=False)
        table.add_column("metric", overflow="fold")
        for label, _ in group:
            table.add_column(escape(label), justify="right", overflow="fold")
        for r, (name, _) in enumerate(rows):
            table.add_row(name, *(cells[r] for _, cells in group))
        return table

    measure = Console(width=100_000, file=io.StringIO())

    def fits(group: list[tuple[str, list[str]]]) -> bool:
        return measure.measure(table_of(group)).maximum <= width

    groups: list[list[tuple[str, list[str]]]] = [[]]
    for col in columns:
        if not groups[-1] or fits([*groups[-1], col]):
            groups[-1].append(col)
        else:
            groups.append([col])
    n = len(groups)
    base_label = escape(columns[0][0])
    return [table_of(g, f" ({i} of {n}{f'; ratios to {base_label}' if compared and i > 1 else ''})" if n > 1 else "")
            for i, g in enumerate(groups, 1)]


def queue_table(summary: dict[str, Any], width: int) -> tuple[str, Table, list[str]]:
    """Per tenant queue: jobs, JCT, share of GPU time against the guarantee, borrowing, reclaims; its title,
    and the columns a narrow terminal left out."""
    jain = summary.get("jain_satisfaction")
    title = (f"tenant queues ({summary.get('tenancy')}); Jain's index over the leaf queues' satisfaction: "
             f"{'-' if jain is None else f'{jain:.3f}'}")
    cols = [Col("queue", wrap=True, min_width=10), Col("guarantee", "right", priority=3),
            Col("jobs", "right", priority=4), Col("avg JCT (h)", "right", priority=2), Col("GPU-time share", "right"),
            Col("guaranteed share", "right"),
            Col("satisfaction", "right"), Col("borrowed (GPU-h)", "right", priority=1),
            Col("reclaims", "right", priority=5)]
    rows = []
    for q in summary["queues"]:
        sat = q["satisfaction"]
        rows.append([q["path"], str(q["guarantee"]), str(q["jobs"]),
                     "-" if q["avg_jct"] is None else f"{q['avg_jct'] / 3600:.2f}", f"{q['share_of_gpu_time']:.1%}",
                     f"{q['guaranteed_share']:.1%}", "-" if sat is None else f"{sat:.3f}",
                     f"{q['borrowed_gpu_seconds'] / 3600:.1f}", str(q["reclaims"])])
    table, dropped = fit_table(cols, rows, width)
    return title, table, dropped


def sweep_table(rows: list[dict[str, Any]], seeds: int, width: int) -> tuple[str, Table, list[str]]:
    """Average JCT per configuration and load over the seeds: mean, sd, 95% interval of the mean, and
    the paired ratio to the first configuration with its interval (``tesserae.sim.seed_spread``); its
    title, and the columns a narrow terminal left out."""
    title = (f"average JCT (h) over {seeds} seed(s): mean, sd, 95% interval (Student's t); x first: geometric "
             "mean of the per-seed ratios to the first configuration, 95% interval")
    cols = [Col("configuration", wrap=True, min_width=12), Col("load"), Col("seeds", "right", priority=2),
            Col("mean", "right"), Col("sd", "right", priority=1), Col("95% interval", "right"),
            Col("x first", "right"), Col("x first 95%", "right")]

    def h(v: float | None) -> str:
        return "-" if v is None else f"{v / 3600:.2f}"

    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    cells = []
    for r in rows:
        ci = "-" if r["ci_low"] is None else f"[{h(r['ci_low'])}, {h(r['ci_high'])}]"
        rci = "-" if r["ratio_low"] is None else f"[{r['ratio_low']:.2f}, {r['ratio_high']:.2f}]"
        cells.append([r["label"], "trace" if r["load"] is None else f"{r['load']:g}", str(r["seeds"]),
                      h(r["mean"]), h(r["sd"]), ci, x(r["ratio"]), rci])
    table, dropped = fit_table(cols, cells, width)
    return title, table, dropped


def print_fitted(console: Console, titled: tuple[str, Table, list[str]]) -> None:
    """A title line, the table, and which columns the terminal's width left out."""
    title, table, dropped = titled
    console.print(Text(title, style="bold"), soft_wrap=False)
    console.print(table)
    if dropped:
        console.print(Text(f"(left out at {console.width} columns: {', '.join(dropped)}; see the CSV files)",
                           style="dim"))
