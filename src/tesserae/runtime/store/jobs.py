"""Queries on the ``jobs`` table (and each job's ``events``): one job, the lists the API and the
controller read, and every change to a job that is not a run's (``allocations`` has those).

Rows are ``sqlite3.Row``: read by column name. Each write is one transaction (joining the caller's
when there is one) and records its event in it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from tesserae.runtime.store.accounting import window_filter
from tesserae.runtime.store.database import ACTIVE_STATES, RUNNABLE_STATES, Store
from tesserae.runtime.store.job_ids import JobIds

Row = Any  # a ``sqlite3.Row``: indexed by column name

_WAITING = f"state IN ({','.join('?' * len(RUNNABLE_STATES))}) AND cancel_requested=0"


# ---------------------------------------------------------------------- one job
def get(store: Store, job_id: int) -> Row | None:
    """The job's row, or None when there is no such job."""
    return store.one("SELECT * FROM jobs WHERE id=?", (job_id,))


def owner(store: Store, job_id: int) -> str | None:
    """The user the job belongs to, or None when there is no such job."""
    row = store.one("SELECT user FROM jobs WHERE id=?", (job_id,))
    return None if row is None else str(row["user"])


def by_idempotency_key(store: Store, user: str, key: str) -> Row | None:
    """The job ``user`` submitted with this ``Idempotency-Key`` (an array's first task), if any."""
    return store.one("SELECT * FROM jobs WHERE user=? AND idempotency_key=?", (user, key))


def array_tasks(store: Store, array_job: int) -> list[int]:
    """The ids of an array's tasks, in order."""
    return [int(r["id"]) for r in store.query("SELECT id FROM jobs WHERE array_job=? ORDER BY id", (array_job,))]


def events(store: Store, job_id: int) -> list[Row]:
    """What happened to the job, in order."""
    return store.query("SELECT * FROM events WHERE job_id=? ORDER BY id", (job_id,))


# ---------------------------------------------------------------------- lists
def listing(store: Store, *, user: str | None, state: str | None, since: float | None, until: float | None,
            limit: int, before: int | None = None) -> list[Row]:
    """The most recent ``limit`` jobs, newest first: ``user``'s only when given, in ``state`` when given,
    whose life overlaps ``[since, until]`` (``accounting.window_filter``), with an id below ``before``
    when given (the next page: ``before`` is the last page's oldest id). Indexed: the newest rows of
    ``jobs_user_state``, ``jobs_user`` or ``jobs_state``, or the id's own order, never the whole table."""
    where = [(test, value) for test, value in (("user=?", user), ("state=?", state), ("id<?", before))
             if value is not None]
    window, window_params = window_filter(since, until)
    sql = "SELECT * FROM jobs WHERE 1=1" + "".join(f" AND {test}" for test, _ in where) + window
    return store.query(sql + " ORDER BY id DESC LIMIT ?", (*(value for _, value in where), *window_params, limit))


def states_of(store: Store, ids: Sequence[int]) -> dict[int, str]:
    """The state of each of the jobs ``ids`` that exists, by id (chunked: SQLite bounds a statement's
    parameters)."""
    out: dict[int, str] = {}
    unique = sorted(set(ids))
    for at in range(0, len(unique), 500):
        chunk = unique[at:at + 500]
        out.update((int(r["id"]), str(r["state"])) for r in store.query(
            f"SELECT id, state FROM jobs WHERE id IN ({','.join('?' * len(chunk))})", chunk))
    return out


def change_mark(store: Store) -> int:
    """The position of the latest entry of the change log (``job_changes``; 0 when empty)."""
    row = store.one("SELECT MAX(seq) FROM job_changes")
    return int(row[0]) if row is not None and row[0] is not None else 0


def changed_since(store: Store, mark: int) -> tuple[int, list[int]]:
    """The change log's position now and the ids of the jobs updated after ``mark`` (a running job's own
    updates excepted: ``database._CHANGE_LOG``)."""
    rows = store.query("SELECT seq, job_id FROM job_changes WHERE seq > ? ORDER BY seq", (mark,))
    return (int(rows[-1]["seq"]) if rows else mark), sorted({int(r["job_id"]) for r in rows})


def forget_changes(store: Store, mark: int) -> None:
    """Drop the change log's entries up to ``mark`` (read by the controller, the log's only reader)."""
    store.execute("DELETE FROM job_changes WHERE seq <= ?", (mark,))


def rows_of(store: Store, ids: Sequence[int]) -> list[Row]:
    """The rows of the jobs ``ids`` that exist, in id order."""
    out: list[Row] = []
    unique = sorted(set(ids))
    for at in range(0, len(unique), 500):
        chunk = unique[at:at + 500]
        out.extend(store.query(f"SELECT * FROM jobs WHERE id IN ({','.join('?' * len(chunk))}) ORDER BY id", chunk))
    return out


def after_id(store: Store, last: int) -> list[Row]:
    """The jobs with an id above ``last``, in id order (the ones submitted since)."""
    return store.query("SELECT * FROM jobs WHERE id > ? ORDER BY id", (last,))


def every_job(store: Store) -> list[Row]:
    """Every job ever submitted, in id order (the controller's table: row i is the i-th job)."""
    return store.query("SELECT * FROM jobs ORDER BY id")


def states(store: Store) -> dict[int, str]:
    """Every job's state, by id."""
    return {int(r["id"]): str(r["state"]) for r in store.query("SELECT id, state FROM jobs")}


#: The columns of a waiting job that its place in the queue and the queue's views need (``waiting``).
_WAITING_COLUMNS = ("id, user, name, state, num_gpus, submit_time, last_stop, attained, executed, preemptions, "
                    "queue, held, after, retry_at, retries, retries_used, gpu_type, cancel_requested, node")


def waiting(store: Store, chunk: int = 2000) -> list[Row]:
    """The jobs waiting to run (queued or preempted, not being cancelled), in id order: the columns of
    ``_WAITING_COLUMNS`` only, read ``chunk`` rows at a time (``jobs_state``), so that 30,000 of them
    never hold the store for the other requests' reads at once."""
    out: list[Row] = []
    last = 0
    while True:
        part = store.query(f"SELECT {_WAITING_COLUMNS} FROM jobs WHERE {_WAITING} AND id > ? ORDER BY id LIMIT ?",
                           (*RUNNABLE_STATES, last, chunk))
        out.extend(part)
        if len(part) < chunk:
            return out
        last = int(part[-1]["id"])


def active_queues(store: Store, *, cancelling: bool = True) -> list[tuple[int, str, str]]:
    """(id, queue, user) of every active job (queued, preempted or running); without the ones being
    cancelled when ``cancelling`` is False."""
    sql = f"SELECT id, queue, user FROM jobs WHERE state IN ({','.join('?' * len(ACTIVE_STATES))})"
    if not cancelling:
        sql += " AND cancel_requested=0"
    return [(int(r["id"]), str(r["queue"]), str(r["user"])) for r in store.query(sql, ACTIVE_STATES)]


def count_in(store: Store, in_states: Sequence[str], user: str | None = None) -> int:
    """How many jobs are in one of ``in_states``: ``user``'s, or everyone's (``jobs_user_state``, ``jobs_state``)."""
    marks = ",".join("?" * len(in_states))
    if user is None:
        row = store.one(f"SELECT COUNT(*) FROM jobs WHERE state IN ({marks})", tuple(in_states))
    else:
        row = store.one(f"SELECT COUNT(*) FROM jobs WHERE user=? AND state IN ({marks})", (user, *in_states))
    return int(row[0]) if row is not None else 0


def briefs(store: Store, ids: Sequence[int]) -> dict[int, Row]:
    """Id, name, user, state and submission time of each of the jobs ``ids`` that exists, by id."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    return {int(r["id"]): r for r in store.query(
        f"SELECT id, name, user, state, submit_time FROM jobs WHERE id IN ({marks})", list(ids))}


# ---------------------------------------------------------------------- submission
class KeyTaken(Exception):
    """Another submission of the same user with the same ``Idempotency-Key`` was stored first."""


def insert_jobs(store: Store, ids_source: JobIds, columns: dict[str, Any], indexes: list[int] | None, *,
                same_task_as: Row | None = None) -> list[int]:
    """Insert one job, or one per array index (the first task's id names the array; only it keeps the
    idempotency key), in one transaction (the caller's, when there is one). Each id is claimed
    (``job_ids``: reserved, its folder made) before it is used, and the folders are durable before
    the transaction commits. ``same_task_as``: an ended job whose array task the new one is again
    (its ``array_job`` and ``array_index``: a resubmission). ``KeyTaken`` when the submission's
    idempotency key was stored meanwhile by a concurrent one."""
    try:
        with store.tx():
            ids = _insert(store, ids_source, columns, indexes)
            if same_task_as is not None and same_task_as["array_index"] is not None:
                store.execute("UPDATE jobs SET array_job=?, array_index=? WHERE id=?",
                              (same_task_as["array_job"], same_task_as["array_index"], ids[0]))
            ids_source.sync()
    except sqlite3.IntegrityError as e:
        if columns.get("idempotency_key") is None:
            raise
        raise KeyTaken(f"Idempotency-Key {columns['idempotency_key']!r} of {columns['user']}") from e
    return ids


def _insert(store: Store, ids_source: JobIds, columns: dict[str, Any], indexes: list[int] | None) -> list[int]:
    names = ", ".join(columns)
    sql = (f"INSERT INTO jobs (id, {names}, array_job, array_index) VALUES (?, {', '.join('?' * len(columns))}, "
           "?, ?)")
    ids: list[int] = []
    for index in indexes if indexes is not None else [None]:
        values = dict(columns)
        if ids:
            values["idempotency_key"] = None
        job_id = ids_source.claim(max(store.next_job_id(), ids[-1] + 1 if ids else 1))
        store.execute(sql, (job_id, *values.values(), None, index))
        if index is not None:
            store.execute("UPDATE jobs SET array_job=? WHERE id=?", (ids[0] if ids else job_id, job_id))
        store.event(job_id, "submitted", {"by": columns["user"], "gpus": columns["num_gpus"],
                                          **({"queue": columns["queue"]} if columns.get("queue") else {}),
                                          **({} if index is None else {"array_index": index})},
                    columns["submit_time"])
        ids.append(job_id)
    return ids


# ---------------------------------------------------------------------- a job's life outside its runs
def hold(store: Store, job_id: int, by: str, now: float) -> str:
    """Hold the waiting job ``job_id`` (an event when it was not held yet). Returns the job's state: one
    that is not waiting means nothing was done."""
    with store.tx() as c:
        row = c.execute("SELECT state, held FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row["state"] in RUNNABLE_STATES and not row["held"]:
            c.execute("UPDATE jobs SET held=1 WHERE id=?", (job_id,))
            store.event(job_id, "held", {"by": by}, now)
        return str(row["state"])


def release(store: Store, job_id: int, by: str) -> bool:
    """Release the held waiting job ``job_id``; False (nothing done) when it is not one."""
    with store.tx() as c:
        row = c.execute("SELECT state, held FROM jobs WHERE id=?", (job_id,)).fetchone()
        if not row["held"] or row["state"] not in RUNNABLE_STATES:
            return False
        c.execute("UPDATE jobs SET held=0 WHERE id=?", (job_id,))
        store.event(job_id, "released", {"by": by})
    return True


def cancel(store: Store, job_id: int, by: str, now: float) -> str:
    """Cancel a job: a waiting one at once (``cancelled``); a running one is marked (``cancel_requested``)
    for the controller to stop. Returns its state before: ``running`` means a stop is wanted."""
    with store.tx() as c:
        state = str(c.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()["state"])
        if state in RUNNABLE_STATES:
            c.execute("UPDATE jobs SET state='cancelled', finish_time=?, reason=? WHERE id=?",
                      (now, f"cancelled by {by}", job_id))
            store.event(job_id, "cancelled", {"by": by}, now)
        elif state == "running":
            c.execute("UPDATE jobs SET cancel_requested=1, reason=? WHERE id=?", (f"cancelled by {by}", job_id))
            store.event(job_id, "cancel-requested", {"by": by}, now)
    return state


def cancel_waiting(store: Store, doomed: list[tuple[int, str]], now: float) -> None:
    """Cancel the waiting jobs ``doomed`` (id, why) whose dependency can never be met."""
    with store.tx() as c:
        for job_id, why in doomed:
            c.execute("UPDATE jobs SET state='cancelled', finish_time=?, reason=? WHERE id=? "
                      "AND state IN ('queued', 'preempted')", (now, why, job_id))
            store.event(job_id, "cancelled", {"by": "dependency", "reason": why}, now)


def record_progress(store: Store, reports: list[tuple[float, float | None, int]]) -> None:
    """The progress the running jobs reported: (iterations done, total or None, job id)."""
    if reports:
        with store.tx() as c:
            c.executemany("UPDATE jobs SET progress=?, total_reported=COALESCE(?, total_reported) WHERE id=?",
                          reports)


def running_time_limits(store: Store) -> dict[int, tuple[float, float]]:
    """(executed seconds before the current run, time limit) of each running job that has a limit and is
    not being cancelled, by id."""
    return {int(r["id"]): (float(r["executed"]), float(r["time_limit"])) for r in store.query(
        "SELECT id, executed, time_limit FROM jobs WHERE state='running' AND time_limit IS NOT NULL "
        "AND cancel_requested=0")}
