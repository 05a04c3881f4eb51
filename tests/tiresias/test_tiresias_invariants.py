"""Invariants of the Tiresias policies and placements on random workloads, the CLI path, and the
shared reference trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.plans import CheckingScheduler
from support.specs import job
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.placement.tiresias import fewest_nodes_layout
from tesserae.profiles.default_model import DefaultModel
from tesserae.scheduler import Scheduler
from tesserae.scheduling.tiresias_las import TiresiasLas
from tesserae.sim.engine import SimConfig, Simulator
from tesserae.sim.metrics import job_records
from tesserae.sim.runner import simulate

workloads = st.lists(
    st.tuples(st.integers(0, 1500), st.sampled_from([1, 1, 2, 3, 4, 8]), st.integers(1, 2500),
              st.sampled_from(["resnet50", "vgg19", "unknown-type"])),
    min_size=1, max_size=20)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, st.sampled_from(["tiresias-las", "tiresias-gittins"]),
       st.sampled_from(["tiresias", "yarn", "consolidated"]), st.sampled_from(["2x4", "3x2", "1x8"]),
       st.booleans(), st.sampled_from([(300.0,), (200.0, 2000.0), ()]), st.sampled_from([0.0, 0.5, 2.0]))
def test_every_job_finishes_and_plans_are_valid(raw, policy, placement, cluster_spec, event, queues, knob):
    jobs = [job(i, s, g, d, ty) for i, (s, g, d, ty) in enumerate(raw)]
    cluster = parse_cluster_spec(cluster_spec)
    model = DefaultModel()
    run = RunSpec.flat(policy=policy, placement=placement, round_seconds=60, restart_overhead=5,
                       event_driven=event, queues=queues, promote_knob=knob)
    inner = build_scheduler(cluster, model, run)
    sched = CheckingScheduler(cluster, inner.policy, inner.placement, model, inner.config)
    res = Simulator(jobs, cluster, sched, SimConfig(round_seconds=60, restart_overhead=5, event_driven=event)).run()
    t = res.table
    fits = t.num_gpus <= cluster.num_gpus
    assert (t.status[fits] == JobStatus.DONE).all()
    assert (t.status[~fits] == JobStatus.REJECTED).all()
    np.testing.assert_allclose(t.attained, t.num_gpus * t.executed)
    s = res.scheduler_summary
    assert s["demotions"] >= 0 and (knob > 0 or s["promotions"] == 0)


@settings(max_examples=10, deadline=None)
@given(workloads, st.sampled_from(["tiresias-las", "tiresias-gittins"]), st.booleans())
def test_deterministic(raw, policy, event):
    jobs = [job(i, s, g, d, ty) for i, (s, g, d, ty) in enumerate(raw)]
    run = RunSpec.flat(policy=policy, placement="tiresias", round_seconds=60, event_driven=event, promote_knob=1.0,
                       queues=(500.0,))
    cl = parse_cluster_spec("2x4")
    a, _ = simulate(jobs, cl, DefaultModel(), run)
    b, _ = simulate(jobs, cl, DefaultModel(), run)
    assert job_records(a) == job_records(b)


def test_event_driven_decides_at_every_demotion() -> None:
    # Three jobs of 1, 2 and 4 GPUs on one 8-GPU node, threshold 400 GPU-s: they cross it at 400,
    # 200 and 100 s. With no arrivals or completions before, those must be decision instants.
    jobs = [job(0, 0, 1, 1000), job(1, 0, 2, 1000), job(2, 0, 4, 1000)]
    run = RunSpec(policy="tiresias-las", placement="tiresias", round_seconds=1000, restart_overhead=0,
                  policy_options={"queues": (400.0,)}, event_driven=True)
    res, summary = simulate(jobs, parse_cluster_spec("1x8"), DefaultModel(), run)
    assert {100.0, 200.0, 400.0} <= set(res.timeline["time"].tolist())
    assert summary["demotions"] == 3


def test_fewest_nodes_layout() -> None:
    nodes = np.array([0, 1, 2])
    assert fewest_nodes_layout(nodes, np.array([1, 3, 2]), 4) == [(1, 3), (2, 1)]
    assert fewest_nodes_layout(nodes, np.array([1, 1, 1]), 4) is None


def test_cli_simulate_with_tiresias_options(tmp_path: Path, shared_data: Path) -> None:
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "tesserae.cli", "simulate", "--trace",
                        str(shared_data / "tiresias" / "60_job.csv"), "--format", "tiresias", "--cluster", "4x4",
                        "--policy", "tiresias-gittins", "--placement", "tiresias", "--tiresias-thresholds", "300,3000",
                        "--promote-knob", "2", "--gittins-prior", str(shared_data / "tiresias" / "yarn-gput1000.csv"),
                        "--gittins-index", "paper", "--skew-threshold", "0.5", "--event-driven", "--out", str(out),
                        "-q"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] == 60 and s["queue_thresholds"] == [300.0, 3000.0] and s["promote_knob"] == 2.0
    assert s["skew_threshold"] == 0.5 and s["unknown_skew_types"] == 1  # googlenet has no skew in the model
    assert s["gittins_samples"] == 1001 and s["event_driven"] is True and s["gittins_index"] == "paper"


def test_cli_bad_gittins_index_is_one_line_error(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "tesserae.cli", "simulate", "--jobs", "5", "--policy",
                        "tiresias-gittins", "--gittins-index", "textbook", "--out", str(tmp_path / "o"), "-q"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "policy 'tiresias-gittins', option 'gittins_index'" in r.stderr and "'tiresias' or 'paper'" in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_cli_bad_prior_is_one_line_error(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "tesserae.cli", "simulate", "--jobs", "5", "--policy",
                        "tiresias-gittins", "--gittins-prior", str(tmp_path / "nope.csv"), "--out",
                        str(tmp_path / "o"), "-q"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "nope.csv" in r.stderr and "Traceback" not in r.stderr


def test_all_baselines_on_the_60_job_trace(shared_data: Path) -> None:
    from tesserae.traces import read_trace

    model = DefaultModel()
    specs = read_trace(shared_data / "tiresias" / "60_job.csv", "tiresias", model, seed=0)
    cluster = parse_cluster_spec("15x4")
    for run in [RunSpec(policy="fifo", placement="yarn", no_backfill=True),
                RunSpec(policy="tiresias-las", placement="tiresias", event_driven=True),
                RunSpec.flat(policy="tiresias-gittins", placement="tiresias",
                             gittins_prior=str(shared_data / "tiresias" / "yarn-gput1000.csv"))]:
        _, s = simulate(specs, cluster, model, run)
        assert s["completed"] == 60


class ListChecked(TiresiasLas):
    """2D-LAS that checks, at every decision, what the lists must look like (Tiresias' run_sim.py)."""

    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        seen = active[active < self._seen.size]
        before = {int(r): int(self._queue[r]) for r in seen[self._seen[seen]]}
        out = super().order(table, active, now).tolist()
        assert sorted(out) == sorted(active.tolist())
        for q in range(self.num_queues):
            rows = [r for r in out if self._queue[r] == q]
            stayed = [r for r in rows if before.get(r) == q]
            # Jobs that joined this queue now (new, demoted, promoted) are behind every job already in it ...
            assert rows[:len(stayed)] == stayed
            # ... and of those, the ones that got GPUs at the previous pass are ahead of those that did not.
            ran = [bool(table.status[r] == JobStatus.RUNNING) for r in stayed]
            assert ran == sorted(ran, reverse=True)
        return np.asarray(out, dtype=np.int64)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, st.sampled_from(["consolidated", "first-fit", "tiresias"]), st.booleans(),
       st.sampled_from([(300.0,), (200.0, 2000.0)]), st.sampled_from([0.0, 0.5, 2.0]))
def test_lists_keep_tiresias_order_at_every_decision(raw, placement, event, queues, knob):
    jobs = [job(i, s, g, d, ty) for i, (s, g, d, ty) in enumerate(raw)]
    cluster = parse_cluster_spec("2x4")
    model = DefaultModel()
    run = RunSpec.flat(policy="tiresias-las", placement=placement, round_seconds=60, restart_overhead=5,
                       event_driven=event, queues=queues, promote_knob=knob)
    inner = build_scheduler(cluster, model, run)
    policy = ListChecked(queues=queues, promote_knob=knob)
    sched = Scheduler(cluster, policy, inner.placement, model, inner.config)
    res = Simulator(jobs, cluster, sched, SimConfig(round_seconds=60, restart_overhead=5, event_driven=event)).run()
    assert (res.table.status[res.table.num_gpus <= cluster.num_gpus] == JobStatus.DONE).all()
