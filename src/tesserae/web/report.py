"""The results page of an output folder: ``report.html`` (self-contained) and ``tesserae view``.

One template serves both. ``report.html`` inlines its CSS, its scripts (uPlot and ``report.js``)
and its data, so it opens from a mail attachment with no server and no network; the viewer serves
the same page and answers drill-down questions for any job on demand. Plots are drawn from the
run folders' ``jobs.csv`` and ``timeline.csv`` (down-sampled to a few thousand points per run).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from tesserae.core.timeseries import MAX_POINTS, peak_sample
from tesserae.sim.metrics import restart_description
from tesserae.web.results import Run, explain, find_runs
from tesserae.web.templating import environment

REPORT_NAME = "report.html"
CDF_POINTS = 400
TIMELINE_POINTS = MAX_POINTS
#: Embed an explanation for every job when the runs hold at most this many jobs together;
#: otherwise for the ``LONGEST`` longest waits of each run (the viewer answers for any job).
EMBED_ALL = 3000
LONGEST = 20
#: (row label, summary key, unit, lower is better)
METRICS: tuple[tuple[str, str | None, str, bool], ...] = (
    ("jobs done / rejected / unfinished", None, "", True),
    ("avg JCT (h)", "avg_jct", "h", True), ("median JCT (h)", "median_jct", "h", True),
    ("p95 JCT (h)", "p95_jct", "h", True), ("p99 JCT (h)", "p99_jct", "h", True),
    ("makespan (h)", "makespan", "h", True), ("avg queueing, every wait (h)", "avg_queueing_delay", "h", True),
    ("avg wait to first start (h)", "avg_first_start_delay", "h", True),
    ("avg slowdown", "avg_slowdown", "x", True), ("utilization", "utilization", "%", False),
    ("preemptions", "preemptions", "n", True), ("migrations", "migrations", "n", True),
    ("decision time mean (ms)", "decision_seconds_mean", "ms", True),
)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def _text(v: float, unit: str) -> str:
    if unit == "h":
        return f"{v / 3600:.2f}"
    if unit == "%":
        return f"{v:.1%}"
    if unit == "n":
        return f"{v:.0f}"
    if unit == "ms":
        return f"{v * 1000:.2f}"
    return f"{v:.2f}"


def comparison(runs: list[Run]) -> list[dict[str, Any]]:
    """Side-by-side tables, one per workload group, with each value's ratio to the group's first run."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(r.group, []).append(r)
    out = []
    for name, members in groups.items():
        base = members[0].summary
        rows = []
        for label, key, unit, lower in METRICS:
            cells = []
            for r in members:
                s = r.summary
                if key is None:
                    cells.append({"text": f"{s.get('completed', '-')} / {s.get('rejected', '-')} / "
                                          f"{s.get('unfinished', '-')}", "ratio": None, "better": None})
                    continue
                v, b = _num(s.get(key)), _num(base.get(key))
                if v is None:
                    cells.append({"text": "-", "ratio": None, "better": None})
                    continue
                ratio = v / b if (b and r is not members[0] and len(members) > 1) else None
                better = None if ratio is None or ratio == 1 else (ratio < 1) == lower
                cells.append({"text": _text(v, unit), "ratio": ratio, "better": better})
            if any(c["text"] != "-" for c in cells):
                rows.append({"label": label, "cells": cells})
        out.append({"group": name, "columns": [r.label for r in members], "keys": [r.key for r in members],
                    "rows": rows})
    return out


def cdf(run: Run) -> dict[str, list[float]]:
    """Completed jobs' JCT CDF (hours, fraction), at most CDF_POINTS points (exact quantiles)."""
    j = run.jobs()
    jct = np.sort(j["jct"][np.isfinite(j["finish_time"]) & np.isfinite(j["jct"])])
    n = jct.size
    if n == 0:
        return {"x": [], "y": []}
    idx = np.unique(np.linspace(0, n - 1, min(n, CDF_POINTS)).round().astype(np.int64))
    return {"x": [round(float(x) / 3600.0, 6) for x in jct[idx]], "y": [round((int(i) + 1) / n, 6) for i in idx]}


def timeline(run: Run) -> dict[str, Any]:
    """GPUs in use and jobs queued over time (hours); beyond TIMELINE_POINTS decisions, the maximum
    of each of TIMELINE_POINTS equal time buckets (so peaks survive)."""
    tl = run.timeline()
    t, cols, sampled = peak_sample(tl["time"], {"gpus": tl["gpus_in_use"], "queued": tl["queued"]}, TIMELINE_POINTS)
    return {"t": [round(float(x) / 3600.0, 5) for x in t], "gpus": [int(x) for x in cols["gpus"]],
            "queued": [int(x) for x in cols["queued"]], "sampled": bool(sampled)}


def longest_waits(run: Run, n: int) -> list[dict[str, Any]]:
    j = run.jobs()
    wait = j["queueing_delay"]  # every wait: a job stopped for hours after its first start counts
    ok = np.flatnonzero(np.isfinite(wait))
    top = ok[np.argsort(-wait[ok], kind="stable")[:n]]
    return [{"job_id": int(j["job_id"][k]), "gpus": int(j["num_gpus"][k]), "wait": float(wait[k])} for k in top]


def report_data(folder: Path, kind: str, runs: list[Run], *, embed: bool) -> dict[str, Any]:
    """Everything the page's script needs: plots, longest waits, and (``embed``) explanations."""
    first = runs[0].summary
    total_jobs = sum(r.jobs()["job_id"].size for r in runs)
    explain_all = total_jobs <= EMBED_ALL
    explanations: dict[str, dict[str, Any]] = {}
    if embed:
        for r in runs:
            ids = r.jobs()["job_id"] if explain_all else [w["job_id"] for w in longest_waits(r, LONGEST)]
            explanations[r.key] = {str(int(i)): {k: e[k] for k in ("name", "sentences")}
                                   for i in ids for e in [explain(runs, r, int(i))]}
    return {
        "kind": kind, "folder": folder.name,
        "runs": [{"key": r.key, "label": r.label, "group": r.group, "jobs": int(r.jobs()["job_id"].size),
                  "longest": longest_waits(r, 10)} for r in runs],
        "cluster_gpus": max(r.cluster_gpus for r in runs),
        "cdf": {r.key: cdf(r) for r in runs},
        "timeline": {r.key: timeline(r) for r in runs},
        "explanations": explanations, "explain_all": bool(embed and explain_all),
        "api": None if embed else "api/explain",
        "workload": first.get("workload"), "cluster": first.get("cluster"),
        "profile": first.get("profile_kind") or first.get("profile"),
        "restart": restart_description(first) if "restart_cost" in first else None,
    }


def render(folder: Path, *, embed: bool = True) -> str:
    """The page for an output folder (``embed``: self-contained, with explanations inlined)."""
    kind, runs = find_runs(folder)
    data = report_data(folder, kind, runs, embed=embed)
    return environment().get_template("report.html").render(
        title=f"Tesserae results: {folder.resolve().name}", data=data, tables=comparison(runs), runs=runs,
        kind=kind, embed=embed)


def write_report(folder: Path) -> Path:
    """Write ``FOLDER/report.html`` (atomically)."""
    path = Path(folder) / REPORT_NAME
    tmp = path.with_name(f".{REPORT_NAME}.tmp")
    tmp.write_text(render(Path(folder), embed=True), encoding="utf-8")
    os.replace(tmp, path)
    return path
