"""Discretized 2D-Gittins: the index on a toy distribution worked out by hand, the order within a
queue, the prior file, and online learning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.specs import job
from tesserae.config import RunSpec
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.profiles.default_model import DefaultModel
from tesserae.scheduling.base import make_policy
from tesserae.scheduling.tiresias_gittins import GittinsIndex, TiresiasGittins, read_gittins_prior
from tesserae.sim.runner import simulate

# Toy distribution: job GPU-time S is 100, 200 or 1000 GPU-s, each with probability 1/3; D = 100.
#   G(0)   = P(S <= 100) / E[min(S, 100)]                     = (1/3) / 100            = 1/300
#   G(100) = P(S <= 200 | S > 100) / E[min(S-100, 100) | S>100] = (1/2) / ((100+100)/2) = 1/200
#   G(150) = P(S <= 250 | S > 150) / E[min(S-150, 100) | S>150] = (1/2) / ((50+100)/2)  = 1/150
#   G(250) = P(S <= 350 | S > 250) / ...                        = 0 / 100               = 0
#   G(950) = P(S <= 1050 | S > 950) / E[min(S-950, 100) | S>950] = 1 / 50               = 1/50
#   G(1000) and beyond: no sample is larger; index 0 (no sample says the job is about to end)
TOY = [100.0, 200.0, 1000.0]
TOY_INDEX = {0.0: 1 / 300, 100.0: 1 / 200, 150.0: 1 / 150, 250.0: 0.0, 950.0: 1 / 50, 1000.0: 0.0, 5000.0: 0.0}


def test_index_on_a_toy_distribution() -> None:
    g = GittinsIndex(TOY[::-1], quantum=100.0)
    a = np.array(list(TOY_INDEX))
    np.testing.assert_allclose(g(a), list(TOY_INDEX.values()), rtol=1e-12, atol=0)
    assert float(g(150.0)) == pytest.approx(1 / 150)
    points, values = g.grid()
    assert points.tolist() == [0.0, 100.0, 200.0, 1000.0]
    np.testing.assert_allclose(values, [1 / 300, 1 / 200, 0.0, 0.0])


def _brute(samples: list[float], a: float, d: float) -> float:
    alive = [s for s in samples if s > a]
    if not alive:
        return 0.0
    p = sum(1 for s in alive if s - a <= d) / len(alive)
    e = sum(min(s - a, d) for s in alive) / len(alive)
    return p / e


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=40), st.lists(st.integers(0, 6000), min_size=1,
       max_size=10), st.integers(1, 3000))
def test_index_matches_the_definition(samples, ages, quantum) -> None:
    g = GittinsIndex([float(s) for s in samples], float(quantum))
    got = g(np.array(ages, dtype=float))
    want = [_brute([float(s) for s in samples], float(a), float(quantum)) for a in ages]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)


def _aged(p: TiresiasGittins, attained: list[float], submit: list[float] | None = None) -> JobTable:
    """Jobs the policy first saw at 0 GPU-s, waiting now with ``attained`` GPU-seconds since then."""
    submit = submit or [0.0] * len(attained)
    t = JobTable([job(i, s, 1, 10_000) for i, s in enumerate(submit)])
    t.status[:] = JobStatus.QUEUED
    p.order(t, np.arange(t.n), 0.0)
    t.attained[:] = attained
    t.executed[:] = attained
    t.last_stop[:] = attained
    return t


def test_order_within_a_queue_is_by_index_highest_first() -> None:
    # All four jobs sit in queue 0 (threshold 10,000 GPU-s) and the quantum is 100: by the toy
    # index the job at 150 GPU-s goes first (1/150), then 100 (1/200), then 0 (1/300), then 250 (0).
    p = TiresiasGittins(queues=(10_000.0,), prior=TOY, quantum=100.0, index_form="paper")
    t = _aged(p, [0.0, 100.0, 150.0, 250.0])
    assert p.order(t, np.arange(4), 300.0).tolist() == [2, 1, 0, 3]


def test_tiresias_index_on_the_toy_distribution() -> None:
    # Tiresias' simulator evaluates at one GPU-second before each sample u, with its formula:
    #   u=100 (x=99):  lo=0, hi=1; p = round(1/3, 5) = 0.33333; e = floor((100 + 2 x 100) / 3) = 100
    #                  -> round(0.33333e6 / 100, 4) = 3333.3
    #   u=200 (x=199): lo=1, hi=2; p = 0.5; e = floor((200 + 1 x 100) / 2) = 150 -> 3333.3333
    #   u=1000 (x=999): x + D passes the largest sample less one, so hi = n - 1 = 2 = lo -> 0
    # A job below u gets u's value; at or past the largest sample, 0.
    g = GittinsIndex(TOY, quantum=100.0)
    points, values = g.tiresias_grid()
    assert points.tolist() == TOY
    np.testing.assert_allclose(values, [3333.3, 3333.3333, 0.0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(g.lookup(np.array([0.0, 99.5, 100.0, 150.0, 250.0, 1000.0, 5000.0])),
                               [3333.3, 3333.3, 3333.3333, 3333.3333, 0.0, 0.0, 0.0], rtol=0, atol=1e-9)


def _tiresias_rank(data: list[int], num: int, delta: int, a: int) -> float:
    """A transcription of Tiresias' ``cal_r_gittins_index`` (run_sim.py), Python 2 division made explicit."""
    if a > data[-1] - 1:
        return 0.0
    idx = next(i for i, x in enumerate(data) if x > a)
    next_a = a + delta
    idx_delta = num - 1 if next_a > data[-1] - 1 else next(i for i, x in enumerate(data) if x > next_a)
    p = round(((idx_delta - idx) * 1.0) / (num - idx), 5)
    e_sum = sum(data[idx:idx_delta]) + delta * (num - idx_delta)
    e = round(e_sum // (num - idx), 5)
    return round(p * 1000000 / e, 4)


def test_tiresias_index_matches_tiresias_code_on_its_prior(shared_data: Path) -> None:
    data = sorted(int(v) for v in read_gittins_prior(shared_data / "tiresias" / "yarn-gput1000.csv"))
    g = GittinsIndex(np.asarray(data, dtype=float), quantum=3250.0)
    points, values = g.tiresias_grid()
    want = [_tiresias_rank(data, len(data), 3250, v - 1) for v in points.astype(int).tolist()]
    np.testing.assert_allclose(values, want, rtol=1e-9, atol=1e-9)
    # get_gittins_index: the value of the first sample above the attained GPU-seconds.
    ages = np.array([0.0, 120.0, 121.0, 3000.0, 157_110.0, 157_111.0, 53_294_624.0, 6e7])
    firsts = [next((i for i, x in enumerate(data) if x > a), None) for a in ages]
    np.testing.assert_allclose(g.lookup(ages), [0.0 if i is None else want[int(np.searchsorted(points, data[i]))]
                                                for i in firsts], rtol=1e-9, atol=1e-9)


def test_queues_come_before_the_index_and_ties_go_to_the_earliest_submit() -> None:
    # Threshold 200: the job at 250 GPU-s is in queue 1 and goes last whatever its index. Jobs 1
    # and 3 have the same attained service and index: job 3 was submitted first. With Tiresias'
    # index, 100 and 150 GPU-s fall on the same step (below the sample 200): a tie too.
    p = TiresiasGittins(queues=(200.0,), prior=TOY, quantum=100.0, index_form="paper")
    t = _aged(p, [250.0, 0.0, 150.0, 0.0], submit=[0.0, 20.0, 0.0, 10.0])
    assert p.order(t, np.arange(4), 300.0).tolist() == [2, 3, 1, 0]
    p = TiresiasGittins(queues=(200.0,), prior=TOY, quantum=100.0)
    t = _aged(p, [100.0, 150.0, 0.0], submit=[20.0, 10.0, 0.0])
    assert p.order(t, np.arange(3), 300.0).tolist() == [1, 0, 2]


def test_index_counts_service_since_the_last_reset() -> None:
    # A promoted job's index is taken from zero again (Tiresias zeroes executed_time). With P = 1
    # and threshold 100, job 0 ran 0..150 and is promoted at 0 + 2 x 150 = 300, with 0 GPU-s since
    # the reset: G(0) = 1/300. Job 1 (queue 0, 50 GPU-s) has G(50) = 1 / (50 + 2 x 100) = 1/250,
    # so it goes first; job 0's total 150 GPU-s would have given it G(150) = 1/150 and the lead.
    p = TiresiasGittins(queues=(100.0,), promote_knob=1.0, prior=TOY, quantum=100.0, index_form="paper")
    t = JobTable([job(0, 0, 1, 9000), job(1, 0, 1, 9000)])
    rows = np.arange(2)
    p.order(t, rows, 0.0)
    t.status[0] = JobStatus.RUNNING
    t.attained[0] = t.executed[0] = 150.0
    p.order(t, rows, 150.0)
    t.status[0] = JobStatus.QUEUED
    t.last_stop[0] = 150.0
    t.attained[1] = t.executed[1] = 50.0
    t.status[1] = JobStatus.QUEUED
    t.last_stop[1] = 250.0
    assert p.order(t, rows, 300.0).tolist() == [1, 0]
    assert p.queue_of(rows).tolist() == [0, 0]
    assert p.summary()["promotions"] == 1


def test_quantum_defaults_to_the_first_threshold() -> None:
    assert TiresiasGittins(queues=(3250.0, 7200.0), prior=TOY).quantum == 3250.0
    assert TiresiasGittins(prior=TOY).quantum == 3600.0
    with pytest.raises(InputError):
        TiresiasGittins(prior=TOY, quantum=0.0)


def test_prior_file_header_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "prior.csv"
    f.write_text("duration\n100\n\n200,extra\n1000\n")
    assert read_gittins_prior(f).tolist() == [100.0, 200.0, 1000.0]
    p = make_policy("tiresias-gittins", {"gittins_prior": str(f), "queues": (100.0,)})
    assert isinstance(p, TiresiasGittins)
    assert p.summary()["gittins_samples"] == 3 and p.summary()["gittins_quantum"] == 100.0
    bad = tmp_path / "bad.csv"
    bad.write_text("duration\n100\nabc\n")
    with pytest.raises(InputError, match=r"bad\.csv.*line 3"):
        read_gittins_prior(bad)
    neg = tmp_path / "neg.csv"
    neg.write_text("5\n-1\n")
    with pytest.raises(InputError, match="line 2"):
        read_gittins_prior(neg)
    empty = tmp_path / "empty.csv"
    empty.write_text("duration\n")
    with pytest.raises(InputError, match="no GPU-time"):
        read_gittins_prior(empty)
    with pytest.raises(InputError, match="not found"):
        read_gittins_prior(tmp_path / "missing.csv")


def test_real_prior_file(shared_data: Path) -> None:
    samples = read_gittins_prior(shared_data / "tiresias" / "yarn-gput1000.csv")
    assert samples.size == 1001 and samples.min() == 121.0


def test_online_learning_falls_back_to_las_until_enough_samples() -> None:
    p = TiresiasGittins(queues=(10_000.0,), quantum=100.0, min_samples=3, index_form="paper")
    t = JobTable([job(i, 0, 1, 10_000) for i in range(7)])
    rows = np.arange(4)
    t.status[:] = JobStatus.QUEUED
    p.order(t, rows, 0.0)
    t.attained[:4] = [0.0, 100.0, 150.0, 250.0]
    # No samples yet: 2D-LAS order (the list order: arrival).
    assert p.order(t, rows, 0.0).tolist() == [0, 1, 2, 3]
    assert p.index() is None
    for r, s in zip((4, 5, 6), TOY, strict=True):
        t.attained[r] = s
        p.on_finish(t, r, 0.0)
    # Three completed jobs with GPU-times 100, 200, 1000: the toy distribution.
    assert p.order(t, rows, 1.0).tolist() == [2, 1, 0, 3]
    s = p.summary()
    assert s["gittins_source"] == "online" and s["gittins_samples"] == 3
    assert s["gittins_las_fallback_decisions"] == 2 and s["gittins_index"] == "paper"


def test_prior_is_not_overwritten_by_completions() -> None:
    p = TiresiasGittins(queues=(10_000.0,), prior=TOY, quantum=100.0)
    t = _aged(p, [5000.0])
    p.on_finish(t, 0, 0.0)
    assert p.index() is not None and p.index().size == 3


def test_gittins_sim_end_to_end(tmp_path: Path) -> None:
    # Toy prior, one GPU, round mode. Everything completes and the policy reports itself.
    f = tmp_path / "prior.csv"
    f.write_text("\n".join(str(v) for v in TOY) + "\n")
    jobs = [job(0, 0, 1, 400), job(1, 0, 1, 120), job(2, 50, 1, 60)]
    run = RunSpec.flat(policy="tiresias-gittins", placement="tiresias", round_seconds=50, restart_overhead=0,
                       queues=(100.0,), gittins_prior=str(f))
    _, summary = simulate(jobs, parse_cluster_spec("1x1"), DefaultModel(), run)
    assert summary["completed"] == 3
    assert summary["gittins_source"].startswith("prior") and summary["demotions"] >= 1
