"""Applying a Plan: stop first, wait until those runs have exited, then start.

The jobs to stop (preempted, or migrating: they restart elsewhere from their checkpoint) are
recorded ``stopping`` and get SIGTERM (``RunBook.begin_stop``); the controller keeps polling
(reaping, SIGKILL after the grace period) until every one of them has exited, so that no GPU is
handed out while its previous job still holds it. Then the jobs to start or move are started
(``RunBook.start``: recorded ``starting`` before their process exists). A job cancelled or ended
meanwhile is simply not started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tesserae.core.jobs import JobTable
from tesserae.core.plan import Plan
from tesserae.runtime.controller.runs import RunBook


def apply_plan(plan: Plan, table: JobTable, runs: RunBook, *, stop: threading.Event, tick: float,
               poll: Callable[[float], None]) -> None:
    """Apply ``plan`` (rows of ``table``); returns early, starting nothing, when ``stop`` is set."""
    job_of = table.job_id
    by_job = {live.job_id: live for live in runs.live.values()}
    waiting = []
    now = time.time()
    for rows, why in ((plan.stopped, "preempt"), (plan.migrated, "migrate")):
        for r in rows:
            live = by_job.get(int(job_of[r]))
            if live is not None and live.phase == "running":
                runs.begin_stop(live, why, now)
                waiting.append(live.alloc_id)
    while any(a in runs.live for a in waiting):
        if stop.wait(tick):
            return  # shutting down: the pending starts are simply not done (jobs stay queued)
        poll(time.time())
    starts = set(plan.started) | set(plan.migrated)
    for r, a in plan.assignments.items():
        if r in starts:
            partner = int(job_of[a.partner]) if a.partner is not None else None
            runs.start(int(job_of[r]), a.gpus, partner, a.strategy)
