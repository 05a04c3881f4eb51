"""Counts over the whole store: what ``/v1/cluster``, ``/metrics`` and the tenant queues' view show."""

from __future__ import annotations

from dataclasses import dataclass

from tesserae.runtime.store.database import ACTIVE_STATES, JOB_STATES, RUNNABLE_STATES, Store


def jobs_by_state(store: Store) -> dict[str, int]:
    """How many jobs are in each state (every state named, zero included)."""
    counts = {s: 0 for s in JOB_STATES}
    for r in store.query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state"):
        counts[r["state"]] = int(r["n"])
    return counts


@dataclass(frozen=True, slots=True)
class Totals:
    """Counters since the store was made."""

    jobs: int  # ever submitted
    preemptions: int
    migrations: int
    runs: int  # processes started (first starts and resumptions)
    completed: int
    completed_jct_sum: float  # finish - submit, summed over the completed jobs


def totals(store: Store) -> Totals:
    jobs = store.one("SELECT COUNT(*) AS n, COALESCE(SUM(preemptions), 0) AS p, COALESCE(SUM(migrations), 0) AS m "
                     "FROM jobs")
    runs = store.one("SELECT COUNT(*) AS n FROM allocations WHERE pid IS NOT NULL")
    done = store.one("SELECT COUNT(*) AS n, COALESCE(SUM(finish_time - submit_time), 0) AS s FROM jobs "
                     "WHERE state='completed'")
    return Totals(int(jobs["n"]), int(jobs["p"]), int(jobs["m"]), int(runs["n"]), int(done["n"]), float(done["s"]))


def active_by_queue(store: Store) -> dict[str, dict[str, int]]:
    """Active jobs per stored queue name: ``waiting`` (queued or preempted) and ``running``."""
    marks = ",".join("?" * len(ACTIVE_STATES))
    out: dict[str, dict[str, int]] = {}
    for r in store.query(f"SELECT queue, state, COUNT(*) AS n FROM jobs WHERE state IN ({marks}) "
                         "GROUP BY queue, state", ACTIVE_STATES):
        key = "waiting" if r["state"] in RUNNABLE_STATES else "running"
        slot = out.setdefault(str(r["queue"]), {"waiting": 0, "running": 0})
        slot[key] += int(r["n"])
    return out
