"""The tables ``simulate`` and ``compare`` print: summaries side by side, tenant queues, sweeps."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

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


def summary_table(title: str, summaries: list[dict[str, Any]]) -> Table:
    rows = [("jobs done / rejected / unfinished", None), ("avg JCT (h)", "avg_jct"),
            ("median JCT (h)", "median_jct"), ("p95 JCT (h)", "p95_jct"), ("p99 JCT (h)", "p99_jct"),
            ("makespan (h)", "makespan"),
            ("avg queueing, every wait (h)", "avg_queueing_delay"),
            ("avg wait to first start (h)", "avg_first_start_delay"),
            ("utilization", "utilization"), ("preemptions", "preemptions"), ("migrations", "migrations"),
            ("decision time mean (ms)", "decision_seconds_mean"), ("restart cost", "restart_cost")]
    table = Table(title=title)
    table.add_column("metric")
    base = summaries[0]
    for s in summaries:
        table.add_column(s.get("label", s["policy"]), justify="right")
    for name, key in rows:
        cells = []
        for s in summaries:
            if key is None:
                cells.append(f"{s['completed']} / {s['rejected']} / {s['unfinished']}")
                continue
            v = s.get(key)
            if key == "restart_cost":
                cells.append(restart_description(s, short=True) if v is not None else "-")
                continue
            if v is None:
                cells.append("-")
                continue
            if key in ("utilization",):
                text = f"{v:.1%}"
            elif key in ("preemptions", "migrations"):
                text = f"{v:d}"
            elif key == "decision_seconds_mean":
                text = f"{v * 1000:.2f}"
            else:
                text = f"{v / 3600:.2f}"
            b = base.get(key)
            if len(summaries) > 1 and s is not base and b and isinstance(v, float) and key != "utilization":
                text += f" ({v / b:.2f}x)"
            cells.append(text)
        table.add_row(name, *cells)
    if any(s.get("lifecycle") for s in summaries):  # a trace with lifecycle controls
        table.add_row("failed / timed out / cancelled / retries",
                      *(("{failed} / {timed_out} / {cancelled} / {retries}".format(**s["lifecycle"])
                         if s.get("lifecycle") else "-") for s in summaries))
    return table


def queue_table(summary: dict[str, Any]) -> Table:
    """Per tenant queue: jobs, JCT, share of GPU time against the guarantee, borrowing, reclaims."""
    jain = summary.get("jain_satisfaction")
    table = Table(title=f"tenant queues ({summary.get('tenancy')}); Jain's index over the leaf queues' "
                        f"satisfaction: {'-' if jain is None else f'{jain:.3f}'}")
    for col in ("queue", "guarantee", "jobs", "avg JCT (h)", "GPU-time share", "guaranteed share",
                "satisfaction", "borrowed (GPU-h)", "reclaims"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    for q in summary["queues"]:
        sat = q["satisfaction"]
        table.add_row(q["path"], str(q["guarantee"]), str(q["jobs"]),
                      "-" if q["avg_jct"] is None else f"{q['avg_jct'] / 3600:.2f}", f"{q['share_of_gpu_time']:.1%}",
                      f"{q['guaranteed_share']:.1%}", "-" if sat is None else f"{sat:.3f}",
                      f"{q['borrowed_gpu_seconds'] / 3600:.1f}", str(q["reclaims"]))
    return table


def sweep_table(rows: list[dict[str, Any]], seeds: int) -> Table:
    """Average JCT per configuration and load over the seeds: mean, sd, 95% interval of the mean, and
    the paired ratio to the first configuration with its interval (``tesserae.sim.seed_spread``)."""
    table = Table(title=f"average JCT (h) over {seeds} seed(s): mean, sd, 95% interval (Student's t); "
                        "x first: geometric mean of the per-seed ratios, 95% interval")
    for col in ("configuration", "load", "seeds", "mean", "sd", "95% interval", "x first", "x first 95%"):
        table.add_column(col, justify="left" if col == "configuration" else "right")

    def h(v: float | None) -> str:
        return "-" if v is None else f"{v / 3600:.2f}"

    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    for r in rows:
        ci = "-" if r["ci_low"] is None else f"[{h(r['ci_low'])}, {h(r['ci_high'])}]"
        rci = "-" if r["ratio_low"] is None else f"[{r['ratio_low']:.2f}, {r['ratio_high']:.2f}]"
        table.add_row(escape(r["label"]), "trace" if r["load"] is None else f"{r['load']:g}", str(r["seeds"]),
                      h(r["mean"]), h(r["sd"]), ci, x(r["ratio"]), rci)
    return table
