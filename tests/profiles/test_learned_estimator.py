"""The learned-throughput estimator: what it learns, from whom, and what it refuses."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tesserae.profiles.learned import GENERIC, LearnedConfig, RateEstimator
from tesserae.profiles.learned_classes import ClassKeys, ClassModel, encode
from tesserae.profiles.table_model import TableModel

TYPES = ("k80", "p100", "v100")


def feed(est: RateEstimator, job: int, gpu: str, rate: float, times: int = 5, noise: float = 0.0,
         seed: int = 0, partner: int | None = None) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(times):
        r = rate * math.exp(noise * rng.standard_normal())
        assert est.observe(job, r * 100.0, 100.0, gpu, partner=partner) is None
    est.refresh()


def test_a_measured_rate_is_learned_and_flagged_measured() -> None:
    est = RateEstimator(TYPES)
    est.register(1, 1)
    before = est.estimate(1, "p100")
    assert not before.measured and before.source == "model"
    feed(est, 1, "p100", 12.5, times=10, noise=0.05)
    e = est.estimate(1, "p100")
    assert e.measured and e.source == "measured"
    assert e.rate == pytest.approx(12.5, rel=0.05)
    assert e.sd < before.sd


def test_noise_is_pooled_from_repeated_observations() -> None:
    est = RateEstimator(TYPES, config=LearnedConfig(noise=0.3))
    for j in range(60):
        est.register(j, 1)
        feed(est, j, "v100", 10.0 + j, times=6, noise=0.02, seed=j)
    assert math.sqrt(est.tau2) < 0.1  # far below the configured 0.3 it started from


def test_a_family_transfers_its_speed_ups_to_a_new_member() -> None:
    """Two jobs of one declared type: what one showed on v100 predicts the other's v100 rate."""
    est = RateEstimator(TYPES)
    for j in range(3):
        est.register(j, 1, "resnet-ish")
        feed(est, j, "k80", 2.0 * (j + 1), times=4, seed=j)
        feed(est, j, "v100", 20.0 * (j + 1), times=4, seed=10 + j)  # 10x faster on v100
    est.register(9, 1, "resnet-ish")
    feed(est, 9, "k80", 3.0, times=4)
    e = est.estimate(9, "v100")
    assert not e.measured and e.source == "family"
    assert e.rate == pytest.approx(30.0, rel=0.25)  # the built-in prior alone would say ~10
    other = RateEstimator(TYPES)
    other.register(9, 1, "resnet-ish")
    feed(other, 9, "k80", 3.0, times=4)
    assert other.estimate(9, "v100").rate < 0.5 * e.rate


def test_without_hints_the_population_carries_the_structure() -> None:
    est = RateEstimator(TYPES, config=LearnedConfig(hints=False))
    rng = np.random.default_rng(3)
    for j in range(30):  # every job 8x faster on v100 than on k80, at its own scale
        scale = math.exp(rng.normal(0, 1))
        est.register(j, 1, "anything")
        feed(est, j, "k80", scale, times=3, seed=j)
        feed(est, j, "v100", 8 * scale, times=3, seed=100 + j)
    est.register(99, 1, "anything")
    feed(est, 99, "k80", 1.5, times=3)
    e = est.estimate(99, "v100")
    assert e.source == "population"
    assert e.rate == pytest.approx(12.0, rel=0.3)


def test_a_profiled_declared_type_is_the_prior() -> None:
    profile = TableModel(name="p", reference_gpu_type="v100",
                         alone={("bert", 1, "k80", True): 1.0, ("bert", 1, "p100", True): 3.0,
                                ("bert", 1, "v100", True): 6.0})
    est = RateEstimator(TYPES, prior_model=profile)
    est.register(1, 1, "bert")
    est.register(2, 1, "unknown-model")
    e = est.estimate(1, "p100")
    assert e.source == "profile" and e.rate == pytest.approx(3.0)
    assert est.estimate(2, "p100").source == "model"


@pytest.mark.parametrize("obs, reason", [
    (dict(iterations=-5.0, seconds=100.0), "negative"),
    (dict(iterations=math.inf, seconds=100.0), "not a number"),
    (dict(iterations=math.nan, seconds=100.0), "not a number"),
    (dict(iterations="lots", seconds=100.0), "not a number"),
    (dict(iterations=10.0, seconds=0.5), "too short"),
    (dict(iterations=1e15, seconds=100.0), "absurd"),
    (dict(iterations=10.0, seconds=100.0, gpu_type="tpu"), "unknown GPU type"),
    (dict(iterations=10.0, seconds=100.0, partner=77), "unknown partner"),
    (dict(iterations=10.0, seconds=100.0, partner=1), "unknown partner"),
    (dict(iterations=10.0, seconds=100.0, run=0), "stale run"),
    (dict(job_id=404, iterations=10.0, seconds=100.0), "unknown job"),
])
def test_hostile_observations_are_refused_counted_and_change_nothing(obs: dict, reason: str) -> None:
    est = RateEstimator(TYPES)
    est.register(1, 1)
    est.register(2, 1)
    est.start_run(1, 3)
    feed(est, 1, "v100", 10.0)
    feed(est, 2, "v100", 4.0)
    before = (json.dumps(est.to_state()["jobs"]), est.describe(1), est.describe(2))
    args = {"job_id": 1, "gpu_type": "v100", **obs}
    assert est.observe(**args) == reason
    est.refresh()
    assert est.rejected[reason] == 1
    assert (json.dumps(est.to_state()["jobs"]), est.describe(1), est.describe(2)) == before


def test_a_rate_far_off_the_jobs_own_history_is_refused() -> None:
    est = RateEstimator(TYPES)
    est.register(1, 1)
    feed(est, 1, "v100", 10.0)
    assert est.observe(1, 10.0 * 100 * 5000, 100.0, "v100") == "absurd"
    assert est.observe(1, 10.0 * 100 * 200, 100.0, "v100") == "inconsistent"
    assert est.observe(1, 10.0 * 100 * 1.2, 100.0, "v100") is None


def test_a_job_cannot_make_itself_look_far_faster_on_the_best_gpus() -> None:
    """Claiming 500x the speed-up the prior gives between k80 and v100 (within the absurdity bound of each
    report) leaves it within ratio_bound^2 of the prior's."""
    est = RateEstimator(TYPES)
    est.register(1, 1)
    feed(est, 1, "k80", 1.0, times=20)
    feed(est, 1, "v100", 900.0, times=20)
    prior = RateEstimator(TYPES)
    prior.register(1, 1)
    prior_ratio = prior.estimate(1, "v100").rate / prior.estimate(1, "k80").rate
    ratio = est.estimate(1, "v100").rate / est.estimate(1, "k80").rate
    assert ratio <= prior_ratio * est.config.ratio_bound**2 * 1.0001
    assert ratio < 900


def test_pair_factors_are_learned_and_a_harmful_pair_is_vetoed() -> None:
    est = RateEstimator(("v100",))
    for j in (1, 2, 3):
        est.register(j, 1)
        feed(est, j, "v100", 10.0)
    feed(est, 1, "v100", 8.0, partner=3)  # 1 and 3 share well: 0.8 + 0.8
    feed(est, 3, "v100", 8.0, partner=1)
    feed(est, 1, "v100", 3.0, partner=2)  # 1 and 2 are slower together than alone: 0.3 + 0.4 < 1
    feed(est, 2, "v100", 4.0, partner=1)
    good, bad = est.estimate(1, "v100", partner=3), est.estimate(1, "v100", partner=2)
    assert good.measured and bad.measured and bad.rate < good.rate
    assert est.vetoes == 1
    tags = est.tags(np.array([est.slot(1), est.slot(2), est.slot(3)]))
    common = set(tags[0][tags[0] >= 0]) & set(tags[1][tags[1] >= 0])
    assert common and not set(tags[2][tags[2] >= 0])
    est.finish(2)
    assert not (est.tags(np.array([est.slot(1)])) >= 0).any()  # a finished partner takes the veto along


def test_a_veto_holds_on_its_gpu_type_only() -> None:
    """A pair measured slower than alone on k80 cannot share k80s any more, but may still share a v100 (where
    pairs of the same two jobs often gain: Gavel's table)."""
    est = RateEstimator(("k80", "v100"))
    for j in (1, 2):
        est.register(j, 1)
        for g in ("k80", "v100"):
            feed(est, j, g, 10.0)
    feed(est, 1, "k80", 3.0, partner=2)
    feed(est, 2, "k80", 3.0, partner=1)
    assert est.vetoes == 1
    slots = np.array([est.slot(1), est.slot(2)])
    shown = est.presented(slots)
    keys = ClassKeys(2)
    keys.update(slots, shown["x"], shown["runnable"], shown["a"], shown["b"], shown["spread"], shown["tags"])
    k1, k2 = keys.key(int(slots[0])), keys.key(int(slots[1]))
    model = ClassModel(("k80", "v100"))
    assert model.rate(k1, 1, "k80", partner=(k2, 1)) == 0.0
    assert model.rate(k1, 1, "v100", partner=(k2, 1)) > 0.0


def test_a_stall_next_to_a_partner_vetoes_the_pair() -> None:
    est = RateEstimator(("v100",))
    for j in (1, 2):
        est.register(j, 1)
        feed(est, j, "v100", 10.0)
    assert est.observe(1, 0.0, 300.0, "v100", partner=2) is None
    assert est.observe(2, 0.0, 300.0, "v100", partner=1) is None
    est.refresh()
    assert est.stalls == 2 and est.vetoes == 1
    assert est.estimate(1, "v100", partner=2).rate <= 10.0 * 0.1


def test_a_pair_on_a_type_its_jobs_never_ran_alone_on_is_judged() -> None:
    """Newcomers to a GPU type: two jobs measured alone only on k80, then paired on v100 and slower there
    together than alone (judged against what their k80 runs say of their v100 rates, not against the
    pair's own figures): vetoed. A pair there that shares well is not."""
    est = RateEstimator(TYPES)
    for j in (1, 2, 3, 4):
        est.register(j, 1)
        feed(est, j, "k80", 5.0)
    alone = est.estimate(3, "v100").rate
    assert alone > 5.0  # the built-in model's shape: v100 is faster than k80
    feed(est, 1, "v100", 1.0, partner=2)  # 0.2 x its k80 rate, and less of its v100 one
    feed(est, 2, "v100", 1.0, partner=1)
    feed(est, 3, "v100", 0.8 * alone, partner=4)
    feed(est, 4, "v100", 0.8 * alone, partner=3)
    assert est.vetoes == 1
    tags = est.tags(np.array([est.slot(j) for j in (1, 2, 3, 4)]))
    assert set(tags[0][tags[0] >= 0]) & set(tags[1][tags[1] >= 0])
    assert not (tags[2:] >= 0).any()


def test_a_job_measured_only_in_pairs_is_kept_alone_until_measured_then_judged() -> None:
    """Two jobs paired on arrival have no alone rate to judge their pair against: they are shown as unable
    to share until one alone run each, after which the harmful pair is vetoed."""
    est = RateEstimator(("v100",))
    for j in (1, 2):
        est.register(j, 1)
    feed(est, 1, "v100", 2.0, partner=2)
    feed(est, 2, "v100", 2.0, partner=1)
    slots = np.array([est.slot(1), est.slot(2)])
    shown = est.presented(slots)
    model = ClassModel(("v100",))
    keys = ClassKeys(1)
    keys.update(slots, shown["x"], shown["runnable"], shown["a"], shown["b"], shown["spread"], shown["tags"])
    k1, k2 = keys.key(int(slots[0])), keys.key(int(slots[1]))
    assert model.rate(k1, 1, "v100", partner=(k2, 1)) <= est.config.pair_floor * model.rate(k1, 1, "v100")
    assert shown["alone_first"].all() and est.vetoes == 0
    feed(est, 1, "v100", 10.0)
    feed(est, 2, "v100", 10.0)
    assert not est.presented(slots)["alone_first"].any()
    assert est.vetoes == 1


def test_exploration_bonus_needs_a_measurement_an_unmeasured_type_and_budget() -> None:
    est = RateEstimator(TYPES, config=LearnedConfig(explore_budget=0.05, explore_share=1.0, probe_seconds=300.0))
    est.register(1, 2)
    slot = np.array([est.slot(1)])
    assert not est.presented(slot)["bonus"].any()  # nothing measured yet: nothing to be optimistic against
    feed(est, 1, "k80", 1.0)
    assert not est.presented(slot)["bonus"].any()  # no budget: it has run nothing
    est.note_run(1, 2 * 300.0 / 0.05)  # enough GPU-seconds run for one 2-GPU probe
    shown = est.presented(slot)
    assert shown["bonus"][0].tolist() == [False, True, True]
    assert (shown["x"][0, 1:] > shown["mean"][0, 1:]).all()
    est.note_run(1, 600.0, exploring=True)  # the probe is spent
    assert not est.presented(slot)["bonus"].any()


def test_all_jobs_together_explore_within_the_share() -> None:
    """Each of four jobs has the budget of its own for a probe, but the four together may spend only
    ``explore_share`` of what they have run: the first ones (lowest slots) get it, the others wait; the
    probes spent, the room is gone."""
    est = RateEstimator(TYPES, config=LearnedConfig(explore_budget=0.1, explore_share=0.03, probe_seconds=300.0))
    for j in range(4):
        est.register(j, 1)
        feed(est, j, "k80", 1.0)
        est.note_run(j, 5000.0)  # 500 s of budget each; 4 x 5000 x 0.03 = 600 s together: two probes
    slots = np.array([est.slot(j) for j in range(4)])
    shown = est.presented(slots)
    assert shown["bonus"].any(axis=1).tolist() == [True, True, False, False]
    assert shown["pair_bonus"].tolist() == [True, True, False, False]
    for j in (0, 1):
        est.note_run(j, 300.0, exploring=True)
    assert not est.presented(slots)["bonus"].any()
    with pytest.raises(ValueError, match="explore_share"):
        LearnedConfig(explore_share=1.5)


def test_state_round_trips_through_json_and_stays_bounded() -> None:
    est = RateEstimator(TYPES, config=LearnedConfig(max_finished=3, max_partners=2))
    for j in range(8):
        est.register(j, 1, "fam" if j % 2 else None)
        feed(est, j, TYPES[j % 3], 5.0 + j, seed=j)
    for p in (1, 2, 3, 4):
        feed(est, 7, TYPES[1], 3.0, partner=p)
    est.start_run(6, 4)
    for j in range(5):
        est.finish(j)
    est.refresh()
    state = json.loads(json.dumps(est.to_state()))
    assert len(state["jobs"]) == 3 + 3  # 3 active + max_finished
    assert sum(1 for p in state["pairs"] if p[0] == 7) <= 2
    back = RateEstimator.from_state(state)
    for j in (5, 6, 7):
        for g in TYPES:
            assert back.estimate(j, g).rate == pytest.approx(est.estimate(j, g).rate, rel=1e-9)
    assert back.observe(6, 10.0, 100.0, "v100", run=3) == "stale run"
    with pytest.raises(ValueError):
        RateEstimator.from_state({"format": "something else"})
    broken = json.loads(json.dumps(state))
    broken["jobs"][0]["cnt"] = [1.0]
    with pytest.raises(ValueError):
        RateEstimator.from_state(broken)


def test_class_keys_decode_to_the_rates_they_encode() -> None:
    model = ClassModel(TYPES, "v100")
    key = encode([-20, "x", 0] if False else [-20, -(1 << 30), 0], -5, 2, -1)
    assert key == "~-20,x,0/-5,2,-1"
    assert model.rate(key, 1, "v100") == pytest.approx(1.0)
    assert model.rate(key, 1, "k80") == pytest.approx(math.exp(-2.0))
    assert model.rate(key, 1, "p100") == 0.0  # cannot run there
    other = encode([0, 0, 0], -3, -1, 0)
    assert model.rate(key, 1, "v100", partner=(other, 1)) == pytest.approx(math.exp(-0.5 - 0.1))
    assert model.rate(key, 1, "v100", consolidated=False) == pytest.approx(math.exp(-0.5))
    assert model.skew(key) == pytest.approx(math.exp(0.5) - 1)
    # tag 8 names a veto on GPU type 8 mod 3 = 2 (v100): those two cannot share a v100, but a k80 yes
    vetoed_a, vetoed_b = encode([0, 0, 0], -3, 0, 0, [8]), encode([0, 0, 0], -3, 0, 0, [8, 9])
    assert model.rate(vetoed_a, 1, "v100", partner=(vetoed_b, 1)) == 0.0
    assert model.rate(vetoed_a, 1, "k80", partner=(vetoed_b, 1)) > 0.0
    assert model.rate(vetoed_a, 1, "v100", partner=(other, 1)) > 0.0
    with pytest.raises(KeyError):
        model.rate("resnet50", 1, "v100")


def test_class_keys_change_only_past_the_hysteresis() -> None:
    keys = ClassKeys(1, max_tags=1)
    slots = np.array([0])
    none = np.array([[-1]])
    ok = np.array([[True]])

    def update(a: float) -> bool:
        return bool(keys.update(slots, np.array([[0.0]]), ok, np.array([a]), np.array([0.0]), np.array([0.0]),
                                none)[0])

    assert update(-0.50)  # new
    assert not update(-0.56)  # inside the bucket's margin
    assert not update(-0.44)
    assert update(-0.59)  # past half a step plus the hysteresis
    assert keys.key(0) == "~0/-6,0,0"


def test_generic_is_the_built_in_models_job() -> None:
    est = RateEstimator(("v100", "k80"))
    est.register(1, 1, None)
    est.register(2, 1, GENERIC)
    assert est.estimate(1, "k80").rate == pytest.approx(est.estimate(2, "k80").rate)
