"""Parallelism strategies: the chosen one is carried into rate(), and changing it is a restart."""

from __future__ import annotations

import pytest

from tesserae.config import RunSpec
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobSpec
from tesserae.profiles.colocation import ColocationTable
from tesserae.profiles.norm_speed import NormSpeedData, norm_speed_model
from tesserae.sim.metrics import job_records
from tesserae.sim.runner import simulate

# A large job "L" on 2 GPUs: S1 is its best strategy alone (1.0, S2 0.8); next to the small job "s",
# S1 gives (0.7, 0.6) (gain 0.3) and S2 gives (0.9, 0.7) (gain 0.6, the best pair strategy).
TABLE = ColocationTable(solo={("L", 2): [("S1", 1.0), ("S2", 0.8)]},
                        pairs={("L", 2, "S1", "s", 2): (0.7, 0.6), ("L", 2, "S2", "s", 2): (0.9, 0.7)})
MODEL = norm_speed_model(NormSpeedData(TABLE, {}, {("s", 2)}), name="toy strategies")


def test_rate_is_the_rate_of_the_given_strategy() -> None:
    rate = MODEL.rate
    assert rate("L", 2, "v100") == pytest.approx(1.0)
    assert rate("L", 2, "v100", strategy="S2") == pytest.approx(0.8)
    assert rate("L", 2, "v100", partner=("s", 2)) == pytest.approx(0.9)  # the model's choice: S2
    assert rate("L", 2, "v100", partner=("s", 2), strategy="S1") == pytest.approx(0.7)
    assert rate("s", 2, "v100", partner=("L", 2), partner_strategy="S1") == pytest.approx(0.6)
    assert rate("s", 2, "v100", partner=("L", 2), partner_strategy="S2") == pytest.approx(0.7)
    assert rate("L", 2, "v100", strategy="unknown") == 0.0
    assert MODEL.strategy_for("L", 2) == "S1" and MODEL.strategy_for("L", 2, ("s", 2)) == "S2"


def _run(strategy_choice: bool):
    jobs = [JobSpec(0, 0.0, 2, "L", 1000.0), JobSpec(1, 100.0, 2, "s", 1000.0)]
    run = RunSpec.flat(policy="fifo", placement="tesserae", packing=True, round_seconds=300, restart_overhead=30,
                       strategy_choice=strategy_choice)
    res, summary = simulate(jobs, parse_cluster_spec("1x2"), MODEL, run)
    return {r["job_id"]: r for r in job_records(res)}, summary


def test_strategy_change_is_charged_as_a_restart() -> None:
    # L runs alone with S1 from 0 (restart 30 s: 270 iterations by 300). At 300 s "s" joins it; the
    # pair is worth S2 (0.9 it/s against S1's 0.7: more than the 10% a relaunch must gain), so L is
    # relaunched with it: 30 s more without progress, then 0.9 it/s.
    recs, summary = _run(strategy_choice=True)
    assert summary["strategy_changes"] == 1 and summary["packed_pairs_per_round_mean"] > 0
    assert recs[0]["finish_time"] == pytest.approx(330.0 + (1000.0 - 270.0) / 0.9)
    assert recs[0]["migrations"] == 0


def test_fixed_strategy_runs_the_pair_at_that_strategy_rate() -> None:
    # L keeps S1 next to "s": no relaunch, and the pair runs at S1's measured rates (0.7 and 0.6),
    # not at the model's best-strategy rates.
    recs, summary = _run(strategy_choice=False)
    assert summary["strategy_changes"] == 0
    assert recs[0]["finish_time"] == pytest.approx(300.0 + (1000.0 - 270.0) / 0.7)
    s_done = 0.6 * ((300.0 + 730.0 / 0.7) - 330.0)
    assert recs[1]["finish_time"] == pytest.approx(300.0 + 730.0 / 0.7 + (1000.0 - s_done) / 1.0)


def test_a_running_job_keeps_its_strategy_when_the_new_one_gains_little() -> None:
    table = ColocationTable(solo={("L", 2): [("S1", 1.0), ("S2", 0.8)]},
                            pairs={("L", 2, "S1", "s", 2): (0.7, 0.6), ("L", 2, "S2", "s", 2): (0.75, 0.7)})
    model = norm_speed_model(NormSpeedData(table, {}, {("s", 2)}), name="small gain")
    jobs = [JobSpec(0, 0.0, 2, "L", 1000.0), JobSpec(1, 100.0, 2, "s", 1000.0)]
    run = RunSpec(policy="fifo", placement="tesserae", packing=True, round_seconds=300, restart_overhead=30)
    res, summary = simulate(jobs, parse_cluster_spec("1x2"), model, run)
    # 0.75 against S1's 0.7 in the pair is under the 10% a relaunch must gain: L stays on S1, and
    # runs at S1's pair rate (the rate of the strategy it runs, not the model's best).
    assert summary["strategy_changes"] == 0
    assert {r["job_id"]: r for r in job_records(res)}[0]["finish_time"] == pytest.approx(300.0 + 730.0 / 0.7)
