"""A sweep's spread over seeds: what ``compare --seeds`` reports beside each mean.

Each seed draws another workload, so a configuration's metric over the seeds is a sample: its mean,
its standard deviation (n - 1) and a 95% interval of the mean from Student's t with n - 1 degrees
of freedom. The ratio to the first configuration is paired, seed by seed (the same workload under
both), as the geometric mean of the per-seed ratios with its 95% interval from Student's t on
their logarithms (the benchmarks' convention, ``benchmarks/reproduce_tesserae.py``). One seed has
no spread: sd and interval are then None. The mean's interval of a metric that cannot be negative
starts at 0 at the least.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CONFIDENCE = 0.95
SWEEP_COLUMNS = ["label", "load", "seeds", "mean", "sd", "ci_low", "ci_high", "ratio", "ratio_low", "ratio_high"]


@dataclass(frozen=True)
class Spread:
    """A sample's mean, standard deviation and interval of the mean (None with fewer than 2 values)."""

    n: int
    mean: float
    sd: float | None
    low: float | None
    high: float | None


def _half_width(sd: float, n: int) -> float:
    # scipy.stats takes seconds to import: only a sweep over several seeds needs it, not every compare
    from scipy.stats import t as student

    return float(student.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)


def spread(values: Sequence[float], *, nonnegative: bool = True) -> Spread | None:
    """Mean, sd and 95% t-interval of the finite values (None when there are none). A ``nonnegative``
    quantity (a JCT) has the interval's lower end at 0 at the least: with few seeds t's interval is
    wide and would otherwise reach below zero."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    mean = float(v.mean())
    if v.size < 2:
        return Spread(1, mean, None, None, None)
    sd = float(v.std(ddof=1))
    half = _half_width(sd, int(v.size))
    return Spread(int(v.size), mean, sd, max(mean - half, 0.0) if nonnegative else mean - half, mean + half)


def ratio_spread(ratios: Sequence[float]) -> Spread | None:
    """Geometric mean of positive per-seed ratios, with a 95% interval from t on their logarithms."""
    r = np.asarray(ratios, dtype=np.float64)
    r = r[np.isfinite(r) & (r > 0)]
    if r.size == 0:
        return None
    logs = np.log(r)
    mean = float(np.exp(logs.mean()))
    if r.size < 2:
        return Spread(1, mean, None, None, None)
    sd = float(logs.std(ddof=1))
    half = _half_width(sd, int(r.size))
    return Spread(int(r.size), mean, sd, float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half)))


def sweep_rows(runs: Sequence[Any], results: Sequence[Any], loads: Sequence[float | None],
               key: str = "avg_jct") -> list[dict[str, Any]]:
    """One row per configuration and load (in that order): ``key`` over the seeds, and its paired ratio to
    the first configuration (None for the first itself). ``results`` carry ``point`` (run, seed, load)
    and ``summary``."""
    by: dict[tuple[int, float | None, int], float] = {}
    for res in results:
        v = res.summary.get(key)
        i = next((k for k, r in enumerate(runs) if r == res.point.run), None)
        if i is not None and v is not None:
            by[(i, res.point.load, res.point.seed)] = float(v)
    rows = []
    for i, run in enumerate(runs):
        for ld in loads:
            seeds = sorted(s for (j, lo, s) in by if j == i and lo == ld)
            s = spread([by[(i, ld, seed)] for seed in seeds])
            ratio = None
            if i > 0:
                ratio = ratio_spread([by[(i, ld, seed)] / by[(0, ld, seed)] for seed in seeds
                                      if by.get((0, ld, seed))])
            rows.append({"label": run.label, "load": ld, "seeds": len(seeds),
                         "mean": None if s is None else s.mean, "sd": None if s is None else s.sd,
                         "ci_low": None if s is None else s.low, "ci_high": None if s is None else s.high,
                         "ratio": None if ratio is None else ratio.mean,
                         "ratio_low": None if ratio is None else ratio.low,
                         "ratio_high": None if ratio is None else ratio.high})
    return rows


def write_sweep_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """``sweep.csv``: the rows of ``sweep_rows`` (seconds; empty where there is no value)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SWEEP_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r[k] is None else r[k] for k in SWEEP_COLUMNS})
    os.replace(tmp, path)
