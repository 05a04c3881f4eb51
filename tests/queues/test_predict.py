"""Predicted starts from a live snapshot (sim/predict.py): exact on a small case, copies never touch the live state."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from support.specs import job
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.core.plan import Assignment
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.engine import SimConfig
from tesserae.sim.predict import Snapshot, expected_remaining, predict


def live_state(policy: str = "fifo"):
    cluster = parse_cluster_spec("1x2")
    model = DefaultModel()
    sched = build_scheduler(cluster, model, RunSpec(policy=policy, placement="first-fit"))
    # Job 0 runs on both GPUs with 100 s of work left; jobs 1 (2 GPUs, 50 s) and 2 (1 GPU, 30 s) wait.
    t = JobTable([job(0, 0.0, 2, 200.0), job(1, 10.0, 2, 50.0), job(2, 20.0, 1, 30.0)])
    t.set_reference_rates(model)
    t.status[:] = JobStatus.QUEUED
    t.status[0] = JobStatus.RUNNING
    t.progress[0] = t.executed[0] = 100.0
    t.attained[0] = 200.0
    t.first_start[0] = 0.0
    assignments = {0: Assignment(0, (0, 1))}
    return cluster, sched, t, assignments


def test_fifo_prediction_is_exact_on_a_small_case() -> None:
    cluster, sched, t, assignments = live_state()
    snap = Snapshot.take(100.0, t, np.array([0, 1, 2]), assignments, sched, np.ones(3, dtype=bool))
    p = predict(snap, cluster, SimConfig(round_seconds=300.0, restart_overhead=5.0, event_driven=True))
    assert p.complete
    # 0 ends at 200; 1 restarts (5 s) and runs 50 s; then 2 (5 + 30 s). FIFO: 2 waits behind 1.
    assert p.start == {0: None, 1: pytest.approx(200.0), 2: pytest.approx(255.0)}
    assert p.finish == {0: pytest.approx(200.0), 1: pytest.approx(255.0), 2: pytest.approx(290.0)}
    # The live table was not touched.
    assert t.status[1] == JobStatus.QUEUED and np.isnan(t.first_start[1]) and t.progress[0] == 100.0


def test_unknown_work_comes_from_completed_jobs() -> None:
    samples = np.array([100.0, 200.0, 300.0, 400.0])
    assert expected_remaining(samples, np.array([0.0, 250.0, 500.0])) == pytest.approx([250.0, 100.0, np.nan],
                                                                                       nan_ok=True)
    cluster, sched, t, assignments = live_state()
    snap = Snapshot.take(100.0, t, np.array([0, 1, 2]), assignments, sched, np.array([False, True, True]))
    p = predict(snap, cluster, SimConfig(round_seconds=60.0, restart_overhead=5.0, event_driven=True))
    assert p.estimated_work == [0]
    # Under 5 completions: as much again as it has attained (200 GPU-s = 100 s on 2 GPUs).
    assert p.finish[0] == pytest.approx(200.0)


def test_a_budget_too_small_gives_no_prediction_rather_than_a_wrong_one() -> None:
    cluster, sched, t, assignments = live_state()
    snap = Snapshot.take(100.0, t, np.array([0, 1, 2]), assignments, sched, np.ones(3, dtype=bool))
    p = predict(snap, cluster, SimConfig(round_seconds=300.0, event_driven=True), budget_seconds=0.0)
    assert not p.complete and p.start[1] is None


def test_measured_speed_carries_over_to_jobs_of_the_same_kind() -> None:
    cluster, sched, t, assignments = live_state()
    t.progress[0] = 150.0  # 150 of its 200 iterations in 100 s: 1.5x the model's rate
    snap = Snapshot.take(100.0, t, np.array([0, 1, 2]), assignments, sched, np.ones(3, dtype=bool))
    p = predict(snap, cluster, SimConfig(round_seconds=300.0, restart_overhead=0.0, event_driven=True))
    assert p.finish[0] == pytest.approx(100.0 + 50.0 / 1.5)
    # Job 1 has the same type and GPU count: it runs 1.5x faster too; job 2 (1 GPU) takes the type's factor.
    assert p.finish[1] - p.start[1] == pytest.approx(50.0 / 1.5)
    assert p.finish[2] - p.start[2] == pytest.approx(30.0 / 1.5)


# ---------------------------------------------------------------------- what-if (issue 27, point 5)
def _predictor(budget: float = 2.0):
    from tesserae.runtime.controller.prediction import Predictor

    _, sched, t, assignments = live_state()
    p = Predictor(300.0, True, restart_seconds=5.0, budget_seconds=budget, run=RunSpec(policy="fifo",
                                                                                         placement="first-fit"))
    p.after_decision(0.0, 100.0, t, np.array([0, 1, 2]), assignments, sched)
    return p


def test_a_bad_what_if_is_refused_before_anything_is_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    from tesserae.core.errors import InputError
    from tesserae.core.queues import parse_config
    from tesserae.runtime.controller import prediction

    simulated = []  # simulations the request itself ran (the predictor's own worker may run its own)
    monkeypatch.setattr(prediction, "predict",
                        lambda *a, **k: simulated.append(threading.current_thread() is threading.main_thread()))
    p = _predictor()
    with pytest.raises(InputError):  # a queue that guarantees more GPUs than the cluster has
        p.what_if(None, None, parse_config({"queues": [{"name": "a", "guarantee": 64}]}, path="body"))
    assert True not in simulated


def test_a_what_if_over_its_budget_says_it_is_partial() -> None:
    p = _predictor(budget=0.0)
    _, alt = p.what_if("las", None, None)
    assert alt.out_of_time and not alt.complete and alt.start[1] is None
    assert not _predictor().what_if("las", None, None)[1].out_of_time
