"""Accounting, like Slurm's ``sacct``: which jobs a time window holds, and the GPU-hours each user used in it.

A job belongs to the window ``[since, until]`` when its life (submission to end, or to now while
it is active) overlaps it. A job's GPU-hours are its attained service (GPUs x seconds held, over
all its runs) / 3600; its CPU-hours, its CPU request (``resources``) x its run time. A user's
usage over a window counts only the part of each run inside the window, so the windows of a month
add up to the month.
"""

from __future__ import annotations

import math
import time
from typing import Any

from tesserae.runtime.store.database import Store

#: Longest window an accounting query may name: ten years.
MAX_SPAN = 3660 * 86400.0


def window_filter(since: float | None, until: float | None) -> tuple[str, list[Any]]:
    """SQL (over ``jobs``) selecting the jobs whose life overlaps ``[since, until]``, and its parameters."""
    sql, params = "", []
    if since is not None:
        sql += " AND (finish_time IS NULL OR finish_time >= ?)"
        params.append(since)
    if until is not None:
        sql += " AND submit_time <= ?"
        params.append(until)
    return sql, params


def usage(store: Store, since: float | None, until: float | None, user: str | None,
          now: float | None = None) -> dict[str, Any]:
    """GPU-hours per user inside ``[since, until]`` (a run still going counts up to now), the jobs that
    ran in it, and the total; only ``user``'s when given."""
    now = time.time() if now is None else now
    lo = -math.inf if since is None else since
    hi = now if until is None else min(until, now)
    sql = ("SELECT j.user AS user, COUNT(DISTINCT j.id) AS jobs, "
           "SUM(json_array_length(a.gpus) * (MIN(COALESCE(a.end_time, ?), ?) - MAX(a.start_time, ?))) AS gs, "
           "SUM(COALESCE(j.cpus, 0) * (MIN(COALESCE(a.end_time, ?), ?) - MAX(a.start_time, ?))) AS cs "
           "FROM allocations a JOIN jobs j ON j.id = a.job_id WHERE a.pid IS NOT NULL AND a.start_time < ? "
           "AND COALESCE(a.end_time, ?) > ?")
    floor = lo if math.isfinite(lo) else -1e300
    params: list[Any] = [now, hi, floor, now, hi, floor, hi, now, floor]
    if user is not None:
        sql += " AND j.user = ?"
        params.append(user)
    rows = store.query(sql + " GROUP BY j.user ORDER BY j.user", params)
    users = [{"user": r["user"], "jobs": int(r["jobs"]), "gpu_hours": round(max(0.0, float(r["gs"] or 0)) / 3600, 6),
              "cpu_hours": round(max(0.0, float(r["cs"] or 0)) / 3600, 6)} for r in rows]
    return {"since": since, "until": until, "users": users,
            "total_gpu_hours": round(sum(u["gpu_hours"] for u in users), 6),
            "total_cpu_hours": round(sum(u["cpu_hours"] for u in users), 6),
            "total_jobs": sum(u["jobs"] for u in users)}
