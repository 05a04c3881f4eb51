"""Job lifecycle controls: a time limit, retries with backoff, dependencies, arrays, hold and release.

Each is a column of the job's ``jobs`` row (schema 4), so each survives a controller restart: the
controller reads them again at every decision.

- **time limit** (``time_limit``, seconds): the job's run time summed over all its runs (a
  preempted job keeps what it used). Past it, the run is stopped (SIGTERM, then SIGKILL after the
  grace) and the job fails with reason "reached its time limit"; it is not retried.
- **retries** (``retries``, ``retry_backoff``): a run that fails (a non-zero exit, a command that
  cannot start) requeues the job up to ``retries`` times; the k-th retry waits
  ``retry_backoff * 2^(k-1)`` seconds (at most ``MAX_BACKOFF``) before it may start again.
  A cancellation or a time limit is never retried.
- **dependencies** (``after``: ``[[job, "any"|"ok"], ...]``): the job waits until each named job
  has ended (``any``: in any final state; ``ok``: completed). When an ``ok`` dependency ends
  otherwise, the job can never run and is cancelled, naming the dependency.
- **arrays** (``array_job``, ``array_index``): one submission, one job per index; each task gets
  ``TESSERAE_ARRAY_INDEX`` and ``TESSERAE_ARRAY_JOB_ID`` (the first task's id).
- **hold** (``held``): a waiting job that is held is not scheduled until released.

``blocked`` says why a waiting job may not be scheduled now (None: it may), ``rounds`` leaves such
jobs out of the decision, and ``pending`` shows the reason to the user.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from tesserae.runtime.store import jobs
from tesserae.runtime.store.database import FINAL_STATES, RUNNABLE_STATES, Store

#: Most retries one job may ask for, and the longest wait between two.
MAX_RETRIES = 100
MAX_BACKOFF = 3600.0
#: Most tasks of one array, and the largest index.
MAX_ARRAY = 10000
MAX_ARRAY_INDEX = 1_000_000
#: Most dependencies of one job.
MAX_DEPENDENCIES = 64
#: Longest time limit: a year.
MAX_TIME_LIMIT = 366 * 86400.0

_RANGE = re.compile(r"^(\d{1,7})(?:-(\d{1,7})(?::(\d{1,7}))?)?$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_array(text: str) -> list[int]:
    """``0-99``, ``0-99:2`` (a step), ``1,3,5`` or a mix (``0-3,8``): the sorted task indexes."""
    out: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise ValueError(f"'{part.strip()}' is not an index or a range: use 0-99, 0-99:2 or 1,3,5")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first:
            raise ValueError(f"'{part.strip()}': the range ends before it begins")
        if step < 1:
            raise ValueError(f"'{part.strip()}': the step must be at least 1")
        if last > MAX_ARRAY_INDEX:
            raise ValueError(f"'{part.strip()}': indexes go up to {MAX_ARRAY_INDEX}")
        if (last - first) // step + 1 + len(out) > MAX_ARRAY:
            raise ValueError(f"an array has at most {MAX_ARRAY} tasks")
        out.update(range(first, last + 1, step))
    return sorted(out)


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``30m``, ``2h``, ``1d``, ``1h30m`` or ``HH:MM:SS`` / ``MM:SS``."""
    t = text.strip().lower()
    if ":" in t:
        parts = t.split(":")
        if len(parts) in (2, 3) and all(p.isdigit() for p in parts):
            seconds = 0.0
            for p in parts:
                seconds = seconds * 60 + int(p)
            if seconds > 0:
                return seconds
    else:
        m = _DURATION.match(t)
        if t and m is not None and any(m.groups()):
            seconds = sum(float(v) * _UNITS[u] for v, u in zip(m.groups(), "dhms", strict=True) if v)
            if seconds > 0:
                return seconds
    raise ValueError(f"'{text}' is not a duration: use seconds (90), 30m, 2h, 1d, 1h30m or HH:MM:SS")


def backoff(base: float, attempt: int) -> float:
    """The wait before retry number ``attempt`` (1, 2, ...)."""
    return min(MAX_BACKOFF, base * 2.0 ** (attempt - 1))


def dependencies(row: Mapping[str, Any]) -> list[tuple[int, str]]:
    """The job's dependencies: (job id, ``any`` or ``ok``)."""
    after = row["after"]
    if not after or after == "[]":  # most jobs: no JSON to parse (every waiting job, every decision)
        return []
    return [(int(j), str(kind)) for j, kind in json.loads(after)]


def blocked(row: Mapping[str, Any], states: Mapping[int, str], now: float) -> str | None:
    """Why the waiting job ``row`` may not be scheduled now, or None. ``states``: job id -> state."""
    if row["held"]:
        return f"held (tesserae release {row['id']})"
    for dep, _kind in dependencies(row):
        state = states.get(dep, "completed")
        if state not in FINAL_STATES:
            return f"dependency on job {dep} ({state})"
    if row["retry_at"] is not None and float(row["retry_at"]) > now:
        return (f"retry {row['retries_used']} of {row['retries']}: backoff, "
                f"{float(row['retry_at']) - now:.0f} s left")
    return None


def unsatisfiable(row: Mapping[str, Any], states: Mapping[int, str]) -> str | None:
    """Why the job can never run (an ``ok`` dependency ended otherwise than completed), or None."""
    for dep, kind in dependencies(row):
        state = states.get(dep)
        if kind == "ok" and state in FINAL_STATES and state != "completed":
            return f"dependency never satisfied: job {dep} {state} (it had to complete)"
    return None


def cancel_unsatisfiable(store: Store, rows: list[Any], states: Mapping[int, str], now: float) -> bool:
    """Cancel every waiting job among ``rows`` whose dependency can no longer be met (in id order, so a
    chain of them goes at once); ``states``: every job's state, by id. True when one was cancelled."""
    candidates = [r for r in rows if r["state"] in RUNNABLE_STATES and r["after"] != "[]"]
    if not candidates:
        return False
    states = dict(states)
    doomed = []
    for r in candidates:
        why = unsatisfiable(r, states)
        if why is not None:
            states[int(r["id"])] = "cancelled"
            doomed.append((int(r["id"]), why))
    if not doomed:
        return False
    jobs.cancel_waiting(store, doomed, now)
    return True


def retry(job: Mapping[str, Any], state: str, outcome: str, reason: str, end: float
          ) -> tuple[str, str, float | None]:
    """(state, reason, retry time) after a run of ``job`` ended as ``outcome``: a failure with retries
    left requeues the job until its backoff has passed."""
    retries, used = int(job["retries"]), int(job["retries_used"])
    if outcome != "failed" or job["cancel_requested"] or used >= retries:
        return state, reason, None
    delay = backoff(float(job["retry_backoff"]), used + 1)
    return "queued", f"retry {used + 1} of {retries} after {delay:g} s; the run {reason}", end + delay


def timed_out(executed: float, held: float, limit: float | None) -> bool:
    """Whether a job that ran ``executed`` seconds before its current run, and ``held`` in it, is past its limit."""
    return limit is not None and executed + held >= float(limit)
