"""Reconciliation at start-up: settle every run the store says may exist with what actually runs.

For each run not recorded as ended (the write-ahead records of ``runs``):

- its launcher is alive (same pid, kernel start time and marker; for Ray every part of the gang):
  the run is *adopted* (a ``starting`` one becomes ``running``; a ``stopping`` one gets SIGTERM
  again with its recorded deadline; one on GPUs this cluster no longer has is preempted);
- it ended meanwhile: it is closed with the exit code its launcher wrote;
- it left no exit record: whatever of it is still alive is killed first (its GPUs are not handed
  out before), then it is closed as lost and its job requeued (it resumes from its checkpoint);
- it was recorded ``starting`` and never got a process: the intent is undone (``not-started``).

So a job is never lost, never runs twice at once, and a completed job never runs again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tesserae.core.cluster import Cluster
from tesserae.runtime.controller.reaping import Reaper
from tesserae.runtime.controller.runs import Live, RunBook
from tesserae.runtime.store import allocations


def reconcile(runs: RunBook, reaper: Reaper, cluster: Cluster) -> None:
    store = runs.store
    now = time.time()
    beat = store.meta("heartbeat")
    last_seen = min(now, float(beat)) if beat else now
    for a in allocations.unended(store):
        run_dir = Path(a["run_dir"])
        live = Live(a["id"], a["job_id"], tuple(json.loads(a["gpus"])), a["start_time"], run_dir, None,
                    a["phase"], a["stop_reason"], a["stop_deadline"], partner=a["partner"],
                    strategy=a["strategy"])
        if _adopt(runs, live, a, cluster, now):
            continue
        code, t = runs.executor.exit_code(None, run_dir)
        # The launcher is gone; any process of the run still alive must die before the job runs again
        # or its GPUs are handed out.
        leftovers = reaper.end_leftovers(str(run_dir), exit_recorded=t is not None)
        if live.phase == "starting" and a["pid"] is None and code is None and not leftovers:
            _unstart(runs, a)
            continue
        end = t if t is not None else max(a["start_time"], last_seen)
        if code is None:
            runs.stats.lost += 1
        runs.close(live, code, end)


def _adopt(runs: RunBook, live: Live, a: Any, cluster: Cluster, now: float) -> bool:
    """Take over the run of allocation ``a`` if it still runs; False if it does not."""
    store = runs.store
    adopted = runs.executor.adopt(a["pid"], a["pid_start"], str(live.run_dir), live.gpus)
    if adopted is None:
        return False
    live.proc = proc = adopted.run
    if adopted.gpus != live.gpus:  # the executor's view changed meanwhile
        live.gpus = adopted.gpus
        allocations.move(store, [(a["id"], live.gpus)])
    if live.phase == "starting":
        live.phase = "running"
        allocations.record_spawned(store, a["id"], proc.pid, proc.ticks)
    runs.live[a["id"]] = live
    runs.stats.adopted += 1
    store.event(a["job_id"], "adopted", {"allocation": a["id"], "pid": proc.pid})
    runs.log(f"adopted job {a['job_id']} (run {a['id']}, pid {proc.pid}, {live.phase})")
    if live.phase == "stopping":
        live.deadline = a["stop_deadline"] or now + runs.config.grace_seconds
        runs.executor.terminate(proc)
    elif any(g >= cluster.num_gpus for g in live.gpus):
        runs.begin_stop(live, "preempt", now)
    return True


def _unstart(runs: RunBook, a: Any) -> None:
    """An allocation recorded as 'starting' whose process never came to be: undo the intent."""
    job_id = a["job_id"]
    allocations.unstart(runs.store, a["id"], job_id)
    runs.executor.release(str(a["run_dir"]))
    runs.log(f"job {job_id}: run {a['id']} never started; requeued")
