"""Pair factors per GPU type (``learned_pairs``): learned from the pair's measurements on each type, with the
cross-type factor and the jobs' families as the prior, shown to the scheduler type by type."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tesserae.profiles.learned import RateEstimator
from tesserae.profiles.learned_classes import ClassKeys, ClassModel, encode

TYPES = ("k80", "v100")


def feed(est: RateEstimator, job: int, gpu: str, rate: float, partner: int | None = None, times: int = 5) -> None:
    for _ in range(times):
        assert est.observe(job, rate * 100.0, 100.0, gpu, partner=partner) is None
    est.refresh()


def shown_factor(est: RateEstimator, job: int, partner: int, gpu: str) -> float:
    """The pair factor the scheduler sees (class keys through the class model): rate next to the partner
    over the rate alone, on ``gpu``."""
    slots = np.array([est.slot(job), est.slot(partner)])
    shown = est.presented(slots)
    keys = ClassKeys(est.T)
    keys.update(slots, shown["mean"], shown["runnable"], shown["a"], shown["b"], shown["spread"], shown["tags"])
    model = ClassModel(est.gpu_types)
    k1, k2 = keys.key(int(slots[0])), keys.key(int(slots[1]))
    return model.rate(k1, 1, gpu, partner=(k2, 1)) / model.rate(k1, 1, gpu)


def test_a_pair_fast_on_one_type_and_harmful_on_another_is_seen_as_such() -> None:
    """Jobs 1 and 2 keep 0.9 each next to the other on a v100 and 0.3 on a k80: the k80 is vetoed, and the
    scheduler sees the v100 pair as the good pair it is (one factor for both types averaged them)."""
    est = RateEstimator(TYPES)
    for j in (1, 2):
        est.register(j, 1)
        for g in TYPES:
            feed(est, j, g, 10.0)
    for j, p in ((1, 2), (2, 1)):
        feed(est, j, "v100", 9.0, partner=p)
        feed(est, j, "k80", 3.0, partner=p)
    assert est.vetoes == 1
    assert shown_factor(est, 1, 2, "k80") == 0.0
    assert shown_factor(est, 1, 2, "v100") > 0.8
    assert est.estimate(1, "v100", partner=2).rate == pytest.approx(9.0, rel=0.05)
    assert est.estimate(1, "k80", partner=2).rate == pytest.approx(3.0, rel=0.1)


def test_a_new_pair_of_two_families_takes_their_per_type_factors() -> None:
    """Members of families A and B share well on v100 (0.95) and badly on k80 (0.55); a new A and a new B,
    never measured together, are predicted and shown so, type by type."""
    est = RateEstimator(TYPES)
    for i in range(5):
        for fam, j in (("A", 10 + i), ("B", 20 + i)):
            est.register(j, 1, fam)
            for g in TYPES:
                feed(est, j, g, 10.0, times=2)
    for i in range(4):
        g = TYPES[i % 2]
        f = 5.5 if g == "k80" else 9.5
        feed(est, 10 + i, g, f, partner=20 + i)
        feed(est, 20 + i, g, f, partner=10 + i)
    assert est.vetoes == 0
    k80 = est.estimate(14, "k80", partner=24)
    v100 = est.estimate(14, "v100", partner=24)
    assert not k80.measured and not v100.measured
    assert k80.rate / est.estimate(14, "k80").rate < 0.7
    assert v100.rate / est.estimate(14, "v100").rate > 0.85
    assert shown_factor(est, 14, 24, "k80") < 0.7
    assert shown_factor(est, 14, 24, "v100") > 0.8


def test_a_pair_measured_on_one_type_informs_the_other_shrunk_by_its_count() -> None:
    """A pair's own residual measured on k80 moves its v100 estimate a little (the residual's cross-type
    share), and its k80 one almost all the way; the v100 estimate stays less certain than the k80 one."""
    est = RateEstimator(TYPES)
    for j in (1, 2, 3, 4):
        est.register(j, 1)
        for g in TYPES:
            feed(est, j, g, 10.0)
    for j, p in ((3, 4), (4, 3)):  # the population's pairs keep 0.8
        for g in TYPES:
            feed(est, j, g, 8.0, partner=p)
    before = est.estimate(1, "v100", partner=2)
    for j, p in ((1, 2), (2, 1)):
        feed(est, j, "k80", 5.5, partner=p, times=10)
    here, there = est.estimate(1, "k80", partner=2), est.estimate(1, "v100", partner=2)
    assert here.rate == pytest.approx(5.5, rel=0.1) and here.measured and not there.measured
    assert here.rate < there.rate < before.rate
    assert there.sd > here.sd


def test_keys_carry_per_type_sharing_terms_and_stay_short_when_uniform() -> None:
    model = ClassModel(TYPES)
    assert encode([0, 0], [-3, -3], [1, 1], 0) == "~0,0/-3,1,0"
    key = encode([0, 0], [-8, -1], [0, -2], 0)
    assert key == "~0,0/-8;-1,0;-2,0"
    other = encode([0, 0], -1, [-4, 0], 0)
    assert model.rate(key, 1, "k80", partner=(other, 1)) == pytest.approx(math.exp(-0.8 - 0.4))
    assert model.rate(key, 1, "v100", partner=(other, 1)) == pytest.approx(math.exp(-0.1))
    with pytest.raises(KeyError):
        model.rate(encode([0, 0], [1, 2, 3], 0, 0), 1, "k80")
    keys = ClassKeys(2)
    none = np.zeros(0, dtype=np.int64)
    assert keys.update(none, np.zeros((0, 2)), np.zeros((0, 2), bool), np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0),
                       np.zeros((0, 4), dtype=np.int64)).size == 0


def test_a_state_saved_before_per_type_terms_still_loads() -> None:
    est = RateEstimator(TYPES)
    for j in (1, 2):
        est.register(j, 1, "fam")
        feed(est, j, "v100", 10.0)
    feed(est, 1, "v100", 6.0, partner=2)
    state = json.loads(json.dumps(est.to_state()))
    back = RateEstimator.from_state(state)
    assert back.estimate(1, "v100", partner=2).rate == pytest.approx(est.estimate(1, "v100", partner=2).rate)
    T = len(TYPES)
    for job in state["jobs"]:
        job["posterior"] = job["posterior"][: -4 * T]
    state["fits"]["pair"] = state["fits"]["pair"][:2]
    state["fits"]["families"] = [f[:7] for f in state["fits"]["families"]]
    old = RateEstimator.from_state(state)
    assert old.estimate(1, "v100").rate == pytest.approx(est.estimate(1, "v100").rate)


pair_obs = st.tuples(st.sampled_from([(1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2)]), st.sampled_from(TYPES),
                     st.floats(min_value=0.0, max_value=1.2))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(pair_obs, max_size=30), st.booleans())
def test_shown_pair_factors_stay_within_floor_and_one_per_type(obs: list, hints: bool) -> None:
    """Whatever pairs report on whatever types (stalls included), every per-type factor the scheduler sees and
    every estimate lies within [pair_floor, 1] (0 where vetoed), with a finite uncertainty."""
    est = RateEstimator(TYPES)
    for j in (1, 2, 3):
        est.register(j, 1, "fam" if hints else None)
        for g in TYPES:
            feed(est, j, g, 10.0, times=2)
    for (j, p), g, f in obs:
        est.observe(j, 1000.0 * f, 100.0, g, partner=p)
    est.refresh()
    floor = est.config.pair_floor
    for j, p in ((1, 2), (2, 3), (3, 1)):
        for g in TYPES:
            shown = shown_factor(est, j, p, g)
            assert shown == 0.0 or floor * (1 - 1e-9) <= shown <= 1 + 1e-9
            e = est.estimate(j, g, partner=p)
            assert floor * (1 - 1e-9) <= e.rate / est.estimate(j, g).rate <= 1 + 1e-9
            assert math.isfinite(e.sd) and e.sd > 0
