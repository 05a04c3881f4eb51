"""What the API answers: a job as JSON (``job_view``), and the Prometheus metrics (``prometheus_text``).

Numbers from the store are made JSON-safe (no NaN or infinity: ``None``); a running job's executed
time and attained service count its open run up to now.
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any

from tesserae.runtime.api.queues import queue_metrics
from tesserae.runtime.controller import lifecycle
from tesserae.runtime.controller.pending import Pending
from tesserae.runtime.store import allocations, counts

if TYPE_CHECKING:
    from tesserae.runtime.controller.loop import Controller


def _num(v: Any) -> Any:
    return None if v is None else _finite(v)


def _finite(v: Any) -> float | None:
    x = float(v)
    return x if math.isfinite(x) else None


def job_view(row: Any, allocation: Any | None, events: list[Any] | None = None,
             pending: Pending | None = None) -> dict[str, Any]:
    """A job as the API shows it. ``waited_seconds`` is all its time not running, up to now or its end
    (every wait, before its first start and after each preemption); ``pending`` is its place in the
    queue while it waits (``pending.describe``)."""
    now = time.time()
    executed, attained = float(row["executed"]), float(row["attained"])
    gpus = None
    if allocation is not None:
        gpus = json.loads(allocation["gpus"])
        held = max(0.0, now - float(allocation["start_time"]))
        executed += held
        attained += held * int(row["num_gpus"])
    total = row["iterations"] if row["iterations"] is not None else row["total_reported"]
    finish = _num(row["finish_time"])
    submit = float(row["submit_time"])
    first = _num(row["first_start"])
    view: dict[str, Any] = {
        "id": int(row["id"]),
        "name": row["name"],
        "user": row["user"],
        "state": row["state"],
        "gpus": int(row["num_gpus"]),
        "job_type": row["job_type"],
        "command": json.loads(row["command"]),
        "shell": bool(row["shell"]),
        "nproc": int(row["nproc"]),
        "workdir": row["workdir"],
        "env": json.loads(row["env"]),
        "iterations_done": _finite(row["progress"]) or 0.0,
        "iterations_total": None if total is None else int(total),
        "submit_time": submit,
        "first_start_time": first,
        "finish_time": finish,
        "jct_seconds": None if finish is None else finish - submit,
        "queueing_seconds": None if first is None else first - submit,
        "executed_seconds": executed,
        "attained_gpu_seconds": attained,
        "gpu_hours": attained / 3600.0,
        "preemptions": int(row["preemptions"]),
        "migrations": int(row["migrations"]),
        "exit_code": row["exit_code"],
        "reason": row["reason"],
        "cancel_requested": bool(row["cancel_requested"]),
        "assigned_gpus": gpus,
        "waited_seconds": max(0.0, (now if finish is None else finish) - submit - executed),
        "queue_position": None if pending is None else pending.position,
        "pending_reason": None if pending is None else pending.reason,
        "queue": row["queue"] or None,
        "priority_class": row["priority_class"],
        **lifecycle_view(row),
    }
    if events is not None:
        view["events"] = [{"time": float(e["time"]), "kind": e["kind"],
                           "detail": json.loads(e["detail"]) if e["detail"].startswith("{") else e["detail"]}
                          for e in events]
    return view


def lifecycle_view(row: Any) -> dict[str, Any]:
    """The job's lifecycle controls (``lifecycle``) and resource requests (``resources``)."""
    deps = lifecycle.dependencies(row)
    return {"time_limit_seconds": _num(row["time_limit"]), "retries": int(row["retries"]),
            "retries_used": int(row["retries_used"]), "retry_backoff_seconds": float(row["retry_backoff"]),
            "held": bool(row["held"]), "after": [j for j, kind in deps if kind == "any"],
            "after_ok": [j for j, kind in deps if kind == "ok"], "array_job": row["array_job"],
            "array_index": row["array_index"], "resubmit_of": row["resubmit_of"], "gpu_type": row["gpu_type"],
            "cpus": _num(row["cpus"]), "memory_mb": row["memory_mb"], "output": row["output"], "error": row["error"],
            "node": row["node"]}


def prometheus_text(controller: Controller) -> str:
    store, stats = controller.store, controller.stats
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{labels} {value:g}" if isinstance(value, float) else f"{name}{labels} {value}")

    by_state = counts.jobs_by_state(store)
    metric("tesserae_jobs", "gauge", "Jobs by state.", [(f'{{state="{s}"}}', n) for s, n in by_state.items()])
    totals = counts.totals(store)
    metric("tesserae_jobs_submitted_total", "counter", "Jobs ever submitted.", [("", totals.jobs)])
    metric("tesserae_preemptions_total", "counter", "Preemptions of jobs.", [("", totals.preemptions)])
    metric("tesserae_migrations_total", "counter", "Migrations of jobs.", [("", totals.migrations)])
    metric("tesserae_runs_started_total", "counter", "Job processes started (first starts and resumptions).",
           [("", totals.runs)])
    by_type: dict[str, int] = {}
    for g in controller.executor.gpus:
        by_type[g.gpu_type] = by_type.get(g.gpu_type, 0) + 1
    metric("tesserae_gpus", "gauge", "GPUs of this cluster by type.", [(f'{{type="{t}"}}', n) for t, n in
                                                                        by_type.items()])
    metric("tesserae_gpus_in_use", "gauge", "GPUs held by running jobs.", [("", len(allocations.gpus_in_use(store)))])
    metric("tesserae_job_completion_seconds", "summary", "Job completion time (finish - submit) of completed "
           "jobs.", [("_sum", totals.completed_jct_sum), ("_count", totals.completed)])
    metric("tesserae_rounds_total", "counter", "Scheduling decisions since the server started.",
           [("", stats.rounds)])
    metric("tesserae_decision_seconds_total", "counter", "Time spent in Scheduler.decide since the server started.",
           [("", float(stats.decision_seconds_sum))])
    metric("tesserae_adopted_runs_total", "counter", "Runs adopted after a controller restart.",
           [("", stats.adopted)])
    metric("tesserae_lost_runs_total", "counter", "Runs whose processes vanished; their jobs were requeued.",
           [("", stats.lost)])
    for name, kind, help_text, samples in queue_metrics(controller):
        metric(name, kind, help_text, samples)
    return "\n".join(lines) + "\n"
