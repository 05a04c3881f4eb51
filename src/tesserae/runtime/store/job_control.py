"""Queries of job control in bulk and of changing a waiting job: which jobs a filter selects
(``tesserae cancel --user/--name/--state/--queue``) and the update of a waiting job's request
(``tesserae update``), each write one transaction with its event.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tesserae.runtime.store.database import RUNNABLE_STATES, Store

Row = Any  # a ``sqlite3.Row``

#: The columns ``update_waiting`` may change.
UPDATABLE = ("time_limit", "num_gpus", "queue", "after", "node")
#: What else makes a job one an action applies to (beyond its state): not being cancelled already,
#: not held yet, held.
_STILL = {"cancel": "cancel_requested=0", "hold": "held=0 AND cancel_requested=0",
          "release": "held=1 AND cancel_requested=0"}


def select(store: Store, *, ids: Sequence[int] | None, user: str | None, name: str | None,
           states: Sequence[str], queue: str | None, limit: int, still: str | None = None) -> list[Row]:
    """At most ``limit`` jobs, in id order, that are among ``ids`` (when given), in one of ``states``
    and, for each filter given, with that user, name or queue; with ``still`` (an action: cancel,
    hold, release), only those that action would change."""
    where = [f"state IN ({','.join('?' * len(states))})"]
    if still is not None:
        where.append(_STILL[still])
    params: list[Any] = list(states)
    for column, value in (("user", user), ("name", name), ("queue", queue)):
        if value is not None:
            where.append(f"{column}=?")
            params.append(value)
    if ids is not None:
        where.append(f"id IN ({','.join('?' * len(ids))})")
        params.extend(ids)
    sql = f"SELECT * FROM jobs WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
    return store.query(sql, (*params, limit))


def some(store: Store, ids: Sequence[int]) -> list[Row]:
    """The rows of those of ``ids`` that exist, in id order."""
    if not ids:
        return []
    return store.query(f"SELECT * FROM jobs WHERE id IN ({','.join('?' * len(ids))}) ORDER BY id", list(ids))


def dependencies_of_waiting(store: Store) -> dict[int, list[int]]:
    """The jobs each waiting job depends on (``after``, either kind), by id: the graph ``update`` keeps
    free of cycles."""
    return {int(r["id"]): [int(j) for j, _ in json.loads(r["after"])] for r in store.query(
        f"SELECT id, after FROM jobs WHERE state IN ({','.join('?' * len(RUNNABLE_STATES))}) AND after != '[]'",
        RUNNABLE_STATES)}


def update_waiting(store: Store, job_id: int, changes: dict[str, Any], by: str, now: float) -> str | None:
    """Set ``changes`` (columns of ``UPDATABLE``) on the job if it still waits (queued or preempted, not
    being cancelled); None when done, else the state that stopped it (``cancelling`` for a waiting job
    being cancelled)."""
    bad = set(changes) - set(UPDATABLE)
    if bad:
        raise ValueError(f"not updatable: {sorted(bad)}")
    with store.tx() as c:
        row = c.execute("SELECT state, cancel_requested FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row["state"] not in RUNNABLE_STATES:
            return str(row["state"])
        if row["cancel_requested"]:
            return "cancelling"
        sets = ", ".join(f"{column}=?" for column in changes)
        c.execute(f"UPDATE jobs SET {sets} WHERE id=?", (*changes.values(), job_id))
        store.event(job_id, "updated", {"by": by, **{k: json.loads(v) if k == "after" else v
                                                      for k, v in changes.items()}}, now)
    return None
