"""Queries on the ``allocations`` table: the runs of jobs (one row a run), and their write-ahead records.

A run is one start of a job on some GPUs. The controller records each step of a run here before it
acts (``controller.runs``): ``record_start`` (the job ``running``, the run ``starting``), then
``record_spawned`` (its pid: ``running``), ``record_stop`` (``stopping``, with its deadline) and
``record_end`` (``ended``, and what that makes of the job), each in one transaction with its event;
``unstart`` undoes a start whose process never came to be.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tesserae.runtime.store.database import Store

Row = Any  # a ``sqlite3.Row``: indexed by column name


# ---------------------------------------------------------------------- the write-ahead records
@dataclass(frozen=True, slots=True)
class Started:
    """A run recorded as ``starting``: its job's row (as it is now), its id and folder, and its event."""

    job: Row
    alloc_id: int
    run_dir: Path
    kind: str  # ``started`` (the job's first run) or ``resumed``


def record_start(store: Store, job_id: int, gpus: tuple[int, ...], partner: int | None, strategy: str | None,
                 now: float, run_dir_of: Callable[[int, int], Path]) -> Started | None:
    """The job goes ``running`` and a run of it is recorded ``starting`` (its folder: ``run_dir_of(job, run)``).
    None when the job no longer waits (cancelled, or finished while the plan was applied)."""
    with store.tx() as c:
        cur = c.execute("UPDATE jobs SET state='running', first_start=COALESCE(first_start, ?), last_start=?, "
                        "reason='' WHERE id=? AND state IN ('queued', 'preempted') AND cancel_requested=0",
                        (now, now, job_id))
        if cur.rowcount != 1:
            return None
        job = c.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        alloc_id = int(c.execute(
            "INSERT INTO allocations (job_id, gpus, partner, strategy, phase, start_time, run_dir) "
            "VALUES (?, ?, ?, ?, 'starting', ?, '')",
            (job_id, json.dumps(list(gpus)), partner, strategy, now)).lastrowid)
        run_dir = run_dir_of(job_id, alloc_id)
        c.execute("UPDATE allocations SET run_dir=? WHERE id=?", (str(run_dir), alloc_id))
        kind = "resumed" if job["first_start"] != now else "started"
        store.event(job_id, kind, {"allocation": alloc_id, "gpus": list(gpus)}, now)
    return Started(job, alloc_id, run_dir, kind)


def record_spawned(store: Store, alloc_id: int, pid: int | None, ticks: int | None) -> None:
    """The run's process exists (or was adopted): its identity, and the run is ``running``."""
    store.execute("UPDATE allocations SET pid=?, pid_start=?, phase='running' WHERE id=?", (pid, ticks, alloc_id))


def record_stop(store: Store, alloc_id: int, job_id: int, why: str, deadline: float, event: str, now: float
                ) -> None:
    """The run is ``stopping`` (``why``: preempt, migrate, cancel, timeout) until ``deadline``."""
    with store.tx():
        store.execute("UPDATE allocations SET phase='stopping', stop_reason=?, stop_deadline=? WHERE id=?",
                      (why, deadline, alloc_id))
        store.event(job_id, event, {"allocation": alloc_id}, now)


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a run ended and what that makes of its job (``controller.runs.RunBook.close``)."""

    alloc_id: int
    job_id: int
    end: float
    code: int | None  # the exit code; None: lost
    outcome: str  # completed, failed, preempted, migrated, requeued, lost...
    state: str  # the job's new state
    reason: str
    held: float  # seconds the run held its GPUs
    num_gpus: int
    progress: float | None  # iterations the job reported last (None: none)
    total: float | None
    final: bool  # the job has ended
    retry_at: float | None  # a retry waits until then (``lifecycle.retry``)
    attempt: int  # the number of that retry


def record_end(store: Store, e: RunEnd) -> None:
    """The run is ``ended``; the job's state, service, counters and events follow, in one transaction."""
    with store.tx() as c:
        c.execute("UPDATE allocations SET phase='ended', end_time=?, exit_code=?, outcome=? WHERE id=?",
                  (e.end, e.code, e.outcome, e.alloc_id))
        c.execute(
            "UPDATE jobs SET state=?, attained=attained+?, executed=executed+?, last_stop=?, "
            "progress=COALESCE(?, progress), total_reported=COALESCE(?, total_reported), exit_code=?, "
            "reason=?, finish_time=?, preemptions=preemptions+?, migrations=migrations+?, "
            "requeues=requeues+?, retries_used=retries_used+?, retry_at=COALESCE(?, retry_at) WHERE id=?",
            (e.state, e.held * e.num_gpus, e.held, e.end, e.progress, e.total, e.code, e.reason,
             e.end if e.final else None, int(e.outcome == "preempted"), int(e.outcome == "migrated"),
             int(e.outcome == "requeued"), int(e.retry_at is not None), e.retry_at, e.job_id))
        store.event(e.job_id, e.outcome, {"allocation": e.alloc_id, "exit_code": e.code, "seconds": round(e.held, 3)},
                    e.end)
        if e.retry_at is not None:
            store.event(e.job_id, "retrying", {"at": e.retry_at, "attempt": e.attempt}, e.end)


def unstart(store: Store, alloc_id: int, job_id: int) -> None:
    """A run recorded ``starting`` whose process never came to be: ended as ``not-started``, its job
    waiting again (``preempted`` when an earlier run of it ran, else ``queued`` as if never started)."""
    with store.tx() as c:
        c.execute("UPDATE allocations SET phase='ended', end_time=start_time, outcome='not-started' "
                  "WHERE id=?", (alloc_id,))
        ran = c.execute("SELECT COUNT(*) FROM allocations WHERE job_id=? AND pid IS NOT NULL",
                        (job_id,)).fetchone()[0]
        if ran:
            c.execute("UPDATE jobs SET state='preempted' WHERE id=? AND state='running'", (job_id,))
        else:
            c.execute("UPDATE jobs SET state='queued', first_start=NULL, last_start=NULL "
                      "WHERE id=? AND state='running'", (job_id,))
        store.event(job_id, "requeued", {"allocation": alloc_id, "why": "never started"})


def move(store: Store, moved: Iterable[tuple[int, tuple[int, ...]]]) -> None:
    """Runs whose GPUs have new ids in the executor's new view: (run id, GPUs)."""
    rows = [(json.dumps(list(gpus)), alloc_id) for alloc_id, gpus in moved]
    if rows:
        with store.tx() as c:
            c.executemany("UPDATE allocations SET gpus=? WHERE id=?", rows)


# ---------------------------------------------------------------------- reads
def unended(store: Store) -> list[Row]:
    """Every run not recorded as ended (starting, running or stopping), in id order."""
    return store.query("SELECT * FROM allocations WHERE phase != 'ended' ORDER BY id")


def unended_by_job(store: Store) -> dict[int, Row]:
    """The run not recorded as ended of each job that has one, by job id."""
    return {int(a["job_id"]): a for a in unended(store)}


def unended_of(store: Store, job_ids: list[int]) -> dict[int, Row]:
    """The run not recorded as ended of each of ``job_ids`` that has one, by job id (``allocations_open``)."""
    out: dict[int, Row] = {}
    for at in range(0, len(job_ids), 500):
        chunk = job_ids[at:at + 500]
        for a in store.query(f"SELECT * FROM allocations WHERE job_id IN ({','.join('?' * len(chunk))}) "
                             "AND phase != 'ended' ORDER BY id", chunk):
            out[int(a["job_id"])] = a
    return out


def current(store: Store, job_id: int) -> Row | None:
    """The job's run that has not ended, if any."""
    return store.one("SELECT * FROM allocations WHERE job_id=? AND phase != 'ended' ORDER BY id DESC LIMIT 1",
                     (job_id,))


def of_job(store: Store, job_id: int) -> list[Row]:
    """Every run of the job, in order."""
    return store.query("SELECT * FROM allocations WHERE job_id=? ORDER BY id", (job_id,))


def latest_id(store: Store, job_id: int) -> int | None:
    """The id of the job's latest run (None: it has not run)."""
    row = store.one("SELECT MAX(id) AS id FROM allocations WHERE job_id=?", (job_id,))
    return None if row is None or row["id"] is None else int(row["id"])


def is_run_of(store: Store, alloc_id: int, job_id: int) -> bool:
    """Whether run ``alloc_id`` is one of job ``job_id``'s."""
    return store.one("SELECT 1 FROM allocations WHERE id=? AND job_id=?", (alloc_id, job_id)) is not None


def cancelling(store: Store) -> list[int]:
    """The running runs whose job is being cancelled."""
    return [int(r["id"]) for r in store.query("SELECT a.id FROM allocations a JOIN jobs j ON j.id = a.job_id "
                                              "WHERE a.phase='running' AND j.cancel_requested=1")]


def gpus_in_use(store: Store) -> set[int]:
    """The GPUs (ids in the executor's view) held by runs that have not ended."""
    used: set[int] = set()
    for a in store.query("SELECT gpus FROM allocations WHERE phase != 'ended'"):
        used.update(json.loads(a["gpus"]))
    return used


def unended_with_owner(store: Store) -> list[Row]:
    """The runs not ended, with their job's user and name: ``job_id``, ``gpus``, ``phase``, ``user``, ``name``."""
    return store.query("SELECT a.job_id, a.gpus, a.phase, j.user, j.name FROM allocations a "
                       "JOIN jobs j ON j.id = a.job_id WHERE a.phase != 'ended'")


def ran_since(store: Store, since: float) -> list[Row]:
    """The runs that started a process and had not ended by ``since``: ``start_time``, ``end_time`` (None
    while running), ``gpus`` and the job's ``user``."""
    return store.query("SELECT a.start_time, a.end_time, a.gpus, j.user FROM allocations a JOIN jobs j "
                       "ON j.id = a.job_id WHERE a.pid IS NOT NULL AND (a.end_time IS NULL OR a.end_time > ?)",
                       (since,))
