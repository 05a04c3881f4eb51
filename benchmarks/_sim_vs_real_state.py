"""What a finished real run of ``sim_vs_real.py`` says about itself, read from its state folder (the
store and the toy jobs' own logs): the simulation's measured inputs (restart overhead, stop latency,
signal delay), the diagnostic of idle GPUs after completions, and the jobs themselves."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any


def _stops(store: Any) -> tuple[dict[int, float], dict[int, float]]:
    """When each run was asked to stop by a decision (preempted or migrating), and when each run ended."""
    asked = {json.loads(r["detail"])["allocation"]: float(r["time"])
             for r in store.query("SELECT time, detail FROM events WHERE kind IN ('preempting', 'migrating')")}
    ends = {int(a["id"]): float(a["end_time"])
            for a in store.query("SELECT id, end_time FROM allocations WHERE end_time IS NOT NULL")}
    return asked, ends


def stop_latencies(state: Path) -> list[float]:
    """Per run a decision stopped: its recorded end minus the decision that asked it to stop."""
    from tesserae.runtime.store.database import DB_NAME, Store

    store = Store(state / DB_NAME, create=False)
    try:
        asked, ends = _stops(store)
    finally:
        store.close()
    # A run that ended on its own just before the stop reached it (completed) is no stop.
    return [ends[a] - at for a, at in asked.items() if a in ends and ends[a] >= at]


def completion_gaps(state: Path) -> list[float]:
    """Per job that completed while another waited: from its last iteration (the toy's own timestamp) to the
    next decision, when that decision started a run (the GPUs stay idle meanwhile; the event-driven
    simulator decides at the completion itself). Not an input of the simulation: a diagnostic."""
    from tesserae.runtime.store.database import DB_NAME, Store

    store = Store(state / DB_NAME, create=False)
    try:
        decisions = sorted(float(r["time"]) for r in store.query("SELECT time FROM events WHERE kind='decision'"))
        jobs = store.query("SELECT id, submit_time, finish_time FROM jobs WHERE finish_time IS NOT NULL")
        allocs = store.query("SELECT job_id, start_time, end_time FROM allocations")
    finally:
        store.close()
    starts = sorted(float(a["start_time"]) for a in allocs)
    out = []
    for j in jobs:
        end = float(j["finish_time"])
        waiting = any(float(k["submit_time"]) <= end < float(k["finish_time"]) and int(k["id"]) != int(j["id"]) and
                      not any(int(a["job_id"]) == int(k["id"]) and float(a["start_time"]) <= end <
                              float(a["end_time"] or math.inf) for a in allocs) for k in jobs)
        m = re.findall(r"toy: done, .* time=([0-9.]+)", (state / "jobs" / str(j["id"]) / "output.log").read_text())
        nxt = next((d for d in decisions if d >= end - 1e-6), None)
        if waiting and m and nxt is not None and any(nxt <= s_ <= nxt + 1.0 for s_ in starts):
            out.append(nxt - float(m[-1]))
    return out


def toy_runs(state: Path, job_ids: set[int]) -> dict[int, tuple[float, int, int | None]]:
    """Per run of these jobs that iterated, from the toy's own log: the time of its first iteration, the
    iteration it started at, and the one it was preempted at (None: it did not report a preemption)."""
    out: dict[int, tuple[float, int, int | None]] = {}
    for job_id in job_ids:
        run = None
        for line in (state / "jobs" / str(job_id) / "output.log").read_text().splitlines():
            m = re.search(r"run (\d+) \((?:started|resumed)\)", line)
            if m:
                run = int(m.group(1))
            m = re.search(r"toy: start iteration=(\d+) .*time=([0-9.]+)", line)
            if m and run is not None:
                out[run] = (float(m.group(2)), int(m.group(1)), None)
            m = re.search(r"toy: preempted at iteration (\d+)", line)
            if m and run in out:
                out[run] = (*out[run][:2], int(m.group(1)))
    return out


def stop_signal_delays(state: Path, spi: float) -> list[float]:
    """Per preempted run that iterated: how long it still made progress after the decision asked it to stop
    (its iterations times ``spi``, less the time from its first iteration to the ask; at least 0): the stop
    had not reached it yet."""
    from tesserae.runtime.store.database import DB_NAME, Store

    store = Store(state / DB_NAME, create=False)
    try:
        asked, ends = _stops(store)
        jobs = {int(a["job_id"]) for a in store.query("SELECT job_id FROM allocations")}
    finally:
        store.close()
    out = []
    for run, (first, begin, stopped_at) in toy_runs(state, jobs).items():
        if run in asked and stopped_at is not None and ends.get(run, -math.inf) >= asked[run]:
            out.append(max(0.0, (stopped_at - begin) * spi - (asked[run] - first)))
    return out


def measured_overheads(state: Path) -> tuple[list[float], list[float]]:
    """Per run: its first iteration (the toy's own timestamp) minus the moment it could start (its decision,
    or the end of the last run that decision stopped, whose GPUs the runtime waits for); and, as the
    previous calibration took it, its first iteration minus its decision."""
    from tesserae.runtime.store.database import DB_NAME, Store

    store = Store(state / DB_NAME, create=False)
    try:
        decisions = [float(r["time"]) for r in store.query("SELECT time FROM events WHERE kind='decision'")]
        allocs = store.query("SELECT id, job_id, start_time FROM allocations WHERE pid IS NOT NULL ORDER BY id")
        asked, ends = _stops(store)
    finally:
        store.close()
    first_iter = {run: first for run, (first, _, _) in toy_runs(state, {int(a["job_id"]) for a in allocs}).items()}
    starts = [(int(a["id"]), float(a["start_time"])) for a in allocs]
    return start_overheads(sorted(decisions), starts, asked, ends, first_iter)


def start_overheads(decisions: list[float], starts: list[tuple[int, float]], asked: dict[int, float],
                    ends: dict[int, float], first_iter: dict[int, float]) -> tuple[list[float], list[float]]:
    """Per started run (id, start time) with a first iteration: that minus the moment it could start, the
    latest of its decision (the last one at or before its start) and the ends of the runs asked to stop
    between that decision and its start; and that minus its decision alone (the previous calibration)."""
    out, from_decision = [], []
    for run, start in starts:
        if run not in first_iter:
            continue
        decided = max((d for d in decisions if d <= start + 1e-6), default=start)
        waited = [ends[r] for r, at in asked.items() if decided <= at <= start + 1e-6 and r in ends]
        out.append(first_iter[run] - max([decided, *waited]))
        from_decision.append(first_iter[run] - decided)
    return out, from_decision


def real_from_state(state: Path) -> dict[int, dict[str, Any]]:
    """A finished real run's jobs, from its kept state folder: submit and finish times, JCT, preemptions, name."""
    from tesserae.runtime.store.database import DB_NAME, Store

    store = Store(state / DB_NAME, create=False)
    try:
        rows = store.query("SELECT id, name, submit_time, finish_time, preemptions FROM jobs")
    finally:
        store.close()
    return {int(r["id"]): {"name": r["name"], "submit_time": float(r["submit_time"]),
                           "finish_time": float(r["finish_time"]), "preemptions": int(r["preemptions"]),
                           "jct_seconds": float(r["finish_time"]) - float(r["submit_time"])} for r in rows}
