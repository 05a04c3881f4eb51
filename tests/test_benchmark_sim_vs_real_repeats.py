"""``benchmarks/sim_vs_real.py --repeats``: the statistics of repeated real runs and the pooled calibration
(``benchmarks/_sim_vs_real_repeats.py``), on made-up runs (the real runs need a server or Slurm's daemons)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from _sim_vs_real_repeats import aggregate, groups, mean_interval, pooled_calibration, spread
from sim_vs_real import pooled_simulation, report, run_sim, workload


def test_the_real_mean_has_a_students_t_interval_with_n_minus_one_degrees_of_freedom() -> None:
    mean, lo, hi = mean_interval([1.0, 2.0, 3.0])
    # t(0.975, 2 df) = 4.303 (with 3 df it would be 3.182, with the normal 1.960); sd = 1.
    assert mean == 2.0 and hi - mean == pytest.approx(4.3027 / math.sqrt(3), rel=1e-4)
    assert mean - lo == pytest.approx(hi - mean)
    mean, lo, hi = mean_interval([104.9, 116.3])  # t(0.975, 1 df) = 12.706
    assert hi - mean == pytest.approx(12.7062 * 8.0610 / math.sqrt(2), rel=1e-4)
    one = mean_interval([5.0])
    assert one[0] == 5.0 and math.isnan(one[1]) and math.isnan(one[2])


def test_the_spread_is_the_range_and_the_coefficient_of_variation_relative_to_the_mean() -> None:
    assert spread([90.0, 100.0, 110.0]) == pytest.approx((0.2, 0.1))


def _run(real_avg: float, overheads: list[float], stops: list[float], signals: list[float]) -> dict[str, Any]:
    return {"seed": 1, "label": "las:consolidated", "real_avg": real_avg, "sim_avg": real_avg * 1.1,
            "avg_err": 0.1, "overheads": overheads, "stops": stops, "signals": signals, "real_preempt": 4,
            "rows": [{"id": 1, "gpus": 1, "iterations": 10, "submit": 0.0}]}


def test_the_pooled_calibration_weighs_every_sample_not_every_run() -> None:
    runs = [_run(100, [1.0], [0.2], [0.5]), _run(100, [2.0, 2.0, 2.0], [0.4, 0.4, 0.4], [])]
    overhead, stop, signal_delay = pooled_calibration(runs)
    # Means of the per-run means would be 1.5 and 0.3.
    assert overhead == pytest.approx(1.75) and stop == pytest.approx(0.35)
    assert signal_delay == pytest.approx(0.35)  # the signal delay is a part of the stop latency: at most it
    assert pooled_calibration([_run(100, [1.0], [0.4], [0.1, 0.2])])[2] == pytest.approx(0.15)
    with pytest.raises(ValueError, match="no run started"):
        pooled_calibration([_run(100, [], [], [])])


def test_the_simulator_is_judged_against_the_mean_of_the_real_runs_with_the_pooled_calibration() -> None:
    calls = []

    def simulate(jobs: list[dict[str, Any]], real: dict[int, Any], overhead: float, stop: float,
                 signal_delay: float) -> tuple[dict[int, float], int]:
        calls.append((overhead, stop, signal_delay))
        return {1: 110.0 + real[1]["submit_time"]}, 3

    runs = [_run(100.0, [1.0], [0.2], [0.1]), _run(120.0, [2.0, 2.0, 2.0], [0.4], [0.1])]
    runs[1]["rows"][0]["submit"] = 2.0
    s = aggregate(runs, simulate)
    assert calls == [pytest.approx((1.75, 0.3, 0.1))] * 2
    assert s["sims"] == [110.0, 112.0] and s["real_mean"] == 110.0
    # The error of the means (0.9%), not the mean of the per-run errors (10% and 6.7%).
    assert s["err"] == pytest.approx(1 / 110) and s["pooled_run_errs"] == pytest.approx([0.10, 8 / 120])
    assert s["own_run_errs"] == [0.1, 0.1] and s["own_mean_err"] == pytest.approx(0.1)
    assert s["in_interval"] is True and s["range"] == pytest.approx(20 / 110)
    assert s["real_preempt"] == 4 and s["sim_preempt"] == 3


def test_runs_group_by_seed_and_configuration_in_their_order() -> None:
    a, b, c = _run(1, [], [], []), {**_run(2, [], [], []), "seed": 2}, _run(3, [], [], [])
    assert groups([a, b, c]) == [[a, c], [b]]


def _single(seed: int, repeat: int, real_avg: float, sim_avg: float) -> dict[str, Any]:
    jobs = workload(6, seed, 0.05, 1.5)
    rows = [{"id": k + 1, "gpus": j["gpus"], "iterations": j["iterations"], "submit": 1000.0 + j["at"],
             "real": real_avg, "sim": sim_avg, "sim_old": sim_avg, "preemptions": 0} for k, j in enumerate(jobs)]
    return {"seed": seed, "repeat": repeat, "label": "las:consolidated", "policy": "las", "queues": None,
            "real_avg": real_avg, "sim_avg": sim_avg, "avg_err": abs(sim_avg - real_avg) / real_avg,
            "per_job": [0.0], "real_preempt": 1, "sim_preempt": 1, "overhead": 0.5, "overheads": [0.4, 0.6],
            "stops": [0.2], "signals": [0.1], "signal_delay": 0.1, "old_overhead": 0.6, "avg_err_old": 0.0,
            "avg_err0": 0.0, "gaps": [], "wall": 60.0, "makespan": 50.0, "rows": rows, "date": "d", "load": 1.0}


def test_the_report_gives_every_run_the_interval_and_says_on_what_the_target_is_met() -> None:
    args = argparse.Namespace(jobs=6, gpus=4, seed_list=[1], configs="las", round_seconds=5.0, executor="local",
                              spi=0.05, mean_gap=1.5, event_driven=True, placement="consolidated", resimulate=None)
    runs = [_single(1, 1, 100.0, 94.0), _single(1, 2, 110.0, 104.0)]
    s = aggregate(runs, pooled_simulation(runs[0], args))
    # The pooled simulation is run_sim with the pooled calibration, on each run's own submit times.
    jobs = [{"id": r["id"], "gpus": r["gpus"], "iterations": r["iterations"]} for r in runs[0]["rows"]]
    jct, _ = run_sim(jobs, {r["id"]: {"submit_time": r["submit"]} for r in runs[0]["rows"]},
                     argparse.Namespace(**vars(args), policy="las", queues=None), 0.5, 0.2, 0.1)
    assert s["sims"][0] == pytest.approx(sum(jct.values()) / len(jct))
    text = report(runs, args, [{**s, "sim_mean": 104.0, "err": 1 / 105}])
    assert "--repeats 2" in text and "100.0, 110.0" in text and "6.0%, 5.5%" in text
    assert "met on the mean of the repeats, not on every single run" in text


def test_unequal_repeat_counts_are_said_and_not_shown_as_one_repeats_option() -> None:
    args = argparse.Namespace(jobs=6, gpus=4, seed_list=[1, 2], configs="las", round_seconds=5.0, executor="slurm",
                              spi=0.05, mean_gap=1.5, event_driven=True, placement="consolidated", resimulate=None)
    runs = [_single(1, 1, 100.0, 98.0), _single(2, 1, 90.0, 89.0), _single(1, 2, 104.0, 101.0)]
    summaries = [aggregate(g, pooled_simulation(g[0], args)) for g in groups(runs)]
    text = report(runs, args, summaries)
    assert "ran 1-2 times (each row says how often)" in text and "--repeats" not in text.split("\n")[2]
    # A configuration's runs are together in the per-run table: seed 1's two runs, then seed 2's.
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    assert [r[:2] for r in rows if r[2] == "`las:consolidated`"] == [["| 1", "1"], ["| 1", "2"], ["| 2", "1"]]
