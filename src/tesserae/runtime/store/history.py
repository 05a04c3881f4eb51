"""What the cluster looked like over a past window: the runs and the jobs alive in it, for the
cluster-over-time chart (``runtime.api.history``)."""

from __future__ import annotations

from typing import Any

from tesserae.runtime.store.database import Store

Row = Any  # a ``sqlite3.Row``: indexed by column name


def runs_overlapping(store: Store, since: float) -> list[Row]:
    """Every run not ended by ``since``: ``job_id``, ``start_time``, ``end_time`` (None while open), ``gpus``
    (JSON). A run recorded but never started ended at its start (zero length)."""
    return store.query("SELECT job_id, start_time, end_time, gpus FROM allocations "
                       "WHERE end_time IS NULL OR end_time > ? ORDER BY start_time, id", (since,))


def lost_runs_since(store: Store, since: float) -> list[Row]:
    """The runs that ended ``lost`` (their processes vanished) after ``since``: ``gpus`` (JSON), ``end_time``."""
    return store.query("SELECT gpus, end_time FROM allocations WHERE outcome='lost' AND end_time > ?", (since,))


def jobs_alive_since(store: Store, since: float) -> list[Row]:
    """Every job not finished by ``since``: ``id``, ``submit_time``, ``finish_time`` (None while active)."""
    return store.query("SELECT id, submit_time, finish_time FROM jobs WHERE finish_time IS NULL OR finish_time > ? "
                       "ORDER BY id", (since,))
