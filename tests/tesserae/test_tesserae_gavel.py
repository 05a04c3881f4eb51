"""Baselines: Gavel's max-min LP (plain and packed), Gavel's placement, Themis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.plans import CheckingScheduler
from support.specs import decide, job, spec, toy_model
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.core.plugins import RunContext
from tesserae.profiles.default_model import DefaultModel
from tesserae.profiles.table_model import TableModel
from tesserae.scheduling.base import make_policy
from tesserae.scheduling.gavel_maxmin import GavelMaxMin
from tesserae.scheduling.themis import finish_time_fairness
from tesserae.sim.engine import SimConfig, Simulator
from tesserae.sim.runner import simulate

HETERO = TableModel(
    name="hetero-toy", reference_gpu_type="v100",
    alone={("fast", 1, "v100", True): 10.0, ("fast", 1, "k80", True): 1.0,
           ("flat", 1, "v100", True): 2.0, ("flat", 1, "k80", True): 1.5,
           ("big", 2, "v100", True): 4.0, ("big", 2, "k80", True): 2.0},
    pairs={("fast", 1, "v100", True, "flat", 1): (7.0, 1.5), ("fast", 1, "k80", True, "flat", 1): (0.8, 1.2),
           ("fast", 1, "v100", True, "fast", 1): (6.0, 6.0)},
    measured=True)


def _policy(cluster: str, model, packing: bool = False) -> GavelMaxMin:
    p = make_policy("gavel-maxmin", context=RunContext(round_seconds=360.0, packing=packing))
    assert isinstance(p, GavelMaxMin)
    p.bind(parse_cluster_spec(cluster), model)
    return p


def _table(jobs, model) -> JobTable:
    t = JobTable(jobs)
    t.set_reference_rates(model)
    t.status[:] = JobStatus.QUEUED
    return t


def _check_lp(policy: GavelMaxMin, table: JobTable, cluster: str) -> None:
    cl = parse_cluster_spec(cluster)
    sol = policy.last
    assert sol is not None
    rows = np.asarray(sol.rows)
    k = table.num_gpus[rows].astype(float)
    X = sol.single
    assert (X >= -1e-9).all() and (X <= 1 + 1e-9).all()
    time_used = X.sum(axis=1)
    gpus_used = (X * k[:, None]).sum(axis=0)
    pos = {r: i for i, r in enumerate(sol.rows)}
    for a, b, t, y in zip(sol.pair_a.tolist(), sol.pair_b.tolist(), sol.pair_type.tolist(),
                          sol.pair_time.tolist(), strict=True):
        assert table.num_gpus[a] == table.num_gpus[b], "pairs only of equal GPU counts"
        time_used[pos[a]] += y
        time_used[pos[b]] += y
        gpus_used[t] += y * table.num_gpus[a]
    assert (time_used <= 1 + 1e-6).all(), "a job cannot run more than all the time"
    cap = np.array([cl.gpus_by_type[g] for g in cl.gpu_types], dtype=float)
    assert (gpus_used <= cap + 1e-6).all(), "the allocation fits the cluster"
    for i, r in enumerate(sol.rows):  # no time on a type the job cannot run on
        rates = policy.alone(table.job_type(r), int(table.num_gpus[r]))
        assert (X[i][rates <= 0] <= 1e-9).all()


def test_lp_equal_jobs_share_equally() -> None:
    # Three identical 1-GPU jobs on two GPUs: max-min gives each 2/3 of the time.
    model = DefaultModel()
    jobs = [spec(i, 1) for i in range(3)]
    table = _table(jobs, model)
    p = _policy("1x2", model)
    p.order(table, np.arange(3), 0.0)
    _check_lp(p, table, "1x2")
    assert p.last.single.sum(axis=1) == pytest.approx([2 / 3] * 3, abs=1e-6)
    assert p.last.min_share == pytest.approx(2 / 3 / 1.0, rel=1e-6)


def test_lp_is_heterogeneity_aware() -> None:
    # One v100 and one k80. 'fast' speeds up 10x on the v100, 'flat' 1.33x: max-min gives 'fast' the
    # larger share of the v100, and both jobs' normalised throughputs end up equal.
    jobs = [spec(0, 1, "fast"), spec(1, 1, "flat")]
    table = _table(jobs, HETERO)
    cluster = "1x1:v100,1x1:k80"
    p = _policy(cluster, HETERO)
    p.order(table, np.arange(2), 0.0)
    _check_lp(p, table, cluster)
    v100 = p.types.index("v100")
    X = p.last.single
    assert X[0, v100] > X[1, v100]
    # The advice follows: 'fast' is sent to the v100 first.
    assert p.type_preference(0)[0] == "v100"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["fast", "flat", "big"]), st.floats(0.1, 3.0)), min_size=1, max_size=12),
       st.sampled_from(["1x2:v100,1x2:k80", "1x4:v100", "2x1:k80,1x1:v100"]), st.booleans())
def test_lp_allocation_satisfies_its_constraints(raw, cluster, packing) -> None:
    jobs = [spec(i, 2 if t == "big" else 1, t) for i, (t, _) in enumerate(raw)]
    table = _table(jobs, HETERO)
    table.weight[:] = [w for _, w in raw]
    p = _policy(cluster, HETERO, packing)
    p.order(table, np.arange(len(jobs)), 0.0)
    _check_lp(p, table, cluster)
    if packing and sum(t == "fast" for t, _ in raw) >= 2 and "v100" in cluster:
        assert p.last.pair_a.size > 0, "one variable per compatible job pair"


def test_packed_lp_uses_pairs_when_they_gain() -> None:
    # Two 'fast' jobs on one v100: alone each would get half the time; together each runs at 0.6 of its
    # speed all the time, so the packed LP gives the pair (almost) all the time.
    jobs = [spec(0, 1, "fast"), spec(1, 1, "fast")]
    table = _table(jobs, HETERO)
    p = _policy("1x1:v100", HETERO, packing=True)
    p.order(table, np.arange(2), 0.0)
    _check_lp(p, table, "1x1:v100")
    assert p.last.pair_time.sum() == pytest.approx(1.0, abs=1e-6)
    assert p.pair_preference() == [(0, 1)]


def test_gavel_end_to_end_with_packing_pairs_jobs() -> None:
    model = toy_model({("A", "B"): (0.8, 0.8)})
    jobs = [job(0, 0, 1, 500, "A"), job(1, 0, 1, 500, "B"), job(2, 0, 1, 500, "A")]
    run = RunSpec(policy="gavel-maxmin", placement="gavel", packing=True, round_seconds=60, restart_overhead=0)
    _, summary = simulate(jobs, parse_cluster_spec("1x1"), model, run)
    assert summary["completed"] == 3
    assert summary["lp_solves"] >= 1
    assert summary["packed_pairs_per_round_mean"] > 0


def test_gavel_priority_rotates_jobs_over_rounds() -> None:
    # Two equal jobs, one GPU: each round the one that has received less than its 1/2 goes next.
    jobs = [job(0, 0, 1, 600), job(1, 0, 1, 600)]
    run = RunSpec(policy="gavel-maxmin", placement="gavel", round_seconds=100, restart_overhead=0)
    _, summary = simulate(jobs, parse_cluster_spec("1x1"), DefaultModel(), run)
    assert summary["preemptions"] >= 4  # time-sliced, not run to completion one after the other
    assert summary["completed"] == 2


def test_gavel_placement_keeps_previous_gpus_else_fills_in_order() -> None:
    # B ran on GPUs 4-5 and keeps them; A (4 GPUs, larger, placed first) takes the lowest free ids
    # 0-3; C (1 GPU, new) takes the lowest id left, 6.
    jobs = [spec(0, 4), spec(1, 2), spec(2, 1)]
    plan, _, _ = decide("2x4", jobs, {1: (4, 5)}, placement="gavel", policy="fifo")
    assert plan.assignments[1].gpus == (4, 5)
    assert plan.assignments[0].gpus == (0, 1, 2, 3)
    assert plan.assignments[2].gpus == (6,)
    # As in Gavel, larger gangs are placed first: A fills GPUs 0-3 in order, over B's previous GPUs 2-3,
    # so B migrates (Tesserae's placement keeps B and puts A on the other node).
    plan, _, _ = decide("2x4", jobs, {1: (2, 3)}, placement="gavel", policy="fifo")
    assert plan.assignments[0].gpus == (0, 1, 2, 3)
    assert plan.migrated == [1]
    plan, _, _ = decide("2x4", jobs, {1: (2, 3)}, placement="tesserae", policy="fifo")
    assert plan.migrated == [] and plan.assignments[0].gpus == (4, 5, 6, 7)


def test_themis_orders_by_worst_finish_time_fairness() -> None:
    model = DefaultModel()
    jobs = [job(0, 0, 1, 10_000), job(1, 0, 1, 100), job(2, 500, 1, 100)]
    table = _table(jobs, model)
    table.executed[0] = 900.0  # job 0 ran for the 900 s so far; 1 and 2 have not run
    table.progress[0] = 900.0
    rho = finish_time_fairness(table, np.arange(3), 900.0, cluster_gpus=1)
    # The short job that waited 900 s is treated worst; the long job that ran the whole time best.
    assert rho[1] > rho[2] > rho[0]
    p = make_policy("themis")
    p.bind(parse_cluster_spec("1x1"), model)
    assert p.order(table, np.arange(3), 900.0).tolist() == [1, 2, 0]
    assert p.oracle


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2000), st.sampled_from([1, 1, 2, 4]), st.integers(30, 2000),
                          st.sampled_from(["resnet50", "vgg19", "alexnet"])), min_size=1, max_size=20),
       st.sampled_from([("gavel-maxmin", "gavel"), ("themis", "tesserae"), ("gavel-maxmin", "tesserae"),
                        ("las", "gavel")]),
       st.sampled_from(["2x4", "1x4:k80,1x4:v100"]), st.booleans())
def test_baselines_keep_invariants_and_finish(raw, combo, cluster_spec, packing) -> None:
    policy, placement = combo
    jobs = [job(i, s, g, d, ty) for i, (s, g, d, ty) in enumerate(raw)]
    cluster = parse_cluster_spec(cluster_spec)
    model = DefaultModel()
    inner = build_scheduler(cluster, model, RunSpec(policy=policy, placement=placement, packing=packing))
    sched = CheckingScheduler(cluster, inner.policy, inner.placement, model, inner.config)
    res = Simulator(jobs, cluster, sched, SimConfig(round_seconds=120, restart_overhead=10)).run()
    assert np.isin(res.table.status, [JobStatus.DONE, JobStatus.REJECTED]).all()
