"""Repeated real runs of ``sim_vs_real.py`` (``--repeats R``): the statistics of the R real runs of one
(seed, configuration) and the simulation calibrated from all of them pooled.

A real run is not repeatable (process starts, Slurm's scheduling passes and the machine's load move
its average JCT by several percent between identical runs), so the simulator is judged against the
mean of the R real runs, with its 95% interval (Student's t, R - 1 degrees of freedom).

The calibration is pooled: the restart overhead, the stop latency and the signal delay are each the
mean over every sample of all R runs (every start, every stop), not the mean of the R per-run means
nor one calibration per run. They are properties of the runtime, not of one run; a per-run
calibration would fit that run's own noise (a run whose stops happened to be slow), which flatters
the per-run errors and is not what a simulator used to predict has. Each run's recorded submit
times are its own (arrival jitter of milliseconds that plain LAS turns into whole paths), so the
pooled calibration simulates each run's arrivals and the simulator's average JCT is the mean of
those R simulations.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from scipy.stats import t as student_t


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The mean of ``values`` and its two-sided confidence interval (Student's t with n - 1 degrees of
    freedom); with one value the interval is unknown (NaN, NaN)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if n < 2:
        return mean, math.nan, math.nan
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1)) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def spread(values: Sequence[float]) -> tuple[float, float]:
    """Run-to-run spread, relative to the mean: (max - min) / mean and the coefficient of variation
    (sample standard deviation / mean; NaN with one value)."""
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 else math.nan
    return (max(values) - min(values)) / mean, cv


def pooled_calibration(runs: Sequence[dict[str, Any]]) -> tuple[float, float, float]:
    """The simulation's three measured inputs from all samples of these runs pooled: (restart overhead,
    stop latency, signal delay). Each run carries its samples: ``overheads`` (one per start that
    iterated), ``stops`` (one per stopped run) and ``signals`` (one per stopped run that iterated). The
    signal delay is at most the stop latency (it is a part of it), as in a single run's calibration."""
    overheads = [x for r in runs for x in r["overheads"]]
    stops = [x for r in runs for x in r["stops"]]
    signals = [x for r in runs for x in r["signals"]]
    if not overheads:
        raise ValueError("no run started a job that iterated: no restart overhead to calibrate")
    stop_latency = statistics.fmean(stops) if stops else 0.0
    signal_delay = min(stop_latency, statistics.fmean(signals)) if signals else 0.0
    return statistics.fmean(overheads), stop_latency, signal_delay


def run_jobs(run: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[int, dict[str, float]]]:
    """A real run's jobs and submit times, as ``run_sim`` takes them, from its result's rows."""
    jobs = [{"id": r["id"], "gpus": r["gpus"], "iterations": r["iterations"]} for r in run["rows"]]
    return jobs, {r["id"]: {"submit_time": r["submit"]} for r in run["rows"]}


Simulate = Callable[[list[dict[str, Any]], dict[int, Any], float, float, float], tuple[dict[int, float], int]]


def aggregate(runs: Sequence[dict[str, Any]], simulate: Simulate) -> dict[str, Any]:
    """The R real runs of one (seed, configuration) against the simulation with the pooled calibration.

    ``runs`` are single-run results (``simulate_against``'s: rows, samples, per-run error); ``simulate(jobs,
    real, overhead, stop_latency, signal_delay)`` returns per-job JCTs and preemptions. The error is that
    of the mean of the R pooled simulations against the mean of the R real averages."""
    overhead, stop_latency, signal_delay = pooled_calibration(runs)
    reals = [r["real_avg"] for r in runs]
    sims, sim_preempt = [], []
    for r in runs:
        jobs, real = run_jobs(r)
        jct, preempted = simulate(jobs, real, overhead, stop_latency, signal_delay)
        sims.append(statistics.fmean(jct[j["id"]] for j in jobs))
        sim_preempt.append(preempted)
    real_mean, lo, hi = mean_interval(reals)
    sim_mean = statistics.fmean(sims)
    range_rel, cv = spread(reals)
    own_mean = statistics.fmean(r["sim_avg"] for r in runs)
    return {
        "seed": runs[0]["seed"], "label": runs[0]["label"], "repeats": len(runs), "reals": reals,
        "real_mean": real_mean, "real_lo": lo, "real_hi": hi, "range": range_rel, "cv": cv,
        "overhead": overhead, "stop_latency": stop_latency, "signal_delay": signal_delay,
        "sims": sims, "sim_mean": sim_mean, "err": abs(sim_mean - real_mean) / real_mean,
        "in_interval": lo <= sim_mean <= hi if not math.isnan(lo) else None,
        "pooled_run_errs": [abs(s - x) / x for s, x in zip(sims, reals, strict=True)],
        "own_run_errs": [r["avg_err"] for r in runs],
        "own_mean_err": abs(own_mean - real_mean) / real_mean,
        "real_preempt": statistics.fmean(r["real_preempt"] for r in runs),
        "sim_preempt": statistics.fmean(sim_preempt),
    }


def groups(results: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Single-run results grouped by (seed, configuration), in their first appearance's order."""
    out: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in results:
        out.setdefault((r["seed"], r["label"]), []).append(r)
    return list(out.values())


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1%}"


def report_lines(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """The table of repeats and the verdict, for BENCHMARKS.md."""
    lines = [
        "| seed | configuration | real avg JCT of each run (s) | real mean [95% interval] (s) | run-to-run spread: "
        "range / CV | sim avg JCT, pooled calibration (s) | **error vs real mean** | sim in the interval | "
        "per run, pooled calibration: error | per run, own calibration: error | own calibrations, mean of the "
        "sims: error vs real mean | pooled calibration: overhead / stop latency (still running) | preemptions "
        "real / sim (mean per run) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summaries:
        interval = "" if math.isnan(s["real_lo"]) else f" [{s['real_lo']:.1f}, {s['real_hi']:.1f}]"
        inside = {True: "yes", False: "no", None: "n/a"}[s["in_interval"]]
        lines.append(
            f"| {s['seed']} | `{s['label']}` | {', '.join(f'{x:.1f}' for x in s['reals'])} | "
            f"{s['real_mean']:.1f}{interval} | {_pct(s['range'])} / {_pct(s['cv'])} | {s['sim_mean']:.1f} | "
            f"**{s['err']:.1%}** | {inside} | {', '.join(f'{x:.1%}' for x in s['pooled_run_errs'])} | "
            f"{', '.join(f'{x:.1%}' for x in s['own_run_errs'])} | {s['own_mean_err']:.1%} | "
            f"{s['overhead']:.2f} / {s['stop_latency']:.2f} ({s['signal_delay']:.2f}) s | "
            f"{s['real_preempt']:.1f} / {s['sim_preempt']:.1f} |")
    lines += ["", *verdict(summaries)]
    return lines


def verdict(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Whether the 5% target is met on the mean of the repeats, on every single run, or neither."""
    on_mean = [s for s in summaries if s["err"] <= 0.05]
    runs = [e for s in summaries for e in s["own_run_errs"]]
    pooled = [e for s in summaries for e in s["pooled_run_errs"]]
    inside = [s for s in summaries if s["in_interval"]]
    widths = [(s["real_hi"] - s["real_lo"]) / 2 / s["real_mean"] for s in summaries if not math.isnan(s["real_lo"])]
    widest = max(widths, default=math.nan)
    mean_met = len(on_mean) == len(summaries)
    every_met = all(e <= 0.05 for e in runs)
    which = ("on the mean of the repeats and on every single run" if mean_met and every_met else
             "on the mean of the repeats, not on every single run" if mean_met else
             "on every single run, not on the mean of the repeats" if every_met else
             "neither on the mean of the repeats nor on every single run")
    return [
        f"Target (average JCT within 5%): met {which}. On the mean of the repeats: {len(on_mean)} of "
        f"{len(summaries)} (seed, configuration) within 5% (worst {max(s['err'] for s in summaries):.1%}); the "
        f"simulator's mean lies inside the real mean's 95% interval in {len(inside)} of {len(summaries)}. Single "
        f"runs, each simulated with its own calibration: {sum(e <= 0.05 for e in runs)} of {len(runs)} within 5% "
        f"(worst {max(runs):.1%}); with the pooled calibration: {sum(e <= 0.05 for e in pooled)} of {len(pooled)} "
        f"(worst {max(pooled):.1%}).",
        f"The real mean itself is known only to within +-{_pct(widest)} at worst (half the widest 95% interval, "
        "relative to its mean): with this many repeats an error below that cannot be told apart from the real "
        "runs' own spread.",
    ]
