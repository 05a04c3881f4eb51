"""The typed contract between a policy and a placement (DESIGN §4.4): advice, refusal, what ran."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.plans import CheckingScheduler
from support.specs import job, toy_model
from tesserae.config import RunSpec, build_scheduler, parse_run_label
from tesserae.core.advice import Advice, AdviceKind, Ran, RanReport, unmet_advice
from tesserae.core.cluster import Cluster, parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec, JobStatus, JobTable
from tesserae.core.plan import Assignment
from tesserae.core.plugins import RunContext
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import PlacementPolicy, PooledPlacer, RoundPlacer, make_placement
from tesserae.placement.first_fit import lowest_free_nodes
from tesserae.profiles.table_model import TableModel
from tesserae.scheduler import Scheduler
from tesserae.scheduling.gavel_maxmin import GavelMaxMin
from tesserae.sim.engine import SimConfig, Simulator
from tesserae.sim.runner import simulate

MIXED = "2x1:k80,2x1:v100"
TWO_TYPES = TableModel(
    name="two-types", reference_gpu_type="v100",
    alone={(t, 1, g, True): r for t in ("a", "b") for g, r in (("v100", 4.0), ("k80", 1.0))},
    pairs={("a", 1, g, True, "b", 1): (r, r) for g, r in (("v100", 3.0), ("k80", 0.8))}, measured=True)


def test_unmet_advice_rules() -> None:
    g, s, p = AdviceKind.GPU_TYPE, AdviceKind.TYPE_SHARES, AdviceKind.PAIRS
    assert unmet_advice(g | s, AdviceKind.NONE, 2) == g | s
    assert unmet_advice(g | s, AdviceKind.NONE, 1) == AdviceKind.NONE  # one GPU type: trivially honoured
    assert unmet_advice(g | s, g, 3) == AdviceKind.NONE  # either type kind meets type advice
    assert unmet_advice(g | s | p, g | s, 1) == p  # pairs are never met by a placement that does not share
    assert unmet_advice(AdviceKind.NONE, AdviceKind.NONE, 4) == AdviceKind.NONE


@pytest.mark.parametrize(("label", "cluster", "needle"), [
    ("gavel-maxmin:consolidated", MIXED, "a GPU type per job"),
    ("gavel-fifo:tiresias", MIXED, "a GPU type per job"),
    ("gavel-maxmin:first-fit+packing", "2x4", "does not let jobs share GPUs"),
    ("las:consolidated+packing", "2x4", "does not let jobs share GPUs"),
    ("las(plain):tesserae+packing", "2x4", "no packed variant"),
])
def test_incompatible_combinations_are_refused(label: str, cluster: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        build_scheduler(parse_cluster_spec(cluster), TWO_TYPES, parse_run_label(label, RunSpec()))


def test_packed_policy_needs_a_placement_that_runs_its_pairs() -> None:
    cluster = parse_cluster_spec("2x1:v100")
    with pytest.raises(InputError, match="pairs on shared GPUs"):
        Scheduler(cluster, GavelMaxMin(packing=True), make_placement("tesserae"), TWO_TYPES)
    with pytest.raises(InputError, match="pairs on shared GPUs"):
        Scheduler(cluster, GavelMaxMin(packing=True), make_placement("gavel"), TWO_TYPES)
    Scheduler(cluster, GavelMaxMin(packing=True), make_placement("tesserae", context=RunContext(packing=True)),
              TWO_TYPES)


def test_sound_combinations_are_accepted() -> None:
    for label, cluster in [("gavel-maxmin:consolidated", "2x4"), ("gavel-maxmin:tesserae", MIXED),
                           ("gavel-maxmin:gavel+packing", MIXED), ("gavel-maxmin(plain):tesserae+packing", MIXED),
                           ("las:tesserae+packing", MIXED), ("tiresias-las:tiresias", MIXED)]:
        build_scheduler(parse_cluster_spec(cluster), TWO_TYPES, parse_run_label(label, RunSpec()))


def test_refusal_on_the_command_line_is_one_line_and_exit_2(tmp_path) -> None:
    r = subprocess.run([sys.executable, "-m", "tesserae.cli", "simulate", "--jobs", "5", "--cluster", MIXED,
                        "--policy", "gavel-maxmin", "--placement", "consolidated", "--out", str(tmp_path), "-q"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "cannot honour" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------ what ran
class OtherType(PlacementPolicy):
    """Declares GPU-type advice honoured, then puts every job on the type it was NOT advised:
    what the policy credits must be what ran, not what it advised."""

    name = "other-type"

    @property
    def honours(self) -> AdviceKind:
        return AdviceKind.GPU_TYPE

    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        return _OtherTypePlacer(cluster, table, previous, model, advice)


class _OtherTypePlacer(PooledPlacer):
    def try_admit(self, row: int) -> bool:
        t = 1 - self.advice.gpu_type[row]
        nodes = np.flatnonzero(self.cluster.node_type == t)
        layout = lowest_free_nodes(self.pool, nodes, 1)
        if layout is None:
            return False
        self.assigned[row] = Assignment(row, self.pool.take_nodes(layout))
        return True


class Spy(GavelMaxMin):
    """Records the advice of every decision and every report of what ran."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.advices: list[Advice] = []
        self.reports: list[RanReport] = []

    def advice(self, order: np.ndarray) -> Advice:
        a = super().advice(order)
        self.advices.append(a)
        return a

    def credit(self, report: RanReport) -> None:
        self.reports.append(report)
        super().credit(report)


def test_policy_credits_the_type_that_ran_not_the_advised_one() -> None:
    cl = parse_cluster_spec("1x1:k80,1x1:v100")
    policy = Spy(round_seconds=300)
    sched = Scheduler(cl, policy, OtherType(), TWO_TYPES)
    jobs = [JobSpec(0, 0.0, 1, "a", 1e6), JobSpec(1, 0.0, 1, "b", 1e6)]
    Simulator(jobs, cl, sched, SimConfig(round_seconds=300, restart_overhead=0)).run(until=600.0)
    advised = dict(policy.advices[0].gpu_type)
    assert sorted(advised.values()) == [0, 1]
    report = policy.reports[0]
    assert (report.since, report.until) == (0.0, 300.0)
    for r in (0, 1):
        ran_on = report.jobs[r].gpu_type
        assert ran_on == 1 - advised[r]
        # Gavel's half-round seed on each type, plus the 300 s it ran, on the type it ran on.
        assert policy.time[r][ran_on] == pytest.approx(150.0 + 300.0)
        assert policy.time[r][advised[r]] == pytest.approx(150.0)
        assert policy.realised[r][ran_on] == pytest.approx(300.0)


def test_scheduler_reports_seconds_and_gpu_seconds_of_every_job() -> None:
    cl = parse_cluster_spec("1x2:v100")
    model = TableModel(name="m", reference_gpu_type="v100", alone={("a", 2, "v100", True): 2.0}, measured=True)
    policy = Spy(round_seconds=300)
    sched = Scheduler(cl, policy, make_placement("gavel"), model)
    Simulator([JobSpec(0, 0.0, 2, "a", 1e6)], cl, sched, SimConfig(round_seconds=300, restart_overhead=10)
              ).run(until=900.0)
    assert [(r.since, r.until) for r in policy.reports] == [(0.0, 300.0), (300.0, 600.0)]
    assert policy.reports[0].jobs[0] == Ran(0, None, None, 300.0, 600.0)


def test_pairs_formed_by_the_placement_under_a_plain_policy_credit_each_job() -> None:
    # Three jobs, two GPUs of one type: the plain LP runs two a round, Tesserae's packing pairs the
    # third (the policy's overflow) with one of them, and every job gets credited for its time.
    jobs = [JobSpec(i, 0.0, 1, "ab"[i % 2], 1e6) for i in range(3)]
    run = parse_run_label("gavel-maxmin(plain):tesserae+packing", RunSpec(round_seconds=300, restart_overhead=0))
    cl = parse_cluster_spec("1x2:v100")
    sched = build_scheduler(cl, TWO_TYPES, run)
    assert AdviceKind.PAIRS not in sched.policy.advises
    res = Simulator(jobs, cl, sched, SimConfig(round_seconds=300, restart_overhead=0)).run(until=1200.0)
    policy = sched.policy
    assert sched.placement.summary()["packed_pairs_per_round_mean"] > 0
    received = {r: float(policy.time[r].sum() - len(policy.types) * policy.half_round) for r in range(3)}
    assert all(v > 0 for v in received.values()), received
    assert res.table.executed.min() > 0


def test_packed_policy_pairs_are_followed_by_tesserae_placement() -> None:
    model = toy_model({("A", "B"): (0.8, 0.8)})
    jobs = [job(0, 0, 1, 2000, "A"), job(1, 0, 1, 2000, "B")]
    for placement in ("gavel", "tesserae"):
        run = RunSpec(policy="gavel-maxmin", placement=placement, packing=True, round_seconds=100,
                      restart_overhead=0)
        res, summary = simulate(jobs, parse_cluster_spec("1x1"), model, run)
        assert summary["completed"] == 2 and summary["packed_pairs_per_round_mean"] > 0.5, placement
        assert res.table.finish.max() < 3000, placement


# ------------------------------------------------------------------------------------ properties
COMBOS = ["gavel-maxmin:tesserae", "gavel-maxmin:tesserae+packing", "gavel-maxmin(plain):tesserae+packing",
          "gavel-fifo:tesserae", "gavel-maxmin:gavel+packing", "tiresias-las:consolidated", "las:tiresias"]
jobs_st = st.lists(st.tuples(st.integers(0, 1500), st.sampled_from([1, 1, 2, 4]), st.integers(30, 1500),
                             st.sampled_from(["a", "b"])), min_size=1, max_size=14)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs_st, st.sampled_from(COMBOS), st.sampled_from(["1x4:k80,1x4:v100", "2x2:v100"]))
def test_every_combination_keeps_gangs_whole_and_capacity(raw, label, cluster_spec) -> None:
    model = TableModel(name="two-types", reference_gpu_type="v100",
                       alone={(t, k, g, True): r * k for t in "ab" for k in (1, 2, 4)
                              for g, r in (("v100", 4.0), ("k80", 1.0))},
                       pairs={("a", k, g, True, "b", k): (r * k, r * k) for k in (1, 2, 4)
                              for g, r in (("v100", 3.0), ("k80", 0.8))}, measured=True)
    jobs = [JobSpec(i, float(s), g, ty, float(d) * g) for i, (s, g, d, ty) in enumerate(raw)]
    cluster = parse_cluster_spec(cluster_spec)
    run = parse_run_label(label, RunSpec(round_seconds=120, restart_overhead=10))
    inner = build_scheduler(cluster, model, run)
    sched = CheckingScheduler(cluster, inner.policy, inner.placement, model, inner.config)
    sim = Simulator(jobs, cluster, sched, SimConfig(round_seconds=120, restart_overhead=10,
                                                    gavel_rounds=inner.policy.gavel_rounds))
    res = sim.run()
    assert (res.table.status == JobStatus.DONE).all()
    assert (res.timeline["gpus_in_use"] <= cluster.num_gpus).all()
    # Deterministic: the same input and seed give the same summary.
    volatile = {"wall_seconds", "scheduler_seconds", "decision_seconds_mean", "decision_seconds_p95",
                "decision_seconds_max", "layout_seconds", "lp_seconds_total", "lp_seconds_max"}
    a, b = (simulate(jobs, cluster, model, run, seed=1)[1] for _ in range(2))
    assert {k: v for k, v in a.items() if k not in volatile} == {k: v for k, v in b.items() if k not in volatile}


def test_run_labels_carry_the_plain_policy_and_the_ablations() -> None:
    run = parse_run_label("gavel-maxmin(plain):tesserae+packing", RunSpec())
    assert run.packing and run.policy_packing is False and not run.policy_packs
    assert run.label == "gavel-maxmin(plain):tesserae+packing"
    assert parse_run_label(run.label, RunSpec()) == run
    assert RunSpec.flat(placement="tesserae", type_matching=False).label == "fifo:tesserae[no-type-matching]"
    with pytest.raises(InputError, match="unknown modifier"):
        parse_run_label("las(fast):tesserae", RunSpec())


def test_cli_ablation_flags(tmp_path) -> None:
    r = subprocess.run([sys.executable, "-m", "tesserae.cli", "simulate", "--jobs", "12", "--cluster", MIXED,
                        "--policy", "gavel-maxmin", "--placement", "tesserae", "--packing", "--no-policy-packing",
                        "--no-type-matching", "--no-strategy-choice", "--out", str(tmp_path), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["label"] == "gavel-maxmin(plain):tesserae+packing[no-type-matching][fixed-strategy]"
    assert s["policy_packing"] is False and "type_switches" in s and "allocation_error_mean" in s
