"""The store's query functions on their own (``runtime/store``): a submission, a run's write-ahead records
from start to end, hold/release/cancel, and a taken idempotency key. The server tests drive the same
functions end to end; these pin what each one writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tesserae.runtime.job.paths import JobPaths
from tesserae.runtime.store import allocations, counts, jobs
from tesserae.runtime.store.allocations import RunEnd
from tesserae.runtime.store.database import Store
from tesserae.runtime.store.job_ids import JobIds


def _columns(user: str = "ann", key: str | None = None, t: float = 100.0) -> dict[str, Any]:
    return {"user": user, "name": "j", "job_type": "generic", "num_gpus": 2, "command": '["true"]',
            "state": "queued", "submit_time": t, "last_stop": t, "idempotency_key": key, "request_hash": "h",
            "queue": ""}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "t.db")
    yield s
    s.close()


@pytest.fixture
def ids(tmp_path: Path) -> JobIds:
    return JobIds(JobPaths(tmp_path, tmp_path / "jobs", lambda _: None), lambda _: None)


def _kinds(store: Store, job_id: int) -> list[str]:
    return [e["kind"] for e in jobs.events(store, job_id)]


def test_an_array_is_one_row_per_task_and_only_the_first_keeps_the_key(store: Store, ids: JobIds) -> None:
    first, second, third = jobs.insert_jobs(store, ids, _columns(key="k1"), [0, 4, 8])
    assert jobs.array_tasks(store, first) == [first, second, third]
    assert jobs.by_idempotency_key(store, "ann", "k1")["id"] == first
    assert [jobs.get(store, j)["array_index"] for j in (first, second, third)] == [0, 4, 8]
    assert _kinds(store, second) == ["submitted"]
    with pytest.raises(jobs.KeyTaken):
        jobs.insert_jobs(store, ids, _columns(key="k1"), None)
    assert counts.totals(store).jobs == 3  # the refused one left nothing behind


def test_a_run_from_start_to_end_is_recorded_before_each_step(store: Store, ids: JobIds, tmp_path: Path) -> None:
    (job_id,) = jobs.insert_jobs(store, ids, _columns(), None)
    started = allocations.record_start(store, job_id, (0, 1), None, None, 200.0, lambda j, r: tmp_path / f"{j}-{r}")
    assert started is not None and started.kind == "started" and started.run_dir == tmp_path / f"{job_id}-1"
    assert jobs.get(store, job_id)["state"] == "running" and allocations.current(store, job_id)["phase"] == "starting"
    assert allocations.record_start(store, job_id, (2,), None, None, 201.0, lambda j, r: tmp_path) is None  # runs
    allocations.record_spawned(store, started.alloc_id, 4242, 7)
    allocations.move(store, [(started.alloc_id, (2, 3))])
    assert allocations.gpus_in_use(store) == {2, 3}
    allocations.record_stop(store, started.alloc_id, job_id, "preempt", 260.0, "preempting", 230.0)
    assert allocations.current(store, job_id)["phase"] == "stopping"
    allocations.record_end(store, RunEnd(started.alloc_id, job_id, 250.0, 0, "preempted", "preempted", "", 50.0, 2,
                                         12.0, None, False, None, 1))
    row = jobs.get(store, job_id)
    assert (row["state"], row["attained"], row["executed"], row["preemptions"], row["progress"]) == \
        ("preempted", 100.0, 50.0, 1, 12.0)
    assert allocations.current(store, job_id) is None and allocations.latest_id(store, job_id) == started.alloc_id
    assert json.loads(allocations.of_job(store, job_id)[0]["gpus"]) == [2, 3]
    assert _kinds(store, job_id) == ["submitted", "started", "preempting", "preempted"]
    again = allocations.record_start(store, job_id, (0,), None, None, 300.0, lambda j, r: tmp_path)
    assert again is not None and again.kind == "resumed"
    allocations.unstart(store, again.alloc_id, job_id)  # never got a process: waits again, as preempted
    assert jobs.get(store, job_id)["state"] == "preempted" and allocations.unended(store) == []


def test_hold_release_and_cancel(store: Store, ids: JobIds) -> None:
    waiting, running = jobs.insert_jobs(store, ids, _columns(), [0, 1])
    assert jobs.hold(store, waiting, "ann", 10.0) == "queued" and jobs.get(store, waiting)["held"] == 1
    assert jobs.hold(store, waiting, "ann", 11.0) == "queued" and _kinds(store, waiting).count("held") == 1
    assert jobs.release(store, waiting, "ann") and not jobs.release(store, waiting, "ann")
    allocations.record_start(store, running, (0,), None, None, 20.0, lambda j, r: Path("/nonexistent"))
    assert jobs.hold(store, running, "ann", 21.0) == "running" and jobs.get(store, running)["held"] == 0
    assert jobs.cancel(store, running, "bob", 22.0) == "running"  # a stop is wanted: the controller's
    assert jobs.get(store, running)["cancel_requested"] == 1 and jobs.get(store, running)["state"] == "running"
    assert jobs.cancel(store, waiting, "bob", 23.0) == "queued"
    assert jobs.get(store, waiting)["state"] == "cancelled" and jobs.waiting(store) == []
    assert counts.jobs_by_state(store)["cancelled"] == 1 and counts.jobs_by_state(store)["running"] == 1


# ---------------------------------------------------------------------- issue 27, point 6: indexed reads
def _plan(store: Store, sql: str, params: tuple[Any, ...]) -> str:
    return " | ".join(str(r[3]) for r in store.query("EXPLAIN QUERY PLAN " + sql, params))


def test_an_old_store_gets_the_hot_path_indexes_when_opened(tmp_path: Path) -> None:
    """A state folder written before the indexes existed gets them at the next open (the migration)."""
    path = tmp_path / "old.db"
    s = Store(path)
    for name in ("jobs_user_state", "jobs_array", "allocations_open"):
        s.execute(f"DROP INDEX {name}")
    s.close()
    s = Store(path)
    try:
        names = {r["name"] for r in s.query("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"jobs_user_state", "jobs_array", "allocations_open"} <= names
        # One user's waiting jobs, newest first, and a job's open run: read through an index, not a scan.
        assert "SCAN jobs" not in _plan(s, "SELECT * FROM jobs WHERE user=? AND state=? ORDER BY id DESC LIMIT 50",
                                        ("ann", "queued"))
        assert "allocations_open" in _plan(s, "SELECT * FROM allocations WHERE job_id IN (?, ?) AND phase != 'ended'",
                                           (1, 2))
    finally:
        s.close()


def test_listing_pages_by_cursor_and_counts_read_by_state(store: Store, ids: JobIds) -> None:
    made = [jobs.insert_jobs(store, ids, _columns(user="ann" if i % 2 else "bob", t=100.0 + i), None)[0]
            for i in range(7)]
    ann = [j for i, j in enumerate(made) if i % 2]
    first = jobs.listing(store, user="ann", state=None, since=None, until=None, limit=2)
    assert [int(r["id"]) for r in first] == ann[::-1][:2]  # newest first
    rest = jobs.listing(store, user="ann", state=None, since=None, until=None, limit=2, before=int(first[-1]["id"]))
    assert [int(r["id"]) for r in rest] == ann[::-1][2:]
    assert jobs.count_in(store, ("queued",), "ann") == len(ann)
    assert jobs.count_in(store, ("queued", "preempted")) == 7
    jobs.cancel(store, made[0], "bob", 200.0)
    assert jobs.count_in(store, ("queued", "preempted")) == 6
    assert jobs.states_of(store, [made[0], made[1], 999]) == {made[0]: "cancelled", made[1]: "queued"}
