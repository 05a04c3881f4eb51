"""The runtime's learning path without processes (issue 25, item 4): progress reports into windows and
observations (``controller.learning``), the hostile reports it refuses, and the estimator's state in the
store (``store.learned``), restored as it was."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobSpec, JobTable
from tesserae.profiles.default_model import DefaultModel
from tesserae.profiles.learned import RateEstimator
from tesserae.runtime.controller.learning import DOCUMENT_FORMAT, RuntimeLearning, class_model, runtime_config
from tesserae.runtime.job.files import ProgressReport, read_progress_report
from tesserae.runtime.store.database import Store
from tesserae.runtime.store.learned import LearnedStates
from tesserae.scheduler_learned import LearnedScheduler
from tesserae.sim.engine import SimConfig
from tesserae.sim.predict import Snapshot, predict

CLUSTER = parse_cluster_spec("1x2:x,1x2:y")  # GPUs 0, 1: x; 2, 3: y


def make(tmp_path: Path, name: str = "s") -> tuple[RuntimeLearning, Store, list[str]]:
    store = Store(tmp_path / f"{name}.db")
    said: list[str] = []
    learning = RuntimeLearning.open(store, CLUSTER, DefaultModel(), 2.0, said.append)
    learning.register([(1, 1, "generic"), (2, 1, "resnet"), (3, 1, "")])
    return learning, store, said


def feed(learning: RuntimeLearning, run: int, job: int, gpus: tuple[int, ...], rate: float, t0: float, t1: float,
         *, start: float | None = None, others: tuple[tuple[int, int, tuple[int, ...]], ...] = (),
         step: float = 1.0, base: float = 0.0) -> None:
    """Reports of one run read every ``step`` seconds from t0 to t1, the job advancing at ``rate``."""
    t = t0
    while t <= t1 + 1e-9:
        learning.track([(run, job, gpus, t0 if start is None else start), *((r, j, g, t0) for r, j, g in others)], t)
        learning.on_report(run, ProgressReport(base + rate * (t - t0), None, t, run), t)
        t += step


def test_a_run_s_reports_become_an_observation_of_its_rate_on_its_gpu_type(tmp_path: Path) -> None:
    learning, _, _ = make(tmp_path)
    feed(learning, 10, 1, (2,), 30.0, 100.0, 112.0)
    learning.before_decision(112.5)
    d = learning.describe(1)
    assert d is not None
    y = d["gpu_types"]["y"]
    assert y["measured"] and y["observations"] == 1 and y["rate"] == pytest.approx(30.0, rel=0.02)
    assert not d["gpu_types"]["x"]["measured"] and d["gpu_types"]["x"]["source"] != "measured"
    assert learning.counters()["rejected_total"] == 0
    # --type is a hint: 'generic' and none declare nothing; another name names the job's family.
    assert [learning.describe(j)["declared_type"] for j in (1, 2, 3)] == [None, "resnet", None]  # type: ignore[index]
    assert learning.estimator.counters()["families"] == 1


def test_restart_time_and_stalls_are_left_out(tmp_path: Path) -> None:
    learning, _, _ = make(tmp_path)
    # 20 s of restore before the first advance (the value left by the previous run stays put), then 10 s at
    # 10 it/s, a 30 s stall (a checkpoint written), 10 s more at 10 it/s.
    for t in range(100, 120):
        learning.track([(10, 1, (0,), 100.0)], float(t))
        learning.on_report(10, ProgressReport(500.0, None, 90.0, 9), float(t))  # the previous run's file
    feed(learning, 10, 1, (0,), 10.0, 120.0, 130.0, start=100.0, base=500.0)
    feed(learning, 10, 1, (0,), 10.0, 160.0, 170.0, start=100.0, base=600.0)
    learning.before_decision(171.0)
    x = learning.describe(1)["gpu_types"]["x"]  # type: ignore[index]
    assert x["observations"] == 2 and x["rate"] == pytest.approx(10.0, rel=0.02)
    assert learning.counters()["rejected_total"] == 0  # the previous run's leftover file is not a stale report


def test_a_pair_s_stretch_is_observed_next_to_the_partner(tmp_path: Path) -> None:
    learning, _, _ = make(tmp_path)
    feed(learning, 10, 1, (0,), 20.0, 100.0, 110.0)  # alone
    learning.before_decision(110.5)
    # Job 2 joins GPU 0: the window is cut there, and the next one is a pair's.
    feed(learning, 10, 1, (0,), 5.0, 111.0, 121.0, start=100.0, base=200.0, others=((11, 2, (0,)),))
    learning.before_decision(121.5)
    d = learning.describe(1)
    assert d is not None and [p["partner"] for p in d["partners"]] == [2]
    assert d["partners"][0]["factor"] == pytest.approx(0.25, rel=0.05)
    assert d["gpu_types"]["x"]["rate"] == pytest.approx(20.0, rel=0.05)


@pytest.mark.parametrize("hostile", ["stale", "backwards", "absurd", "late clock"])
def test_hostile_reports_are_refused_counted_and_change_no_one_else(tmp_path: Path, hostile: str) -> None:
    honest, _, _ = make(tmp_path, "honest")
    attacked, _, _ = make(tmp_path, "attacked")
    for learning in (honest, attacked):
        feed(learning, 20, 2, (2,), 12.0, 100.0, 110.0)
    if hostile == "stale":  # another run of job 1 writes its progress during run 10
        for t in range(100, 112):
            attacked.track([(10, 1, (0,), 100.0)], float(t))
            attacked.on_report(10, ProgressReport(1000.0 + 500 * (t - 100), None, float(t), 7), float(t))
    elif hostile == "backwards":
        feed(attacked, 10, 1, (0,), 10.0, 100.0, 105.0)
        attacked.on_report(10, ProgressReport(3.0, None, 106.0, 10), 106.0)
    elif hostile == "absurd":  # 1e15 iterations in a few seconds
        for t, it in ((100.0, 0.0), (101.0, 1.0), (102.0, 2.0), (108.0, 1e15)):
            attacked.track([(10, 1, (0,), 100.0)], t)
            attacked.on_report(10, ProgressReport(it, None, t, 10), t)
    else:  # a clock that says the work took far less time than it did: taken within the reads' second
        for i, t in enumerate(range(100, 111)):
            attacked.track([(10, 1, (0,), 100.0)], float(t))
            attacked.on_report(10, ProgressReport(10.0 * i, None, 110.0 if i == 1 else 100.0, 10), float(t))
    for learning in (honest, attacked):
        learning.before_decision(111.0)
    c = attacked.counters()
    if hostile == "late clock":
        # Not refused, but bounded: 90 iterations over at least the 9 s between the reads, not over 0 s.
        x = attacked.describe(1)["gpu_types"]["x"]  # type: ignore[index]
        assert x["measured"] and x["rate"] <= 90 / 8.0
    else:
        assert c["rejected_total"] >= 1, c
        reason = {"stale": "stale run", "backwards": "went backwards", "absurd": "absurd"}[hostile]
        assert c["rejected"].get(reason, 0) >= 1, c
        assert not attacked.describe(1)["gpu_types"]["x"]["measured"]  # type: ignore[index]
    # The other job's estimates are exactly those of the run without the hostile job.
    assert attacked.describe(2) == honest.describe(2)


def test_estimates_stay_within_their_bounds_whatever_a_job_claims(tmp_path: Path) -> None:
    learning, _, _ = make(tmp_path)
    feed(learning, 10, 1, (2,), 1.0, 100.0, 110.0)  # slow on y
    learning.before_decision(110.5)
    # Then claims to be 500x faster on x (under the absurd factor, so taken): bounded by its prior's shape.
    feed(learning, 11, 1, (0,), 500.0, 120.0, 130.0)
    learning.before_decision(130.5)
    d = learning.describe(1)
    assert d is not None
    speedup = d["gpu_types"]["x"]["rate"] / d["gpu_types"]["y"]["rate"]
    prior = DefaultModel().rate("generic", 1, "x") / DefaultModel().rate("generic", 1, "y")
    assert speedup <= prior * learning.estimator.config.ratio_bound ** 2 * 1.001


def test_progress_files_are_bounded_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "progress.json"
    for doc, expected in (
        ({"iterations": 5, "time": 100.5, "run": 3, "total": 10}, ProgressReport(5.0, 10, 100.5, 3)),
        ({"iterations": -1, "time": -5, "run": -2}, ProgressReport()),
        ({"iterations": 1e300, "run": True, "time": "soon"}, ProgressReport()),
        ({"iterations": 2.5, "run": 1.5}, ProgressReport(2.5, None, None, None)),
    ):
        path.write_text(json.dumps(doc))
        assert read_progress_report(path) == expected
    path.write_text('{"iterations": Infinity, "time": NaN}')
    assert read_progress_report(path) == ProgressReport()
    path.write_text("[1, 2]")
    assert read_progress_report(path) == ProgressReport()


def test_the_store_keeps_what_was_learned_across_a_restart(tmp_path: Path) -> None:
    learning, store, _ = make(tmp_path)
    feed(learning, 10, 1, (0,), 20.0, 100.0, 110.0)
    feed(learning, 11, 2, (2,), 7.0, 100.0, 110.0)
    learning.before_decision(111.0)
    feed(learning, 10, 1, (0,), 5.0, 112.0, 122.0, start=100.0, base=200.0, others=((11, 2, (0,)),))
    learning.before_decision(123.0)
    before = {j: learning.describe(j) for j in (1, 2, 3)}
    counters = learning.counters()
    store.close()
    store2 = Store(tmp_path / "s.db")
    said: list[str] = []
    again = RuntimeLearning.open(store2, CLUSTER, DefaultModel(), 2.0, said.append)
    assert any("restored from the store" in s for s in said)
    for j in (1, 2, 3):
        assert again.describe(j) == before[j]
    assert again.counters()["observations"] == counters["observations"]
    # It carries on from there: a new run of job 1 is fenced, its old run's reports are stale.
    again.track([(12, 1, (1,), 130.0)], 130.0)
    assert again.estimator.observe(1, 100.0, 10.0, "x", run=10) == "stale run"


def test_a_damaged_or_foreign_saved_state_starts_afresh_and_says_so(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    saved = LearnedStates(store)
    saved.save({"estimator": {"format": "something else"}}, DOCUMENT_FORMAT, 1.0)
    said: list[str] = []
    learning = RuntimeLearning.open(store, CLUSTER, DefaultModel(), 2.0, said.append)
    assert learning.estimator.accepted == 0 and any("cannot be read" in s for s in said)
    saved.save({"estimator": {}}, "another-format", 1.0)
    assert RuntimeLearning.open(store, CLUSTER, DefaultModel(), 2.0, said.append).estimator.accepted == 0
    # A state learned on other GPU types does not cover this cluster's.
    other, other_store, _ = make(tmp_path, "other")
    other.before_decision(1.0)
    doc = LearnedStates(other_store).load()
    assert doc is not None
    smaller = RuntimeLearning.open(other_store, parse_cluster_spec("1x2:z"), DefaultModel(), 2.0, said.append)
    assert smaller.estimator.gpu_types == ("z",) and any("starting afresh" in s for s in said)
    with pytest.raises(ValueError):
        saved.save({"x": math.inf}, DOCUMENT_FORMAT, 1.0)


def test_a_learned_scheduler_packs_a_waiting_job_on_the_prior_s_sharing_gain() -> None:
    """The class model says nothing against a pair (it has no memory data): before it did, the placements
    took every pair as not fitting, and a learned scheduler never packed."""
    cluster = parse_cluster_spec("1x2:x")
    est = RateEstimator(cluster.gpu_types, DefaultModel(), runtime_config(2.0))
    run = RunSpec(policy="fifo", placement="tesserae", packing=True)
    sched = LearnedScheduler.wrap(build_scheduler(cluster, class_model(est), run), est)
    plan = sched.decide(0.0, JobTable([JobSpec(i, 0.0, 1, "generic", 1e12) for i in range(3)]), np.arange(3), {})
    assert sorted(a.partner is not None for a in plan.assignments.values()) == [False, True, True]


def test_predicted_starts_run_the_jobs_at_their_learned_rates(tmp_path: Path) -> None:
    """The predictor simulates the learned scheduler's view in the class model's units: a job measured at
    10 it/s with 300 iterations left finishes in about 30 s, and the job waiting behind it starts then and
    runs at its own estimate."""
    cluster = parse_cluster_spec("1x1:x")
    store = Store(tmp_path / "s.db")
    learning = RuntimeLearning.open(store, cluster, DefaultModel(), 2.0, lambda msg: None)
    learning.register([(1, 1, ""), (2, 1, "")])
    feed(learning, 10, 1, (0,), 10.0, 0.0, 20.0)
    learning.before_decision(20.0)
    sched = LearnedScheduler.wrap(build_scheduler(cluster, class_model(learning.estimator),
                                                  RunSpec(policy="fifo", placement="consolidated")),
                                  learning.estimator)
    table = JobTable([JobSpec(1, 0.0, 1, "generic", 500.0), JobSpec(2, 5.0, 1, "generic", 100.0)])
    table.progress[0], table.executed[0], table.attained[0] = 200.0, 20.0, 20.0
    table.status[0] = 2  # running
    running = {0: sched.decide(20.0, table, np.arange(2), {}).assignments[0]}
    view = sched.view_table
    assert view is not None
    snap = Snapshot.take(20.0, view, np.arange(2), running, sched, view.work < 1e11, learning.model_units(sched))
    out = predict(snap, cluster, SimConfig(round_seconds=2.0, restart_overhead=0.0, event_driven=True))
    assert out.finish[1] == pytest.approx(20.0 + 30.0, abs=2.0)
    assert out.start[2] == pytest.approx(out.finish[1], abs=2.0)
    prior = learning.estimator.estimate(2, "x").rate  # never measured: its prior, as the estimator has it
    assert out.finish[2] - out.start[2] == pytest.approx(100.0 / prior, rel=0.1, abs=2.0)
