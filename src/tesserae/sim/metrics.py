"""Run metrics (DESIGN §2): the summary, the per-job rows, size classes and the window.

Queueing counts every wait, not only the first: a job's queueing delay is the time between its
submission and its end that it did not hold GPUs (before its first start, and after each preemption,
failed run or retry backoff), ``end - submit - executed``, the runtime's ``waited_seconds``. The wait
before the first start alone is ``first_start_delay``. JCT and slowdown are those of completed jobs
only (a failed, timed-out or cancelled job has none), in the summary and in ``jobs.csv`` alike.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tesserae.core.jobs import JobStatus, JobTable, Outcome
from tesserae.sim.engine import SimResult

SIZE_CLASSES: list[tuple[str, int, int]] = [("1", 1, 1), ("2-4", 2, 4), ("5-8", 5, 8), ("9+", 9, 1 << 30)]
JOB_COLUMNS = ["job_id", "name", "job_type", "num_gpus", "submit_time", "first_start", "finish_time", "jct",
               "queueing_delay", "first_start_delay", "preemptions", "migrations", "gpu_seconds", "slowdown"]


def _stat(values: np.ndarray, q: float | None = None) -> float | None:
    if values.size == 0:
        return None
    return float(np.mean(values)) if q is None else float(np.percentile(values, q))


def window_rows(table: JobTable, window: tuple[int, int] | None) -> np.ndarray:
    """Rows whose job id lies in [lo, hi): the measurement window (all rows when None)."""
    if window is None:
        return np.arange(table.n)
    lo, hi = window
    return np.flatnonzero((table.job_id >= lo) & (table.job_id < hi))


def summarize(result: SimResult, *, policy: str, placement: str, profile: str, profile_measured: bool,
              seed: int | None = None, window: tuple[int, int] | None = None,
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    t = result.table
    rows = window_rows(t, window)
    ended = rows[t.status[rows] == JobStatus.DONE]
    done = ended[t.outcome[ended] == Outcome.COMPLETED]  # failed, timed-out, cancelled jobs have no JCT
    rejected = int((t.status[rows] == JobStatus.REJECTED).sum())
    unfinished = int(rows.size - ended.size - rejected)
    jct = t.finish[done] - t.submit[done]
    queueing = waits(t, done)
    first_wait = t.first_start[done] - t.submit[done]
    isolated = t.work[done] / t.ref_rate[done]
    slowdown = jct / np.maximum(isolated, 1e-9)
    if done.size:
        first_submit = float(t.submit[rows[t.status[rows] != JobStatus.REJECTED]].min())
        makespan = float(t.finish[done].max()) - first_submit
    else:
        makespan = 0.0
    gpus = result.cluster.num_gpus
    decisions = np.asarray(result.decision_seconds)
    by_size: dict[str, Any] = {}
    for label, lo, hi in SIZE_CLASSES:
        sel = (t.num_gpus[done] >= lo) & (t.num_gpus[done] <= hi)
        if sel.any():
            by_size[label] = {"jobs": int(sel.sum()), "avg_jct": _stat(jct[sel]), "p95_jct": _stat(jct[sel], 95)}
    summary: dict[str, Any] = {
        "jobs": int(rows.size),
        "completed": int(done.size),
        "rejected": rejected,
        "rejected_reasons": result.rejections,
        "unfinished": unfinished,
        "avg_jct": _stat(jct),
        "median_jct": _stat(jct, 50),
        "p95_jct": _stat(jct, 95),
        "p99_jct": _stat(jct, 99),
        "makespan": makespan,
        "utilization": result.busy_gpu_seconds / (gpus * makespan) if makespan > 0 else 0.0,
        "avg_queueing_delay": _stat(queueing),
        "avg_first_start_delay": _stat(first_wait),
        "avg_slowdown": _stat(slowdown),
        "preemptions": int(t.preemptions[rows].sum()),
        "migrations": int(t.migrations[rows].sum()),
        "type_switches": int(t.type_switches[rows].sum()),
        "strategy_changes": int(t.strategy_changes[rows].sum()),
        "jct_by_size": by_size,
        "policy": policy,
        "placement": placement,
        "cluster": result.cluster.describe(),
        "cluster_gpus": gpus,
        "round_seconds": result.config.round_seconds,
        "restart_overhead": result.config.restart_overhead if result.config.restart_cost == "fixed" else None,
        "stop_latency": result.config.stop_latency,
        "stop_signal_delay": result.config.stop_signal_delay,
        "event_driven": result.config.event_driven,
        "profile": profile,
        "profile_kind": "measured" if profile_measured else "model (not a measurement)",
        "seed": seed,
        "window": list(window) if window else None,
        "scheduler_seconds": float(decisions.sum()),
        "decisions": int(decisions.size),
        "decision_seconds_mean": _stat(decisions),
        "decision_seconds_p95": _stat(decisions, 95),
        "decision_seconds_max": float(decisions.max()) if decisions.size else None,
        "wall_seconds": result.wall_seconds,
        "events": result.events,
    }
    if has_controls(t):
        summary["lifecycle"] = {o.name.lower(): int((t.outcome[ended] == o).sum()) for o in Outcome} | {
            "retries": int(t.retries_used[rows].sum())}
    summary.update(result.restart)
    summary["warnings"] = list(result.warnings)
    summary.update(result.scheduler_summary)
    if extra:
        summary.update(extra)
    return summary


def waits(t: JobTable, rows: np.ndarray) -> np.ndarray:
    """Every wait of each (ended) row: the time between submission and end it held no GPUs."""
    return np.maximum(t.finish[rows] - t.submit[rows] - t.executed[rows], 0.0)


def has_controls(t: JobTable) -> bool:
    """Whether some job of the run has lifecycle controls (then runs report outcomes and retries)."""
    return any(s.controls is not None for s in t.specs)


def job_records(result: SimResult) -> list[dict[str, Any]]:
    """One row per job (every job, window or not), in job-id order; with lifecycle controls, each
    row also says how the job ended (``outcome``) and its retries. ``jct`` and ``slowdown`` are left
    empty (NaN) for a job that did not complete; ``queueing_delay`` (every wait) for one that did not end."""
    t = result.table
    controls = has_controls(t)
    out = []
    for r in np.argsort(t.job_id, kind="stable").tolist():
        finish = float(t.finish[r])
        first = float(t.first_start[r])
        submit = float(t.submit[r])
        ended = t.status[r] == JobStatus.DONE and not math.isnan(finish)
        completed = ended and t.outcome[r] == Outcome.COMPLETED
        jct = finish - submit if completed else math.nan
        out.append({
            "job_id": int(t.job_id[r]),
            "name": t.specs[r].name,
            "job_type": t.job_type(r),
            "num_gpus": int(t.num_gpus[r]),
            "submit_time": submit,
            "first_start": first,
            "finish_time": finish,
            "jct": jct,
            "queueing_delay": max(finish - submit - float(t.executed[r]), 0.0) if ended else math.nan,
            "first_start_delay": first - submit if not math.isnan(first) else math.nan,
            "preemptions": int(t.preemptions[r]),
            "migrations": int(t.migrations[r]),
            "gpu_seconds": float(t.attained[r]),
            "slowdown": jct / max(float(t.work[r] / t.ref_rate[r]), 1e-9) if not math.isnan(jct) else math.nan,
        })
        if controls:
            ended = t.status[r] == JobStatus.DONE
            out[-1].update(outcome=Outcome(int(t.outcome[r])).name.lower() if ended else "",
                           retries=int(t.retries_used[r]))
    return out


def restart_description(summary: dict[str, Any], short: bool = False) -> str:
    """Which restart cost a run charged, and whether it was measured or a model (``short``: for a table cell)."""
    mode = summary.get("restart_cost", "fixed")
    mean, top = summary.get("restart_seconds_mean"), summary.get("restart_seconds_max")
    if mode == "fixed":
        seconds = summary.get("restart_overhead")
        text = "fixed" if seconds is None else f"fixed {seconds:g} s" + ("" if short else
                                                                        " per start, resume or migration")
    elif short:
        kind = summary.get("restart_cost_kind", "")
        text = f"job: {mean:.1f} s mean" if mean is not None else "job"
        text += " (model)" if kind.startswith("model") else " (measured)" if kind == "measured" else " (mixed)"
    else:
        text = f"per job type: start-up + checkpoint bytes at {summary.get('storage_gbps', 0):g} Gbit/s"
        if mean is not None and top is not None:
            text += f", {mean:.1f} s mean, {top:.1f} s max"
        text += f" ({summary.get('restart_cost_kind', 'unknown')})"
    quantum = summary.get("min_run_quantum") or 0
    if quantum:
        text += f", quantum {quantum:g}x" if short else f"; minimum run quantum {quantum:g} x restart cost"
    stop = summary.get("stop_latency") or 0
    if stop:
        signal = summary.get("stop_signal_delay") or 0
        text += f", stop {stop:g} s" if short else f"; a preempted or migrating job takes {stop:g} s to stop" + (
            f", running on for the first {signal:g} s" if signal else "")
    return text


QUEUE_COLUMNS = ["queue", "path", "leaf", "guarantee", "borrow_limit", "weight", "jobs", "completed", "avg_jct",
                 "median_jct", "p95_jct", "avg_queueing_delay", "gpu_seconds", "share_of_gpu_time",
                 "guaranteed_share", "share_vs_guarantee", "entitled_gpu_seconds", "met_gpu_seconds", "satisfaction",
                 "borrowed_gpu_seconds", "borrowed_fraction", "reclaims"]


def jain_index(values: np.ndarray) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one gets everything."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not (x**2).sum() > 0:
        return None
    return float(x.sum() ** 2 / (x.size * (x**2).sum()))


def queue_summary(result: SimResult, step: Any, window: tuple[int, int] | None = None) -> dict[str, Any]:
    """Per tenant queue: JCT, share of GPU time against the guarantee, time borrowed, reclaims; Jain's index.

    ``satisfaction`` = GPU-seconds a queue received up to its entitlement / its entitlement, where
    the entitlement at each instant is min(guarantee, GPUs its active jobs ask for): 1 means the
    queue always had its guarantee whenever it had the demand. Jain's index is taken over the leaf
    queues' satisfaction (those entitled to anything).
    """
    t = result.table
    step.close(t)
    tree = step.tree
    leaf_of, _ = step.rows(t)
    rows = window_rows(t, window)
    total_used = float(step.used_gs[list(tree.top)].sum())
    gpus = result.cluster.num_gpus
    records: list[dict[str, Any]] = []
    for q in tree.describe():
        node = tree.index(q["name"])
        mine = rows[step.in_queue(node, leaf_of[rows])]
        done = mine[(t.status[mine] == JobStatus.DONE) & (t.outcome[mine] == Outcome.COMPLETED)]
        jct = t.finish[done] - t.submit[done]
        used, entitled = float(step.used_gs[node]), float(step.entitled_gs[node])
        met, borrowed = float(step.met_gs[node]), float(step.borrowed_gs[node])
        share = used / total_used if total_used > 0 else 0.0
        guaranteed = q["guarantee"] / gpus
        records.append({
            "queue": q["name"], "path": q["path"], "leaf": q["leaf"], "guarantee": q["guarantee"],
            "borrow_limit": q["borrow_limit"], "weight": q["weight"], "jobs": int(mine.size),
            "completed": int(done.size), "avg_jct": _stat(jct), "median_jct": _stat(jct, 50),
            "p95_jct": _stat(jct, 95), "avg_queueing_delay": _stat(waits(t, done)),
            "gpu_seconds": used, "share_of_gpu_time": share, "guaranteed_share": guaranteed,
            "share_vs_guarantee": share / guaranteed if guaranteed > 0 else None,
            "entitled_gpu_seconds": entitled, "met_gpu_seconds": met,
            "satisfaction": met / entitled if entitled > 0 else None,
            "borrowed_gpu_seconds": borrowed, "borrowed_fraction": borrowed / used if used > 0 else 0.0,
            "reclaims": int(step.reclaims[node]),
        })
    leaves = [r for r in records if r["leaf"] and r["satisfaction"] is not None]
    short = sum(r["entitled_gpu_seconds"] - r["met_gpu_seconds"] for r in records if r["leaf"])
    return {"queues": records,
            "jain_satisfaction": jain_index(np.array([r["satisfaction"] for r in leaves])),
            "min_satisfaction": min((r["satisfaction"] for r in leaves), default=None),
            "guarantee_shortfall_gpu_hours": short / 3600.0,
            "borrowed_gpu_hours": sum(r["borrowed_gpu_seconds"] for r in records if r["leaf"]) / 3600.0}
