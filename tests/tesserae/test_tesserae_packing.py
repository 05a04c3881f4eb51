"""Packing (DESIGN §4.2): best-gain pairs, memory, thresholds, strategies, and the type-level solve."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

from support.plans import CheckingScheduler
from support.specs import decide, job, spec, toy_model
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.placement import _packing
from tesserae.profiles.default_model import DefaultModel, DefaultModelConfig
from tesserae.profiles.norm_speed import load_norm_speed
from tesserae.sim.engine import SimConfig, Simulator

# A toy table: with host A, sharing with B gains 0.3, with C 0.6, with D it does not fit (0.0).
TOY = toy_model({("A", "B"): (0.7, 0.6), ("A", "C"): (0.8, 0.8), ("A", "D"): (0.0, 0.9),
                 ("B", "C"): (0.5, 0.5)})


def test_packing_picks_the_pair_with_the_best_gain() -> None:
    # Two GPUs: A and D run; B and C wait (the overflow reaches the cluster's size again). A+C (gain
    # 0.6) beats A+B (0.3); D shares with nobody (no pair data = cannot share).
    jobs = [spec(0, 1, "A"), spec(1, 1, "D"), spec(2, 1, "B"), spec(3, 1, "C")]
    plan, _, _ = decide("1x2", jobs, packing=True, model=TOY)
    assert plan.pairs == [(0, 3)]
    assert plan.assignments[0].partner == 3 and plan.assignments[3].partner == 0
    assert plan.assignments[0].gpus == plan.assignments[3].gpus
    assert 2 not in plan.assignments


def test_packing_is_a_matching_not_a_greedy_choice() -> None:
    # Hosts A, B; waiting C (first in priority), D. Greedy would give C to A (0.6) and leave D alone
    # (B+D cannot share); the maximum-weight matching pairs B+C (0.5) and A+D (0.5).
    model = toy_model({("A", "C"): (0.8, 0.8), ("B", "C"): (0.75, 0.75), ("A", "D"): (0.75, 0.75)})
    jobs = [spec(0, 1, "A"), spec(1, 1, "B"), spec(2, 1, "C"), spec(3, 1, "D")]
    plan, _, _ = decide("1x2", jobs, packing=True, model=model)
    assert sorted(plan.pairs) == [(0, 3), (1, 2)]


def test_no_packing_without_the_flag_or_below_threshold() -> None:
    jobs = [spec(0, 1, "A"), spec(1, 1, "B")]
    assert decide("1x1", jobs, model=TOY)[0].pairs == []
    low = toy_model({("A", "B"): (0.55, 0.5)})  # gain 0.05 < 0.1
    assert decide("1x1", jobs, packing=True, model=low)[0].pairs == []


def test_out_of_memory_pair_gets_no_edge() -> None:
    jobs = [spec(0, 1, "A"), spec(1, 1, "D")]
    assert decide("1x1", jobs, packing=True, model=TOY)[0].pairs == []


def test_memory_check_of_the_builtin_model() -> None:
    # k80 has 12 GB: resnet50 (9 GB) + alexnet (4 GB) do not fit; alexnet + alexnet (8 GB) do.
    jobs = [spec(0, 1, "resnet50"), spec(1, 1, "alexnet")]
    assert decide("1x1:k80", jobs, packing=True)[0].pairs == []
    assert decide("1x1:v100", jobs, packing=True)[0].pairs == [(0, 1)]
    jobs = [spec(0, 1, "alexnet"), spec(1, 1, "alexnet")]
    assert decide("1x1:k80", jobs, packing=True)[0].pairs == [(0, 1)]


MEM = DefaultModelConfig().memory_gb
GPU_MEM = DefaultModelConfig().gpu_memory_gb


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1500), st.sampled_from([1, 1, 2, 4]), st.integers(30, 2000),
                          st.sampled_from(sorted(MEM))), min_size=2, max_size=30),
       st.sampled_from(["1x4:k80,1x4:p100", "2x2:k80,1x4:v100", "1x4:t4"]), st.booleans())
def test_no_pair_exceeds_gpu_memory_and_every_job_finishes(raw, cluster_spec, event) -> None:
    jobs = [job(i, s, g, d, ty) for i, (s, g, d, ty) in enumerate(raw)]
    cluster = parse_cluster_spec(cluster_spec)
    model = DefaultModel()
    inner = build_scheduler(cluster, model, RunSpec(policy="las", placement="tesserae", packing=True))
    seen: list[tuple[str, str, str]] = []

    class MemoryChecking(CheckingScheduler):
        def decide(self, now, table, active, previous):
            plan = super().decide(now, table, active, previous)
            for a, b in plan.pairs:
                g = cluster.gpu_types[int(cluster.gpu_type[plan.assignments[a].gpus[0]])]
                ta, tb = table.job_type(a), table.job_type(b)
                assert MEM[ta] + MEM[tb] <= GPU_MEM[g], f"{ta} + {tb} on {g}"
                seen.append((ta, tb, g))
            return plan

    sched = MemoryChecking(cluster, inner.policy, inner.placement, model, inner.config)
    res = Simulator(jobs, cluster, sched, SimConfig(round_seconds=60, restart_overhead=5, event_driven=event)).run()
    assert (res.table.status == 3).all()


def test_strategy_recorded_for_pipeline_jobs(shared_data) -> None:
    model = load_norm_speed(shared_data / "blox" / "norm_speed.csv")
    small = "resnet50 (batch size 32)"
    best = model.colocation.best_strategy("Bert-Large", 2, small, 2)
    assert best is not None
    jobs = [spec(0, 2, "Bert-Large"), spec(1, 2, small)]
    plan, _, _ = decide("1x2", jobs, packing=True, model=model)
    assert plan.pairs == [(0, 1)]
    assert plan.assignments[0].strategy == best[0]
    assert plan.assignments[1].strategy is None  # small jobs have no strategies
    # Alone, the large job is launched with its best solo strategy.
    alone, _, _ = decide("1x2", jobs[:1], packing=True, model=model)
    assert alone.assignments[0].strategy == model.colocation.best_solo_strategy("Bert-Large", 2)[0]


def test_pipeline_pair_that_is_out_of_memory_with_every_strategy_is_not_formed(shared_data) -> None:
    model = load_norm_speed(shared_data / "blox" / "norm_speed.csv")
    table = model.colocation
    oom = [(lg, n, s, sn) for lg, n in table.large_types() for s, sn in table.partners(lg, n)
           if table.best_strategy(lg, n, s, sn) is None]
    if not oom:
        pytest.skip("norm_speed.csv has no pair that is out of memory under every strategy")
    lg, n, s, sn = oom[0]
    plan, _, _ = decide(f"1x{n}", [spec(0, n, lg), spec(1, sn, s)], packing=True, model=model)
    assert plan.pairs == []


def test_pairs_from_last_round_are_kept_when_still_chosen() -> None:
    # Two hosts of the same type, two overflow jobs of the same type: the pairing of last round stays.
    jobs = [spec(0, 1, "A"), spec(1, 1, "A"), spec(2, 1, "C"), spec(3, 1, "C")]
    plan, _, _ = decide("1x2", jobs, {0: (0,), 1: (1,), 2: (1,), 3: (0,)}, packing=True, model=TOY,
                        partners={0: 3, 3: 0, 1: 2, 2: 1})
    assert sorted(plan.pairs) == [(0, 3), (1, 2)]
    assert plan.migrated == []


def _brute_force(hosts, overflow, gain, threshold) -> float:
    w = np.zeros((len(hosts), len(overflow)))
    for i, (_, hc) in enumerate(hosts):
        for j, (_, oc) in enumerate(overflow):
            g = gain(hc, oc)
            w[i, j] = g if g > threshold else 0.0
    r, c = linear_sum_assignment(w, maximize=True)
    return float(w[r, c].sum())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=9), st.lists(st.integers(0, 3), min_size=1, max_size=9),
       st.lists(st.floats(-0.5, 0.9), min_size=16, max_size=16))
def test_type_level_matching_equals_job_level_optimum(host_types, over_types, gains) -> None:
    g = np.array(gains).reshape(4, 4)

    def gain(hc, oc):
        return float(g[hc[0], oc[0]])

    hosts = [(i, (t, 1, 0)) for i, t in enumerate(host_types)]
    overflow = [(100 + i, (t, 1)) for i, t in enumerate(over_types)]
    pairs = _packing.pack(hosts, overflow, gain, 0.1)
    assert len({h for h, _ in pairs}) == len(pairs) == len({o for _, o in pairs})
    hc = dict(hosts)
    oc = dict(overflow)
    total = sum(gain(hc[h], oc[o]) for h, o in pairs)
    assert all(gain(hc[h], oc[o]) > 0.1 for h, o in pairs)
    assert total == pytest.approx(_brute_force(hosts, overflow, gain, 0.1), abs=1e-9)
    # Overflow jobs are handed out in priority order within a class.
    for t in set(over_types):
        chosen = sorted(o for _, o in pairs if oc[o][0] == t)
        firsts = [o for o, c in overflow if c[0] == t][: len(chosen)]
        assert chosen == firsts


def test_many_jobs_pack_by_class() -> None:
    # Thousands of jobs, a handful of classes: the solve is over classes, not jobs, so the gain is
    # asked about class pairs (36 here), never per job pair. Speed itself is in benchmarks/.
    rng = np.random.default_rng(0)
    hosts = [(i, (int(t), 1, 0)) for i, t in enumerate(rng.integers(0, 6, 5000))]
    overflow = [(10_000 + i, (int(t), 1)) for i, t in enumerate(rng.integers(0, 6, 5000))]
    g = rng.uniform(-0.2, 0.8, (6, 6))
    calls = 0

    def gain(h: tuple, o: tuple) -> float:
        nonlocal calls
        calls += 1
        return float(g[h[0], o[0]])

    pairs = _packing.pack(hosts, overflow, gain, 0.1)
    assert calls <= 100, f"gain asked {calls} times for 6x6 classes"
    assert len(pairs) > 1000
    assert len(set(itertools.chain.from_iterable(pairs))) == 2 * len(pairs)


def test_bulk_class_grouping_is_the_dict_grouping() -> None:
    """Classes grouped in bulk (``_classes.group_rows``) come in the order of their first row, with each
    class's rows in their order: what grouping one row at a time into a dict gives (the LP's
    variables follow that order, so among tied optima it decides the pairs)."""
    from tesserae.placement._classes import group_rows

    rng = np.random.default_rng(4)
    for n in (1, 2, 7, 300):
        rows = rng.permutation(10 * n)[:n].astype(np.int64)
        keys = rng.integers(0, 5, n).astype(np.int64)
        expect: dict[int, list[int]] = {}
        for r, k in zip(rows.tolist(), keys.tolist(), strict=True):
            expect.setdefault(k, []).append(r)
        got_keys, groups, index = group_rows(rows, keys)
        assert got_keys == list(expect) and groups == list(expect.values())
        assert [got_keys[i] for i in index] == keys.tolist()
