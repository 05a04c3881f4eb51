"""Invariants of the learned estimator under any observation sequence (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tesserae.profiles.learned import LearnedConfig, RateEstimator

TYPES = ("k80", "p100", "v100")
JOBS = (1, 2, 3, 4)

finite_rate = st.floats(min_value=1e-3, max_value=1e5, allow_nan=False)
hostile_number = st.one_of(st.just(math.inf), st.just(-math.inf), st.just(math.nan),
                           st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False),
                           st.floats(min_value=1e12, max_value=1e300, allow_nan=False, allow_infinity=False))


@st.composite
def observation(draw: st.DrawFn, job: st.SearchStrategy[int] = st.sampled_from(JOBS)) -> dict:
    j = draw(job)
    partner = draw(st.one_of(st.none(), st.sampled_from([p for p in JOBS if p != j])))
    return {"job_id": j, "iterations": draw(finite_rate) * 100.0, "seconds": 100.0,
            "gpu_type": draw(st.sampled_from(TYPES)), "consolidated": draw(st.booleans()), "partner": partner}


@st.composite
def hostile(draw: st.DrawFn) -> dict:
    """A report the estimator must refuse: not a finite positive rate, absurd, too short, stale, or unknown."""
    kind = draw(st.sampled_from(["iterations", "seconds", "short", "stale", "gpu", "partner", "job"]))
    obs = {"job_id": 9, "iterations": 1000.0, "seconds": 100.0, "gpu_type": "v100", "run": 5}
    if kind == "iterations":
        obs["iterations"] = draw(hostile_number)
    elif kind == "seconds":
        obs["seconds"] = draw(st.one_of(st.just(math.inf), st.just(math.nan),
                                        st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False)))
    elif kind == "short":
        obs["seconds"] = draw(st.floats(min_value=0.0, max_value=4.9))
    elif kind == "stale":
        obs["run"] = draw(st.integers(min_value=-5, max_value=4))
    elif kind == "gpu":
        obs["gpu_type"] = draw(st.text(max_size=8).filter(lambda s: s not in TYPES))
    elif kind == "partner":
        obs["partner"] = draw(st.sampled_from([9, 404]))
    else:
        obs["job_id"] = draw(st.integers(min_value=100, max_value=10**6))
    return obs


def estimator(hints: bool) -> RateEstimator:
    est = RateEstimator(TYPES, config=LearnedConfig(hints=hints))
    for j in JOBS:
        est.register(j, 1 + j % 2, "family" if j % 2 else None)
    est.register(9, 1, "family")
    est.start_run(9, 5)
    return est


def snapshot(est: RateEstimator, jobs: tuple[int, ...] = JOBS) -> list[float]:
    out = []
    for j in jobs:
        for g in TYPES:
            out.append(est.estimate(j, g).rate)
            out.append(est.estimate(j, g, consolidated=False).rate)
            for p in jobs:
                if p != j:
                    out.append(est.estimate(j, g, partner=p).rate)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(observation(), max_size=40), st.booleans(), st.integers(min_value=1, max_value=4))
def test_estimates_stay_within_their_bounds(observations: list[dict], hints: bool, refresh_every: int) -> None:
    est = estimator(hints)
    prior = estimator(hints)
    bound = est.config.ratio_bound**2 * (1 + 1e-9)
    for i, obs in enumerate(observations):
        est.observe(**obs)
        if i % refresh_every == 0:
            est.refresh()
    est.refresh()
    for j in JOBS:
        alone = np.array([est.estimate(j, g).rate for g in TYPES])
        base = np.array([prior.estimate(j, g).rate for g in TYPES])
        assert np.isfinite(alone).all() and (alone > 0).all()
        # a job's speed-up between any two types stays within ratio_bound^2 of its prior's
        rel = (alone[:, None] / alone[None, :]) / (base[:, None] / base[None, :])
        assert (rel <= bound).all()
        for g in TYPES:
            a = est.estimate(j, g).rate
            assert est.estimate(j, g, consolidated=False).rate <= a * (1 + 1e-9)
            for p in JOBS:
                if p != j:
                    f = est.estimate(j, g, partner=p).rate / a
                    assert est.config.pair_floor * (1 - 1e-9) <= f <= 1 + 1e-9
        for sd in (est.estimate(j, g).sd for g in TYPES):
            assert math.isfinite(sd) and sd >= 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(observation(), max_size=25), st.lists(hostile(), min_size=1, max_size=15), st.booleans(),
       st.randoms(use_true_random=False))
def test_a_hostile_job_never_changes_another_jobs_estimate(honest: list[dict], bad: list[dict], hints: bool,
                                                          rnd: object) -> None:
    """Job 9's hostile reports, interleaved anywhere with the others' honest ones, are all refused and leave
    every estimate exactly as without them."""
    clean, mixed = estimator(hints), estimator(hints)
    for obs in honest:
        clean.observe(**obs)
    sequence: list[tuple[str, dict]] = [("ok", o) for o in honest]
    for o in bad:  # anywhere among the honest ones, which keep their order
        sequence.insert(rnd.randint(0, len(sequence)), ("bad", o))  # type: ignore[attr-defined]
    refused = 0
    for kind, obs in sequence:
        why = mixed.observe(**obs)
        if kind == "bad":
            assert why is not None
            refused += 1
    clean.refresh()
    mixed.refresh()
    assert sum(mixed.rejected.values()) - sum(clean.rejected.values()) == refused
    assert snapshot(mixed) == snapshot(clean)
