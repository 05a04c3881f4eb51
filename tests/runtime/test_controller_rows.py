"""The controller reads only what changed between decisions (``controller.job_rows``, issue 27 point 6),
and its table is then the same as one made from every stored job: a property test over random
submissions, holds, releases, cancellations, ends, dependencies and reported work."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tesserae.config import RunSpec, build_scheduler
from tesserae.profiles.loader import load_profile
from tesserae.runtime.controller import lifecycle
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.controller.rounds import is_active
from tesserae.runtime.executor.gpus import machine_cluster, virtual_gpus
from tesserae.runtime.job.paths import JobPaths
from tesserae.runtime.local.executor import LocalExecutor
from tesserae.runtime.store import jobs
from tesserae.runtime.store.database import ACTIVE_STATES, Store
from tesserae.runtime.store.job_ids import JobIds

OPS = st.lists(st.tuples(st.sampled_from(["submit", "hold", "release", "cancel", "end", "report", "after", "retry"]),
                         st.integers(0, 30)), min_size=1, max_size=40)


def _controller(store: Store, folder: Path) -> Controller:
    cluster, gpus = machine_cluster(virtual_gpus(4))
    scheduler = build_scheduler(cluster, load_profile(None), RunSpec(policy="tiresias-las"))
    return Controller(store, LocalExecutor(gpus), scheduler, cluster, folder, log=lambda msg: None)


def _judged_one_by_one(store: Store, now: float) -> tuple[list[int], float]:
    """The rows a decision at ``now`` takes, and when the first backoff ends, as decisions found them before
    the rows were sorted as they are read (``job_rows``): every stored job judged one by one."""
    rows = jobs.every_job(store)
    states = {int(r["id"]): str(r["state"]) for r in rows}
    active = [i for i, r in enumerate(rows) if is_active(r, None) and lifecycle.blocked(r, states, now) is None]
    due = min((float(r["retry_at"]) for r in rows if r["state"] in ACTIVE_STATES and r["retry_at"] is not None
               and float(r["retry_at"]) > now), default=math.inf)
    return active, due


def _same(a: tuple[Any, np.ndarray, dict[int, Any]], b: tuple[Any, np.ndarray, dict[int, Any]]) -> None:
    ta, tb = a[0], b[0]
    assert ta.n == tb.n and ta.specs == tb.specs and ta.gpu_type_req == tb.gpu_type_req
    for name, value in vars(tb).items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(getattr(ta, name), value, err_msg=name)
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2] == b[2]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_the_table_from_what_changed_is_the_table_from_every_job(tmp_path_factory: Any, ops: list[Any]) -> None:
    folder = tmp_path_factory.mktemp("rows")
    store = Store(folder / "t.db")
    ids = JobIds(JobPaths(folder, folder / "jobs", lambda _: None), lambda _: None)
    live = _controller(store, folder)
    made: list[int] = []
    now = 1000.0
    for step, (op, k) in enumerate(ops):
        now += 1.0
        if op == "submit" or not made:
            cols = {"user": f"u{k % 3}", "name": "j", "job_type": "generic", "num_gpus": 1 + k % 4,
                    "command": '["true"]', "state": "queued", "submit_time": now, "last_stop": now,
                    "request_hash": "h", "queue": "", "iterations": None if k % 2 else 100 + k}
            made += jobs.insert_jobs(store, ids, cols, None)
            continue
        job = made[k % len(made)]
        if op == "hold":
            jobs.hold(store, job, "t", now)
        elif op == "release":
            jobs.release(store, job, "t")
        elif op == "cancel":
            jobs.cancel(store, job, "t", now)
        elif op == "end":
            store.execute("UPDATE jobs SET state='completed', finish_time=?, attained=?, executed=?, progress=? "
                          "WHERE id=? AND state IN ('queued', 'preempted')", (now, 10.0 * k, 5.0, 3.0, job))
        elif op == "report":
            store.execute("UPDATE jobs SET total_reported=?, first_start=?, preemptions=preemptions+1 WHERE id=?",
                          (500 + k, now - 1, job))
        elif op == "after":  # depends on another job having completed (cancelled when it cannot)
            store.execute("UPDATE jobs SET after=? WHERE id=? AND id != ?", (f'[[{made[0]}, "ok"]]', job, made[0]))
        elif op == "retry":  # a failed run's backoff: over already, or for a few more seconds
            store.execute("UPDATE jobs SET retry_at=? WHERE id=?", (now + (k % 7) - 3, job))
        if step % 3 == 0:  # decisions now and then, as the controller makes them
            incremental = live.rounds.build_table(now)
            _same(incremental, _controller(store, folder).rounds.build_table(now))
            assert (incremental[1].tolist(), live.rounds.retry_due) == _judged_one_by_one(store, now)
    _same(live.rounds.build_table(now + 1), _controller(store, folder).rounds.build_table(now + 1))
    assert math.isfinite(now)
    store.close()
