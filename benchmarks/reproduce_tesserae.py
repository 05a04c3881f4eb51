"""Tesserae's placement with the policy held fixed: each gain measured on its own (issue 12).

    .venv/bin/python benchmarks/reproduce_tesserae.py [--only GLOB] [--seeds 5] [--workers 2]
    .venv/bin/python benchmarks/reproduce_tesserae.py --smoke          # a few minutes: is it wired?
    .venv/bin/python benchmarks/reproduce_tesserae.py --report-only    # rewrite the report from the cache
    .venv/bin/python benchmarks/reproduce_tesserae.py --list           # the runs and whether cached
    .venv/bin/python benchmarks/reproduce_tesserae.py --check [--only GLOB]   # make reproduce-check

A placement is judged with the scheduling policy held fixed and only the placement changed. For
each policy -- Gavel's max-min as Gavel runs it (plain LP, and packed LP whose pairs are units),
Tiresias-LAS with the starvation guard on (P = 8; off too, for the record) and LAS -- the same
workload runs under a ladder of placements, each step adding one thing:

- **layout**: the policy's own placement (``gavel``: keep previous GPUs greedily, else fill in
  order; Tiresias' skew-aware placement for Tiresias-LAS) -> ``tesserae`` with type matching off
  (same GPU types: the policy's advice, or previous type else fastest with room); the
  type-blind ``consolidated`` (Blox's default) is a second baseline, and its ratios are labelled
  as including type blindness;
- **type matching**: type matching off -> on (under Gavel: the allocation-preserving assignment of
  units to types; otherwise the type-slot matching of normalised throughput). Homogeneous clusters
  have nothing to match;
- **packing**: no packing -> Tesserae's matching-based packing (under Gavel: the plain LP's
  overflow paired by Tesserae, each job credited); and Gavel-style packing (``gavel+packing``: each
  overflow job joins the best same-size host) -> Tesserae's packing, same policy; under packed
  Gavel both placements run the policy's pairs and differ in layout and type choice only;
- **strategy choice** (LLM mix): packing with every large job at its best solo strategy -> packing
  that picks each pair's strategy (which reaches ``rate()``, and whose changes are charged as
  restarts).

Settings: Philly arrivals (days 15-30 of the Philly-derived trace, thinned to the cluster's size
so the offered load matches the trace's own on 512 GPUs) with job types from Gavel's measured
``simulation_throughputs.json``; the LLM mix (30% Bert-Large / GPT2-Medium pipeline jobs) with
Blox's ``norm_speed.csv``; homogeneous and heterogeneous clusters of 64 and 256 GPUs; restart cost
30 s and job-dependent costs (``cost_models``). Every setting runs
``--seeds`` workloads (thinning and job types differ); ratios are geometric means over the seeds
with 95% confidence intervals (Student's t on the log-ratios).

Runs are cached in ``docs/reproduction/tesserae_results.json`` as they finish: ``--only`` runs a
chunk (shell-style pattern over run keys, several allowed), an interrupted study resumes, and the
report ``docs/reproduction/tesserae.md`` is rewritten from every cached run after each chunk.
``--check`` runs the cached runs (those matching ``--only``, or all) again and fails unless every
figure but the timings comes out the same and the report is what ``--report-only`` writes; it
changes nothing on disk.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import math
import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from _report import ROOT, SHARED_DATA, machine, today

OUT = ROOT / "docs" / "reproduction"
CACHE = OUT / "tesserae_results.json"
#: Bumped when runs of an older cache no longer stand for this study (2: the whole Philly window).
CACHE_FORMAT = "tesserae-ablation-2"
REPORT = OUT / "tesserae.md"
GAVEL_JSON = SHARED_DATA / "gavel" / "simulation_throughputs.json"
NORM_SPEED = SHARED_DATA / "blox" / "norm_speed.csv"
PHILLY = SHARED_DATA / "philly" / "philly.csv"

ROUND = 300.0
PHILLY_DAYS = (15.0, 30.0)
#: The Philly-derived trace comes from about 512 GPUs (its days 15-30 offer ~1.15x that): a cluster
#: of G GPUs gets each job with probability G / 512, which keeps the offered load.
PHILLY_GPUS = 512
CLAIMS = {"avg_jct": 1.62, "makespan": 1.15}

#: cluster key -> (spec, workload)
CLUSTERS: dict[str, tuple[str, str]] = {
    "homo-64": ("8x8:v100", "philly"),
    "hetero-64": ("3x8:k80,3x8:p100,2x8:v100", "philly"),
    "homo-256": ("32x8:v100", "philly"),
    "hetero-256": ("11x8:k80,11x8:p100,10x8:v100", "philly"),
    "llm-64": ("16x4", "llm"),
    "llm-256": ("64x4", "llm"),
}
LLM_LOAD = {"llm-64": 1.3, "llm-256": 1.3}
LLM_JOBS = {"llm-64": 300, "llm-256": 1000}


def cost_models() -> dict[str, dict[str, Any]]:
    """Restart cost settings -> RunSpec fields.

    "30s" charges every start, resume, move and strategy change 30 s. "job" charges each job type
    its own cost (``--restart-cost job``: start-up + checkpoint bytes / storage bandwidth, at the
    default 10 Gbit/s; the built-in model's figures, 10-13 s for these job types, see
    docs/restart-costs.md). Neither reaches the 300 s round, so the thrash guard does not apply and
    no minimum run quantum is set (``min_run_quantum`` 0: a run that did reach it would be refused).
    """
    return {"30s": {"restart_overhead": 30.0}, "job": {"restart_cost": "job"}}


# ------------------------------------------------------------------------------------ configurations
@dataclass(frozen=True)
class Config:
    """One placement configuration under one policy; ``spec`` updates the RunSpec."""

    name: str
    spec: dict[str, Any]
    note: str = ""


@dataclass(frozen=True)
class Policy:
    name: str
    label: str
    spec: dict[str, Any]
    configs: tuple[Config, ...]


def _tess(tm: bool = True, packing: bool = False, **kw: Any) -> dict[str, Any]:
    return {"placement": "tesserae", "type_matching": tm, "packing": packing, **kw}


LADDER = (
    Config("consolidated", {"placement": "consolidated"}, "type-blind baseline (Blox's default)"),
    Config("gavel", {"placement": "gavel"}),
    Config("tesserae-layout", _tess(tm=False)),
    Config("tesserae", _tess()),
    Config("gavel+packing", {"placement": "gavel", "packing": True}),
    Config("tesserae+packing", _tess(packing=True)),
)
POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("gavel", "Gavel max-min (plain LP)", {"policy": "gavel-maxmin"}, (
        Config("gavel", {"placement": "gavel"}),
        Config("tesserae-layout", _tess(tm=False)),
        Config("tesserae", _tess()),
        Config("tesserae+packing", _tess(packing=True, policy_packing=False), "the plain LP's overflow, paired"),
    )),
    # The packed LP has a variable per pair of jobs: it does not scale past the 64-GPU clusters.
    Policy("gavel-packed", "Gavel max-min (packed LP)", {"policy": "gavel-maxmin", "packing": True}, (
        Config("gavel+packing", {"placement": "gavel"}),
        Config("tesserae-layout+packing", _tess(tm=False, packing=True)),
        Config("tesserae+packing", _tess(packing=True)),
    )),
    Policy("tiresias-p8", "Tiresias-LAS, P = 8", {"policy": "tiresias-las", "promote_knob": 8.0},
           (Config("tiresias", {"placement": "tiresias"}), *LADDER[1:])),
    Policy("tiresias-p0", "Tiresias-LAS, P = 0 (guard off)", {"policy": "tiresias-las"},
           (Config("tiresias", {"placement": "tiresias"}), Config("consolidated", {"placement": "consolidated"}),
            Config("tesserae", _tess()))),
    Policy("las", "LAS", {"policy": "las"}, LADDER),
)}
#: The LLM mix adds the strategy ablation: Tesserae's packing with every job at its best solo strategy.
FIXED_STRATEGY = "tesserae+packing[fixed-strategy]"

#: (gain, from config, to config, label). A label other than "placement" marks a ratio that
#: includes more than the placement.
GAINS: tuple[tuple[str, str, str, str], ...] = (
    ("layout", "gavel", "tesserae-layout", "placement"),
    ("layout (packed Gavel)", "gavel+packing", "tesserae-layout+packing", "placement"),
    ("type matching", "tesserae-layout", "tesserae", "placement"),
    ("type matching (packed Gavel)", "tesserae-layout+packing", "tesserae+packing", "placement"),
    ("packing", "tesserae", "tesserae+packing", "placement"),
    ("packing vs Gavel-style packing", "gavel+packing", "tesserae+packing", "placement"),
    ("strategy choice", FIXED_STRATEGY, "tesserae+packing", "placement"),
    ("all of Tesserae's placement vs the policy's own", "@own", "@full", "placement"),
    ("vs Tiresias' placement", "tiresias", "tesserae", "placement"),
    ("vs consolidated", "consolidated", "tesserae", "placement"),
)
#: Placements that ignore GPU types: on a mixed cluster a ratio against them includes that.
TYPE_BLIND = ("consolidated", "tiresias")
#: The placement each policy's own system uses.
OWN = {"gavel": "gavel", "gavel-packed": "gavel+packing", "tiresias-p8": "tiresias", "tiresias-p0": "tiresias",
       "las": "gavel"}


#: At 256 GPUs only the policy's own placement, Tesserae's, and Tesserae's with packing run (the
#: step-by-step ladder runs at 64 GPUs).
AT_SCALE = ("tesserae", "tesserae+packing", FIXED_STRATEGY)
ALL = None
#: The study: (cluster, restart cost) -> policy -> the configurations run (``ALL``: the policy's
#: whole ladder; on a homogeneous cluster the type-matching-off rungs are left out, they are the
#: same runs as with it on). Every policy on every cluster at both restart costs would be about 5 h
#: of one core; the plan keeps the full ladder under every policy on the heterogeneous 64-GPU
#: cluster at both costs, and elsewhere the policies' own placements against Tesserae's (with the
#: layout and packing steps under LAS on the homogeneous 64-GPU cluster and the LLM mix). The packed
#: Gavel LP (a variable per pair of jobs) runs on the mixed 64-GPU cluster only: one run of it on
#: hetero-256 had not finished after 120 s of CPU time (a plain-LP run there: 42 s).
PLAN: dict[tuple[str, str], dict[str, tuple[str, ...] | None]] = {
    ("hetero-64", "30s"): {"gavel": ALL, "gavel-packed": ALL, "las": ALL, "tiresias-p0": ALL,
                           "tiresias-p8": ("tiresias", "gavel", "tesserae-layout", "tesserae", "tesserae+packing")},
    ("hetero-64", "job"): {"gavel": ALL, "gavel-packed": ALL, "las": ALL,
                           "tiresias-p8": ("tiresias", "gavel", "tesserae-layout", "tesserae", "tesserae+packing")},
    ("homo-64", "30s"): {"gavel": ALL, "tiresias-p8": ("tiresias", "tesserae", "tesserae+packing"),
                         "las": ("gavel", "tesserae", "gavel+packing", "tesserae+packing")},
    ("llm-64", "30s"): {"gavel": ALL, "las": ALL, "tiresias-p8": ("tiresias", "tesserae+packing", FIXED_STRATEGY)},
    ("hetero-256", "30s"): {"gavel": ("gavel", "tesserae+packing"), "tiresias-p8": AT_SCALE,
                            "las": ("gavel", "tesserae+packing")},
    ("homo-256", "30s"): {"gavel": ("gavel", "tesserae+packing"), "tiresias-p8": ("tiresias", "tesserae+packing"),
                          "las": ("gavel", "tesserae+packing")},
    ("llm-256", "30s"): {"las": ("gavel", "tesserae", "tesserae+packing", FIXED_STRATEGY),
                         "tiresias-p8": ("tiresias", "tesserae+packing", FIXED_STRATEGY)},
    ("hetero-256", "job"): {"gavel": ("gavel", "tesserae+packing"), "las": ("gavel", "tesserae+packing")},
}


def configs_of(policy: Policy, cluster: str, cost: str) -> tuple[Config, ...]:
    """The configurations of ``policy`` the study runs on ``cluster`` at ``cost`` (empty: none)."""
    if policy.name not in PLAN.get((cluster, cost), {}):
        return ()
    chosen = PLAN[(cluster, cost)][policy.name]
    cfgs = policy.configs
    if chosen is not None:
        cfgs = tuple(c for c in cfgs if c.name in chosen or c.name == OWN[policy.name])
    if cluster.startswith("homo"):
        cfgs = tuple(c for c in cfgs if not c.name.startswith("tesserae-layout"))
    if CLUSTERS[cluster][1] == "llm":
        packed = next((c for c in cfgs if c.name == "tesserae+packing"), None)
        if packed is not None and (chosen is None or FIXED_STRATEGY in chosen):
            cfgs = (*cfgs, Config(FIXED_STRATEGY, {**packed.spec, "strategy_choice": False}))
        cfgs = tuple(c for c in cfgs if c.name != "consolidated")
    return cfgs


def same_runs(cluster: str, name: str) -> str:
    """The configuration whose runs stand for ``name``: with one GPU type, type matching off is on."""
    return name.replace("tesserae-layout", "tesserae") if cluster.startswith("homo") else name


# ------------------------------------------------------------------------------------------ runs
@dataclass(frozen=True)
class Run:
    cluster: str
    cost: str
    policy: str
    config: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.cost}/{self.policy}/{self.config}/seed{self.seed}"


def all_runs(seeds: int) -> list[Run]:
    out = []
    for (c, cost), policies in PLAN.items():
        for name in policies:
            for cfg in configs_of(POLICIES[name], c, cost):
                out.extend(Run(c, cost, name, cfg.name, s) for s in range(seeds))
    return out


def run_spec(run: Run) -> Any:
    from tesserae.config import RunSpec

    p = POLICIES[run.policy]
    cfg = next(c for c in configs_of(p, run.cluster, run.cost) if c.name == run.config)
    spec = {**p.spec, **cfg.spec, **cost_models()[run.cost], "round_seconds": ROUND}
    if p.spec.get("packing") and "policy_packing" not in cfg.spec:
        spec["packing"] = True  # the packed policy needs a placement that runs its pairs
    return RunSpec.flat(**spec)


_MODELS: dict[str, Any] = {}


class SkewFromSpreadPenalty:
    """Gavel's table plus a skew per job type for Tiresias' placement: 1 - median(spread / consolidated
    throughput on v100) over GPU counts, so a job that loses more than 40% when spread stays whole."""

    def __init__(self, model: Any) -> None:
        self._m = model
        self._skew: dict[str, float] = {}
        for jt in model.job_types():
            ratios = [model.rate(jt, k, "v100", False) / model.rate(jt, k, "v100", True)
                      for k in model.gpu_counts(jt) if k > 1 and model.rate(jt, k, "v100", True) > 0]
            self._skew[jt] = float(np.clip(1.0 - np.median(ratios), 0.0, 1.0)) if ratios else 0.0

    def skew(self, job_type: str) -> float | None:
        return self._skew.get(job_type)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._m, name)


def gavel_model() -> Any:
    if "gavel" not in _MODELS:
        from tesserae.profiles.gavel import read_gavel

        _MODELS["gavel"] = SkewFromSpreadPenalty(read_gavel(GAVEL_JSON))
    return _MODELS["gavel"]


def llm_model() -> Any:
    if "llm" not in _MODELS:
        from tesserae.profiles.norm_speed import load_norm_speed

        _MODELS["llm"] = load_norm_speed(NORM_SPEED)
    return _MODELS["llm"]


def philly_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(submit s from the window start, duration s, GPUs) of the trace's days 15-30 jobs of <= 8 GPUs.

    Gavel measured 1, 2, 4 and 8 GPUs: 3 GPUs become 4, 5-7 become 8; larger jobs (36 of 8,734 in
    the window) have no throughput and are left out (counted in the report).
    """
    if "philly" not in _MODELS:
        stamps, dur, gpus = [], [], []
        with PHILLY.open(newline="") as f:
            for row in csv.DictReader(f):
                stamps.append(datetime.fromisoformat(row["timestamp"]).replace(tzinfo=UTC).timestamp())
                dur.append(float(row["duration"]))
                gpus.append(int(row["num_gpus"]))
        ts, d, g = np.array(stamps), np.array(dur), np.array(gpus)
        day = (ts - ts.min()) / 86400.0
        sel = (day >= PHILLY_DAYS[0]) & (day < PHILLY_DAYS[1]) & (d > 0)
        _MODELS["philly_dropped"] = int((sel & (g > 8)).sum())
        sel &= g <= 8
        order = np.argsort(ts[sel], kind="stable")
        sub = (ts[sel] - ts.min() - PHILLY_DAYS[0] * 86400.0)[order]
        g8 = np.select([g <= 2, g <= 4], [g, 4], 8)[sel][order]
        _MODELS["philly"] = (sub, d[sel][order], g8)
    return _MODELS["philly"]


def philly_workload(num_gpus: int, seed: int, days: tuple[float, float] = PHILLY_DAYS) -> list[Any]:
    """The window's jobs thinned to ``num_gpus``; ``days`` (within the window) keeps those submitted
    then, from its start (the thinning and the types of a job do not depend on ``days``)."""
    from tesserae.core.jobs import JobSpec

    model = gavel_model()
    sub, dur, gpus = philly_rows()
    rng = np.random.default_rng(1000 + seed)
    offset = (days[0] - PHILLY_DAYS[0]) * 86400.0
    window = (sub >= offset) & (sub < (days[1] - PHILLY_DAYS[0]) * 86400.0)
    keep = np.flatnonzero((rng.random(sub.size) < num_gpus / PHILLY_GPUS) & window)
    by_k = {k: [t for t in model.job_types() if k in model.gpu_counts(t)
                and all(model.rate(t, k, g) > 0 for g in ("k80", "p100", "v100"))] for k in (1, 2, 4, 8)}
    pick = rng.random(sub.size)[keep]
    jobs = []
    for i, r in enumerate(keep.tolist()):
        k = int(gpus[r])
        jt = by_k[k][int(pick[i] * len(by_k[k]))]
        jobs.append(JobSpec(i, float(sub[r]) - offset, k, jt, float(dur[r]) * model.reference_rate(jt, k),
                            float(dur[r]), name=str(i)))
    return jobs


def llm_workload(cluster: Any, n: int, load: float, seed: int) -> list[Any]:
    """30% pipeline-parallel LLM jobs (Bert-Large, GPT2-Medium on 2 or 4 GPUs), 70% small ones;
    Poisson arrivals at ``load``, Philly-like durations 60 x 10^U(1.5,3) s (p 0.8) or 10^U(3,4)."""
    from tesserae.core.jobs import JobSpec
    from tesserae.traces.synthetic import arrival_rate

    model = llm_model()
    large = ["Bert-Large", "GPT2-Medium"]
    small = [t for t in model.job_types() if t not in large]
    mix = {1: 0.5, 2: 0.3, 4: 0.2}
    rng = np.random.default_rng(5 + seed)
    lam = arrival_rate(load, cluster, mix)
    submit = np.concatenate(([0.0], np.cumsum(rng.exponential(1.0 / lam, n - 1))))
    is_large = rng.random(n) < 0.3
    k = np.where(is_large, rng.choice([2, 4], size=n), rng.choice(list(mix), size=n, p=list(mix.values())))
    dur = 60.0 * 10 ** np.where(rng.random(n) < 0.2, rng.uniform(3, 4, n), rng.uniform(1.5, 3, n))
    pick = rng.random(n)
    jobs = []
    for i in range(n):
        pool = large if is_large[i] else [t for t in small if int(k[i]) in model.gpu_counts(t)]
        jt = pool[int(pick[i] * len(pool))]
        jobs.append(JobSpec(i, float(submit[i]), int(k[i]), jt, float(dur[i]), float(dur[i]), name=str(i)))
    return jobs


def workload(run: Run, cluster: Any) -> tuple[list[Any], Any]:
    if CLUSTERS[run.cluster][1] == "llm":
        jobs = llm_workload(cluster, _SMOKE.get("llm_jobs", LLM_JOBS[run.cluster]), LLM_LOAD[run.cluster], run.seed)
        return jobs, llm_model()
    jobs = philly_workload(cluster.num_gpus, run.seed)
    if "philly_jobs" in _SMOKE:
        # A wiring check that still queues: jobs from day 20 on (where the window's bursts begin),
        # arriving 4x faster than in the trace.
        from tesserae.core.jobs import JobSpec

        start = next((i for i, j in enumerate(jobs) if j.submit_time >= 5 * 86400.0), 0)
        cut = jobs[start: start + _SMOKE["philly_jobs"]]
        t0 = cut[0].submit_time if cut else 0.0
        jobs = [JobSpec(i, (j.submit_time - t0) / 4.0, j.num_gpus, j.job_type, j.work, j.duration, name=str(i))
                for i, j in enumerate(cut)]
    return jobs, gavel_model()


_SMOKE: dict[str, int] = {}


def execute(run: Run, smoke: dict[str, int]) -> dict[str, Any]:
    """In a worker process: one simulation and its figures."""
    from tesserae.core.cluster import parse_cluster_spec
    from tesserae.sim.runner import simulate

    _SMOKE.clear()
    _SMOKE.update(smoke)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    cluster = parse_cluster_spec(CLUSTERS[run.cluster][0])
    specs, model = workload(run, cluster)
    _res, s = simulate(specs, cluster, model, run_spec(run), seed=run.seed)
    keys = ("jobs", "completed", "rejected", "unfinished", "avg_jct", "median_jct", "p95_jct", "makespan",
            "utilization", "preemptions", "migrations", "type_switches", "strategy_changes",
            "allocation_error_mean", "allocation_error_p95", "type_share_error_mean", "type_share_error_p95",
            "packed_pairs_per_round_mean", "decision_seconds_mean", "decision_seconds_p95", "lp_seconds_total",
            "hetero_throughput_gain", "type_advice_overridden", "restart_seconds_mean", "restart_seconds_max",
            "restart_cost_kind", "warnings")
    out = {k: s.get(k) for k in keys}
    out.update(key=run.key, label=s.get("label"), cpu_seconds=time.process_time() - cpu0,
               wall_seconds=time.perf_counter() - wall0)
    return out


#: Figures of a run that are timings: ``--check`` does not compare them.
TIMINGS = frozenset({"cpu_seconds", "wall_seconds", "decision_seconds_mean", "decision_seconds_p95",
                     "lp_seconds_total"})


def check(data: dict[str, Any], runs: list[Run], seeds: int, workers: int) -> int:
    """Run ``runs`` (cached ones) again and compare every figure but the timings; and the report."""
    global REPORT
    import tempfile

    bad = []
    committed, REPORT = REPORT, Path(tempfile.mkdtemp()) / REPORT.name
    write_report(data, seeds)
    if REPORT.read_text() != committed.read_text():
        bad.append(f"{committed.name} is not what --report-only writes from {CACHE.name}")
    REPORT = committed
    todo = [r for r in runs if r.key in data["runs"]]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(execute, r, {}): r for r in todo}
        for fut in as_completed(futures):
            got, want = fut.result(), data["runs"][futures[fut].key]
            diff = [f"{k} {got.get(k)!r}, recorded {want.get(k)!r}" for k in sorted(set(got) | set(want))
                    if k not in TIMINGS and got.get(k) != want.get(k)]
            print(f"{got['key']}: " + ("same" if not diff else "DIFFERENT (" + "; ".join(diff[:3]) + ")"), flush=True)
            if diff:
                bad.append(f"{got['key']}: " + "; ".join(diff[:3]))
    for line in bad:
        print(f"placement study: {line}", file=sys.stderr)
    print(f"{len(todo)} cached runs checked, {len(bad)} difference(s)")
    return 1 if bad else 0


# ------------------------------------------------------------------------------------------ cache
def load_cache() -> dict[str, Any]:
    if CACHE.exists():
        data = json.loads(CACHE.read_text())
        if data.get("format") == CACHE_FORMAT:
            return data
    return {"format": CACHE_FORMAT, "runs": {}, "sessions": []}


def save_cache(data: dict[str, Any]) -> None:
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    tmp = CACHE.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
    os.replace(tmp, CACHE)


# ------------------------------------------------------------------------------------------ statistics
@dataclass
class Ratio:
    """Baseline / new per seed (> 1: the new configuration is better), summarised over seeds."""

    values: list[float] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.values)

    def geo(self) -> float:
        return float(np.exp(np.mean(np.log(self.values)))) if self.values else math.nan

    def ci(self) -> tuple[float, float]:
        if self.n < 2:
            return (math.nan, math.nan)
        from scipy.stats import t as student

        logs = np.log(self.values)
        half = float(student.ppf(0.975, self.n - 1) * logs.std(ddof=1) / math.sqrt(self.n))
        m = float(logs.mean())
        return (math.exp(m - half), math.exp(m + half))

    def text(self) -> str:
        if not self.values:
            return "-"
        lo, hi = self.ci()
        ci = f" [{lo:.2f}, {hi:.2f}]" if self.n > 1 else ""
        return f"{self.geo():.2f}x{ci}"

    def significant(self) -> int:
        """+1 better beyond the interval, -1 worse beyond it, 0 within."""
        lo, hi = self.ci()
        return 1 if lo > 1 else (-1 if hi < 1 else 0)


def ratio(runs: dict[str, Any], cluster: str, cost: str, policy: str, a: str, b: str, seeds: int,
          metric: str = "avg_jct", policy_b: str | None = None) -> Ratio:
    """``a`` over ``b`` per seed under ``policy`` (``b`` under ``policy_b`` when given: a ratio
    that includes the policy)."""
    r = Ratio()
    for s in range(seeds):
        ra = runs.get(Run(cluster, cost, policy, a, s).key)
        rb = runs.get(Run(cluster, cost, policy_b or policy, b, s).key)
        if ra and rb and ra.get(metric) and rb.get(metric):
            r.values.append(ra[metric] / rb[metric])
    return r


def full_config(policy: str, cluster: str, cost: str) -> str | None:
    """All of Tesserae's placement under a policy: with packing where the policy's runs have it.

    Fixed in advance, not picked per setting from the results (which would favour Tesserae).
    """
    names = {c.name for c in configs_of(POLICIES[policy], cluster, cost)}
    return next((n for n in ("tesserae+packing", "tesserae") if n in names), None)


# ------------------------------------------------------------------------------------------ report
def fmt_h(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x / 3600:.2f}"


def mean_of(runs: dict[str, Any], run: Run, seeds: int, metric: str) -> float | None:
    vals = [runs[k][metric] for s in range(seeds)
            if (k := Run(run.cluster, run.cost, run.policy, run.config, s).key) in runs
            and runs[k].get(metric) is not None]
    return float(np.mean(vals)) if vals else None


def settings(runs: dict[str, Any]) -> Iterable[tuple[str, str, str]]:
    for cost in cost_models():
        for c in CLUSTERS:
            for p in POLICIES.values():
                if configs_of(p, c, cost):
                    yield c, cost, p.name


def gain_rows(runs: dict[str, Any], seeds: int) -> list[dict[str, Any]]:
    rows = []
    for c, cost, pol in settings(runs):
        names = {cfg.name for cfg in configs_of(POLICIES[pol], c, cost)}
        for gain, a, b, label in GAINS:
            if a == "@own":
                a, b = OWN[pol], full_config(pol, c, cost) or ""
            a, b = same_runs(c, a), same_runs(c, b)
            if a == b or a not in names or b not in names:
                continue
            if gain.startswith("type matching") and c.startswith("homo"):
                continue  # one GPU type: nothing to match
            if gain == "packing vs Gavel-style packing" and pol.startswith("gavel"):
                continue  # plain and packed Gavel are different policies
            r = ratio(runs, c, cost, pol, a, b, seeds)
            if a in TYPE_BLIND and c.startswith("hetero"):
                label = "type blindness"
            if r.n:
                rows.append({"gain": gain, "cluster": c, "cost": cost, "policy": pol, "from": a, "to": b,
                             "label": label, "ratio": r,
                             "makespan": ratio(runs, c, cost, pol, a, b, seeds, "makespan")})
    return rows


#: Tesserae as a system (LAS with all of its placement) against other systems, policy and placement
#: both: what the paper's headline compares. Labelled "includes the policy": not a placement gain.
SYSTEMS: tuple[tuple[str, str, str], ...] = (
    ("Tiresias (Tiresias-LAS P = 8, its placement)", "tiresias-p8", "tiresias"),
    ("Gavel (packed max-min, its placement)", "gavel-packed", "gavel+packing"),
    ("Gavel (plain max-min, its placement)", "gavel", "gavel"),
)
TESSERAE_SYSTEM = ("las", "tesserae+packing")


def system_rows(runs: dict[str, Any], seeds: int) -> list[dict[str, Any]]:
    rows = []
    for cost in cost_models():
        for c in CLUSTERS:
            for name, pol, cfg in SYSTEMS:
                r = ratio(runs, c, cost, pol, cfg, TESSERAE_SYSTEM[1], seeds, policy_b=TESSERAE_SYSTEM[0])
                if r.n:
                    rows.append({"gain": f"LAS + tesserae+packing vs {name}", "cluster": c, "cost": cost,
                                 "policy": f"{pol} vs las", "from": cfg, "to": TESSERAE_SYSTEM[1],
                                 "label": "policy", "ratio": r,
                                 "makespan": ratio(runs, c, cost, pol, cfg, TESSERAE_SYSTEM[1], seeds, "makespan",
                                                   policy_b=TESSERAE_SYSTEM[0])})
    return rows


def write_report(data: dict[str, Any], seeds: int) -> None:
    planned = {r.key for r in all_runs(seeds)}
    extra = len(set(data["runs"]) - planned)
    runs = {k: r for k, r in data["runs"].items() if k in planned}  # a run left out of the plan is not reported
    rows = gain_rows(runs, seeds)
    systems = system_rows(runs, seeds)
    L: list[str] = ["# Tesserae's placement with the policy held fixed", ""]
    sessions = data.get("sessions", [])
    cpu = sum(r.get("cpu_seconds", 0.0) for r in runs.values())
    L += ["Every figure below was measured by `benchmarks/reproduce_tesserae.py` (it writes this page and "
          "`tesserae_results.json`, the cache of every run). Sessions that filled the cache:", ""]
    L += [f"- {s['date']}: `{s['command']}` on {s['machine']}: {s['runs']} runs, {s['wall_seconds'] / 60:.1f} min "
          "wall" + (f" ({s['note']})" if s.get("note") else "") for s in sessions[-12:]]
    L += ["", f"Runs cached: {len(runs) + extra}" + (f" ({extra} of them outside the current plan, not reported)"
                                                     if extra else "") +
          f"; the study at {seeds} seeds has {len(planned)}. Their simulation CPU time "
          f"adds up to {cpu / 3600:.2f} h (on an idle 2-core machine, about half that in wall time with "
          "`--workers 2`).", ""]
    L += setup_section(runs, seeds)
    L += plan_section()
    L += headline(rows, systems)
    L += targets_section(runs, seeds, rows)
    L += differences(runs, seeds, rows, systems)
    L += gains_section(rows)
    L += systems_section(systems)
    L += gavel_section(runs, seeds)
    L += tiresias_section(runs, seeds)
    L += absolute_section(runs, seeds)
    L += notes(rows)
    REPORT.write_text("\n".join(L) + "\n")


def setup_section(runs: dict[str, Any], seeds: int) -> list[str]:
    sub, _, _ = philly_rows() if PHILLY.exists() else (np.zeros(0), None, None)
    dropped = _MODELS.get("philly_dropped", 0)

    def jobs(cluster: str) -> str:
        n = sorted({int(r["jobs"]) for k, r in runs.items() if k.startswith(cluster + "/") and r.get("jobs")})
        return "-" if not n else f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"

    costs = [r["restart_seconds_mean"] for k, r in runs.items() if "/job/" in k and r.get("restart_seconds_mean")]
    top = [r["restart_seconds_max"] for k, r in runs.items() if "/job/" in k and r.get("restart_seconds_max")]
    job_cost = (f"{min(costs):.1f}-{max(costs):.1f} s per restart on average over a run's jobs, {max(top):.1f} s at "
                "most" if costs else "no run yet")
    return [
        "## Setup", "",
        f"- **Philly arrivals**: the trace's days {PHILLY_DAYS[0]:.0f}-{PHILLY_DAYS[1]:.0f} "
        f"(`../shared/data/philly/philly.csv`: {sub.size} jobs of <= 8 GPUs; {dropped} larger ones left out, "
        "Gavel measured no more than 8), at their own submission times and durations; a cluster of G GPUs "
        f"keeps each job with probability G / {PHILLY_GPUS} (the trace's own offered load, about 1.15 on 512 "
        "GPUs over the window), and each job gets a job type drawn uniformly among those Gavel measured for its "
        "GPU count on all three GPU types (3 GPUs become 4, 5-7 become 8). Work = duration x the type's v100 "
        "throughput. Seed s draws the thinning and the types.",
        f"- **Jobs per run**: the whole window, {jobs('homo-64')} jobs per run on homo-64, {jobs('hetero-64')} on "
        f"hetero-64, {jobs('homo-256')} on homo-256, {jobs('hetero-256')} on hetero-256 (days 15-20 hold 34 of "
        f"the window's {sub.size} jobs: its busy part starts on day 20).",
        f"- **LLM mix**: Blox's `norm_speed.csv` (pipeline strategies of Bert-Large and GPT2-Medium, measured "
        "co-location speeds); 30% large jobs on 2 or 4 GPUs, 70% small ones; Poisson arrivals at load "
        f"{LLM_LOAD['llm-64']}; {LLM_JOBS['llm-64']} jobs on 64 GPUs, {LLM_JOBS['llm-256']} on 256.",
        "- **Clusters**: " + "; ".join(f"{k} `{v[0]}`" for k, v in CLUSTERS.items()) + ".",
        f"- **Simulator**: {ROUND:.0f} s rounds (Gavel's policies with Gavel's own round mechanism), the restart "
        "cost of the column on every start, resume, migration and strategy change.",
        "- **Restart costs**: `30s` is `--restart-cost fixed --restart-overhead 30`; `job` is `--restart-cost job` "
        "at the default storage bandwidth (10 Gbit/s): each job type's start-up plus checkpoint bytes over the "
        "bandwidth, from the built-in model (a model, not a measurement: Gavel's job types have no restart rows; "
        f"see docs/restart-costs.md): {job_cost}. No cost reaches the {ROUND:.0f} s round, so the thrash guard "
        "does not apply and no minimum run quantum is set (`--min-run-quantum 0`); restart costs at the round "
        "length and the quantum are measured in restart_thrash.md.",
        "- **Policies**: " + "; ".join(f"{p.name} = {p.label} (`{p.spec}`)" for p in POLICIES.values()) + ".",
        f"- **Statistics**: {seeds} seeds per setting; a ratio is baseline / Tesserae of the average JCT per seed "
        "(> 1: Tesserae's placement is better), geometric mean over the seeds, 95% interval from Student's t "
        "on the log-ratios.", ""]


def plan_section() -> list[str]:
    L = ["## What ran", "",
         "Each row is one `--only` chunk of the study (e.g. `benchmarks/reproduce_tesserae.py --only "
         "'hetero-64/job/*'`), every configuration on the same workloads, seeds 0-4. The full ladder of steps "
         "runs under every policy on the heterogeneous 64-GPU cluster at both restart costs; elsewhere policies' "
         "own placements against Tesserae's, plus the layout and packing steps where they can differ (every "
         "policy on every cluster at both costs would be about 5 h of one core; the table lists what ran). "
         "Gavel's packed LP runs on the mixed 64-GPU cluster only: one run of it on hetero-256 had not "
         "finished after 120 s of CPU time (a plain-LP run there: 42 s). "
         "On a homogeneous cluster type matching has nothing to match: `tesserae` there is the layout step "
         "(its runs are the same with type matching off).", "",
         "| cluster | cost | policy | configurations |", "| --- | --- | --- | --- |"]
    for (c, cost), policies in PLAN.items():
        for name in policies:
            cfgs = configs_of(POLICIES[name], c, cost)
            L.append(f"| {c} | {cost} | {name} | " + ", ".join(f"`{x.name}`" for x in cfgs) + " |")
    return [*L, ""]


def differences(runs: dict[str, Any], seeds: int, rows: list[dict[str, Any]],
                systems: list[dict[str, Any]]) -> list[str]:
    """Why our ratios differ from the paper's, each reason from the figures of this study."""
    same = [r for r in rows if r["gain"].startswith("all of") and r["label"] == "placement" and r["ratio"].n]
    if not same:
        return []
    L = ["## Why these ratios differ from the paper's 1.62x / 1.15x", ""]
    best = max(same, key=lambda r: r["ratio"].geo())

    def gain(name: str, r0: dict[str, Any]) -> str:
        g = next((r for r in rows if r["gain"] == name and r["cluster"] == r0["cluster"] and r["cost"] == r0["cost"]
                  and r["policy"] == r0["policy"]), None)
        return "not run" if g is None else g["ratio"].text()

    # The steps one by one exist only where the ladder ran: decompose the best setting that has them.
    laddered = [r for r in same if gain("type matching", r) != "not run"]
    step = max(laddered, key=lambda r: r["ratio"].geo()) if laddered else best
    where = "" if step is best else (f"; where the steps ran one by one, the best is {step['ratio'].text()} under "
                                     f"{step['policy']} on {step['cluster']} ({step['cost']})")
    L.append(f"- **The best same-policy ratio is type matching under a policy that gives no type advice.** "
             f"{best['ratio'].text()} under {best['policy']} on {best['cluster']} ({best['cost']}){where}: layout "
             f"{gain('layout', step)}, type matching {gain('type matching', step)}, packing {gain('packing', step)}. "
             "Without a policy's advice the baseline (`gavel` placement) puts every job on the fastest type with "
             "room; Tesserae's matching puts each job where its own speed-up is largest. The policy is the same, "
             "so this is a placement gain, but against a placement that does not weigh one job's speed-ups "
             "against another's.")
    gav = [r for r in same if r["policy"].startswith("gavel")]
    if gav:
        txt = "; ".join(f"{r['policy']} on {r['cluster']} ({r['cost']}): {r['ratio'].text()}" for r in gav)
        moves = []
        for r in gav:
            a = mean_of(runs, Run(r["cluster"], r["cost"], r["policy"], r["from"], 0), seeds, "type_switches")
            b = mean_of(runs, Run(r["cluster"], r["cost"], r["policy"], r["to"], 0), seeds, "type_switches")
            if a and b is not None:
                moves.append(f"{a:.0f} -> {b:.0f} ({r['policy']}, {r['cluster']}, {r['cost']})")
        L.append("- **Under Gavel's policy the LP decides the GPU type of every unit**, and a placement that honours "
                 "it can only choose which unit takes which slot of a type and where on the nodes: " + txt +
                 ". Tesserae's allocation-preserving matching cuts the type switches per run (" + "; ".join(moves) +
                 "), but a switch costs one restart, and restarts are a small part of a job's time (next point).")
    shares = []
    for key in {k.rsplit("/", 1)[0] for k in runs}:
        c, cost, pol, cfg = key.split("/")
        sh = restart_share(runs, Run(c, cost, pol, cfg, 0), seeds)
        if sh is not None:
            shares.append(sh)
    if shares:
        L.append(f"- **Restarts are cheap next to these jobs**: the time a job spends restarting (one start, its "
                 f"resumes, moves and strategy changes, at the column's cost) is {min(shares):.1%}-{max(shares):.1%} "
                 f"of its JCT across every configuration run (median {float(np.median(shares)):.1%}). Saving "
                 "restarts, the mechanism of migration minimization, can win no more than that share at these "
                 "costs (30 s, or the job-dependent model's 10-13 s).")
    pairs = {w: [r.get("packed_pairs_per_round_mean") or 0.0 for k, r in runs.items()
                 if "+packing" in k and (CLUSTERS[k.split("/")[0]][1] == w)] for w in ("philly", "llm")}
    if pairs["philly"] or pairs["llm"]:
        f = {w: (float(np.mean(v)) if v else math.nan) for w, v in pairs.items()}
        L.append(f"- **Packing found {'next to nothing' if f['philly'] < 1 else 'little'} to pair on the Philly "
                 f"workloads**: {f['philly']:.2f} packed pairs per round on average over the Philly runs with "
                 f"packing, {f['llm']:.2f} over the LLM mix's. Packing pairs a job that does not fit with one that "
                 "runs (under the packed LP, the "
                 "pairs the LP chose), so it can only help where jobs wait.")
    if systems:
        b = max(systems, key=lambda r: r["ratio"].geo())
        L.append(f"- **The paper compares systems**, policy and placement together. LAS with all of Tesserae's "
                 f"placement against another system's policy and placement: at best {b['ratio'].text()} (vs "
                 f"{b['gain'].split(' vs ', 1)[1]}, {b['cluster']}, {b['cost']}); that ratio includes the policy "
                 "(section *Tesserae as a system*).")
    blind = [r for r in rows if r["label"] == "type blindness" and r["ratio"].n]
    if blind:
        b = max(blind, key=lambda r: r["ratio"].geo())
        part = ratio(runs, b["cluster"], b["cost"], b["policy"], b["from"], "gavel", seeds)
        L.append(f"- **Against a type-blind placement** on a mixed cluster the ratio reaches {b['ratio'].text()} "
                 f"({b['gain']}, {b['policy']}, {b['cluster']}, {b['cost']}), labelled *type blindness*: "
                 + (f"the same policy with `gavel` placement (fastest type with room, not type-blind) is already "
                    f"{part.text()} better than `{b['from']}`." if part.n else "part of it is only that."))
    homo = [r for k, r in runs.items() if k.startswith("homo-")]
    if homo:
        pre = float(np.mean([r.get("preemptions") or 0 for r in homo]))
        util = float(np.mean([r.get("utilization") or 0 for r in homo]))
        hr = [r["ratio"].geo() for r in same if r["cluster"].startswith("homo-")]
        span = f"{min(hr):.2f}-{max(hr):.2f}x" if hr else "not measured"
        L.append(f"- **On the homogeneous clusters there is no GPU type to match**: all of Tesserae's placement "
                 f"against the policy's own gives {span} there (layout and packing only; {util:.0%} "
                 f"utilization and {pre:.0f} preemptions per run on average); the large same-policy gains are "
                 "type matching on the mixed clusters.")
    L.append("- **Other workloads than the paper's** (see *Setup*): Philly's days 15-30 thinned to the cluster's "
             "size with Gavel's job types, and a 300- or 1,000-job LLM mix; ratios depend on how much the "
             "workload queues, which the thinning keeps at the trace's own load.")
    return [*L, ""]


def systems_section(systems: list[dict[str, Any]]) -> list[str]:
    L = ["## Tesserae as a system against other systems (**includes the policy**)", "",
         "What the paper's headline compares: Tesserae's policy (LAS) with all of its placement against another "
         "system's policy with that system's placement, on the same workloads. These ratios are not placement "
         "gains: the sections above hold the policy fixed.", "",
         "| cluster | cost | against | avg JCT ratio | makespan ratio | seeds |",
         "| --- | --- | --- | --- | --- | --- |"]
    for r in systems:
        L.append(f"| {r['cluster']} | {r['cost']} | {r['gain'].split(' vs ', 1)[1]} | {r['ratio'].text()} | "
                 f"{r['makespan'].text()} | {r['ratio'].n} |")
    return [*L, ""]


def headline(rows: list[dict[str, Any]], systems: list[dict[str, Any]]) -> list[str]:
    L = ["## Headline", "",
         "| | seed's claim (up to) | our best same-policy ratio | our typical (median setting) | settings |",
         "| --- | --- | --- | --- | --- |"]
    for metric, name in (("ratio", "average JCT"), ("makespan", "makespan")):
        sel = [r for r in rows if r["gain"].startswith("all of") and r["label"] == "placement" and r[metric].n]
        if not sel:
            L.append(f"| {name} | {CLAIMS['avg_jct' if metric == 'ratio' else 'makespan']:.2f}x | - | - | 0 |")
            continue
        best = max(sel, key=lambda r: r[metric].geo())
        typical = sorted(sel, key=lambda r: r[metric].geo())[len(sel) // 2]
        L.append(f"| {name} | {CLAIMS['avg_jct' if metric == 'ratio' else 'makespan']:.2f}x | "
                 f"{best[metric].text()} ({best['policy']}, {best['cluster']}, {best['cost']}) | "
                 f"{typical[metric].text()} ({typical['policy']}, {typical['cluster']}) | {len(sel)} |")
    for metric, name in (("ratio", "average JCT"), ("makespan", "makespan")):
        sel = [r for r in systems if r[metric].n]
        if sel:
            b = max(sel, key=lambda r: r[metric].geo())
            t = sorted(sel, key=lambda r: r[metric].geo())[len(sel) // 2]
            L.append(f"| {name}, LAS + Tesserae's placement against another system's policy and placement "
                     f"(**includes the policy**) | {CLAIMS['avg_jct' if metric == 'ratio' else 'makespan']:.2f}x | "
                     f"{b[metric].text()} (vs {b['gain'].split(' vs ', 1)[1]}, {b['cluster']}, {b['cost']}) | "
                     f"{t[metric].text()} | {len(sel)} |")
    blind = [r for r in rows if r["label"] == "type blindness" and r["ratio"].n]
    if blind:
        b = max(blind, key=lambda r: r["ratio"].geo())
        t = sorted(blind, key=lambda r: r["ratio"].geo())[len(blind) // 2]
        L.append(f"| average JCT against a type-blind placement on a mixed cluster (**includes type blindness**) "
                 f"| | {b['ratio'].text()} ({b['gain']}, {b['policy']}, {b['cluster']}) | {t['ratio'].text()} | "
                 f"{len(blind)} |")
    L += ["", "\"Same-policy\" compares the policy's own placement with all of Tesserae's (`tesserae+packing`, or "
          "`tesserae` where the policy's runs do not pack) under the same policy on the same workloads; \"best\" "
          "is the best setting, \"typical\" the median one. On a mixed cluster the type-blind placements "
          "(`consolidated`, and Tiresias' own) do not look at GPU types: ratios against them there are in the "
          "last row, labelled, because part of them is only that.", ""]
    worse = [r for r in rows if r["label"] == "placement" and r["ratio"].significant() < 0]
    L += [f"Settings where a Tesserae step is worse than its baseline beyond the 95% interval: {len(worse)} of "
          f"{sum(1 for r in rows if r['label'] == 'placement' and r['ratio'].n > 1)}" +
          (": " + "; ".join(f"{r['gain']} under {r['policy']} on {r['cluster']} ({r['cost']}): "
                            f"{r['ratio'].text()}" for r in worse) if worse else "") + ".", ""]
    return L


def targets_section(runs: dict[str, Any], seeds: int, rows: list[dict[str, Any]]) -> list[str]:
    """The issue's targets, each with its measured figure and, where missed, the measurement that says why."""
    placement = [r for r in rows if r["label"] == "placement" and r["ratio"].n > 1]
    worse = [r for r in placement if r["ratio"].significant() < 0]
    L = ["## Targets", "",
         f"- **Never worse than the baseline placement beyond the 95% interval, under the same policy**: "
         f"{len(worse)} of {len(placement)} step comparisons are: " + ("met." if not worse else "**missed**.")]
    packed = [r for r in rows if r["gain"].startswith("all of") and r["policy"] == "gavel-packed"
              and r["cost"] == "job" and r["cluster"].startswith("hetero") and r["ratio"].n]
    for r in packed:
        base = Run(r["cluster"], r["cost"], r["policy"], r["from"], 0)
        new = Run(r["cluster"], r["cost"], r["policy"], r["to"], 0)
        share = restart_share(runs, base, seeds)
        a, b = mean_of(runs, base, seeds, "type_switches"), mean_of(runs, new, seeds, "type_switches")
        met = r["ratio"].geo() >= 1.2
        why = "" if met else (
            f" Why: the packed LP fixes the GPU type (and partner) of every unit, so the placement can only "
            f"choose which unit takes which slot of a type and where on the nodes; Tesserae's matching cuts the "
            f"type switches per run from {a:.0f} to {b:.0f}, but with Gavel's placement a job spends "
            f"{'-' if share is None else f'{share:.1%}'} of its JCT restarting at this cost, which bounds, to first "
            "order, what fewer restarts can give back.")
        L.append(f"- **At least 1.2x average JCT against packed Gavel on a heterogeneous cluster at job-dependent "
                 f"restart costs** ({r['cluster']}): {r['ratio'].text()}: " + ("met." if met else "**missed**.") + why)
    if not packed:
        L.append("- **At least 1.2x against packed Gavel at job-dependent restart costs**: not run yet.")
    same = [r for r in rows if r["gain"].startswith("all of") and r["label"] == "placement" and r["ratio"].n]
    if same:
        bj = max(same, key=lambda r: r["ratio"].geo())
        bm = max(same, key=lambda r: r["makespan"].geo())
        ok = bj["ratio"].geo() >= CLAIMS["avg_jct"] and bm["makespan"].geo() >= CLAIMS["makespan"]
        L.append(f"- **Stretch: the paper's {CLAIMS['avg_jct']:.2f}x average JCT and {CLAIMS['makespan']:.2f}x "
                 f"makespan under the same policy**: best {bj['ratio'].text()} ({bj['policy']}, {bj['cluster']}, "
                 f"{bj['cost']}) and {bm['makespan'].text()} ({bm['policy']}, {bm['cluster']}, {bm['cost']}): "
                 + ("reached, in the best setting only, against a placement that takes the fastest type with room "
                    "(see the next section); the median setting is far below." if ok else "not reached."))
    return [*L, ""]


def gains_section(rows: list[dict[str, Any]]) -> list[str]:
    L = ["## Each gain on its own", "",
         "Average JCT ratio (makespan ratio), baseline / new, per setting; `[lo, hi]` is the 95% interval.", ""]
    for gain, *_ in GAINS:
        sel = [r for r in rows if r["gain"] == gain]
        if not sel:
            continue
        L += [f"### {gain}", "", "| cluster | cost | policy | from -> to | avg JCT ratio | makespan ratio | seeds |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in sel:
            L.append(f"| {r['cluster']} | {r['cost']} | {r['policy']} | `{r['from']}` -> `{r['to']}` | "
                     f"{r['ratio'].text()} | {r['makespan'].text()} | {r['ratio'].n} |")
        L.append("")
    return L


def gavel_section(runs: dict[str, Any], seeds: int) -> list[str]:
    L = ["## Under Gavel's policy: migrations, type switches and allocation error", "",
         "Per run (mean over the seeds): migrations (a running job moved), type switches (moved onto another GPU "
         "type), and the allocation error of the Gavel policy: per unit, sum over types of |time run on the type "
         "/ time since the allocation was set - X|, weighted by that time; the type-share error is the same over "
         "the unit's own run time against X / sum X, the part a placement answers for.", "",
         "| cluster | cost | policy | placement | avg JCT (h) | migrations | type switches | allocation error | "
         "type-share error | seeds |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c, cost, pol in settings(runs):
        if not pol.startswith("gavel"):
            continue
        for cfg in configs_of(POLICIES[pol], c, cost):
            r = Run(c, cost, pol, cfg.name, 0)
            n = sum(1 for s in range(seeds) if Run(c, cost, pol, cfg.name, s).key in runs)
            if not n:
                continue

            def m(k: str, r: Run = r) -> float | None:
                return mean_of(runs, r, seeds, k)

            err, mix = m("allocation_error_mean"), m("type_share_error_mean")
            L.append(f"| {c} | {cost} | {pol} | `{cfg.name}` | {fmt_h(m('avg_jct'))} | {m('migrations') or 0:.0f} | "
                     f"{m('type_switches') or 0:.0f} | {'-' if err is None else f'{err:.3f}'} | "
                     f"{'-' if mix is None else f'{mix:.3f}'} | {n} |")
    L.append("")
    return L


def tiresias_section(runs: dict[str, Any], seeds: int) -> list[str]:
    L = ["## Tiresias-LAS with the starvation guard on (P = 8) and off (P = 0)", "",
         "| cluster | cost | placement | avg JCT, P = 8 (h) | avg JCT, P = 0 (h) |", "| --- | --- | --- | --- | --- |"]
    for c in CLUSTERS:
        for cost in cost_models():
            for cfg in ("tiresias", "consolidated", "tesserae", "tesserae+packing"):
                a = mean_of(runs, Run(c, cost, "tiresias-p8", cfg, 0), seeds, "avg_jct")
                b = mean_of(runs, Run(c, cost, "tiresias-p0", cfg, 0), seeds, "avg_jct")
                if a is not None or b is not None:
                    L.append(f"| {c} | {cost} | `{cfg}` | {fmt_h(a)} | {fmt_h(b)} |")
    L.append("")
    return L


def restart_share(runs: dict[str, Any], run: Run, seeds: int) -> float | None:
    """Mean over the seeds of the time a job spends restarting over its JCT, estimated as the mean restart
    cost x (one start + preemptions + migrations + strategy changes) per job / the average JCT."""
    vals = []
    for s in range(seeds):
        r = runs.get(Run(run.cluster, run.cost, run.policy, run.config, s).key)
        if r and r.get("avg_jct") and r.get("restart_seconds_mean") is not None and r.get("jobs"):
            restarts = r["jobs"] + (r.get("preemptions") or 0) + (r.get("migrations") or 0) + \
                (r.get("strategy_changes") or 0)
            vals.append(r["restart_seconds_mean"] * restarts / r["jobs"] / r["avg_jct"])
    return float(np.mean(vals)) if vals else None


def absolute_section(runs: dict[str, Any], seeds: int) -> list[str]:
    L = ["## Every configuration (means over the seeds)", "",
         "| cluster | cost | policy | placement | avg JCT (h) | p95 JCT (h) | makespan (h) | utilization | "
         "preemptions | migrations | strategy changes | restart time / JCT | pairs / round | decision mean (ms) | "
         "seeds |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c, cost, pol in settings(runs):
        for cfg in configs_of(POLICIES[pol], c, cost):
            r = Run(c, cost, pol, cfg.name, 0)
            n = sum(1 for s in range(seeds) if Run(c, cost, pol, cfg.name, s).key in runs)
            if not n:
                continue

            def m(k: str, r: Run = r) -> float | None:
                return mean_of(runs, r, seeds, k)

            util, dec, share = m("utilization"), m("decision_seconds_mean"), restart_share(runs, r, seeds)
            L.append(f"| {c} | {cost} | {pol} | `{cfg.name}` | {fmt_h(m('avg_jct'))} | {fmt_h(m('p95_jct'))} | "
                     f"{fmt_h(m('makespan'))} | {'-' if util is None else f'{util:.1%}'} | "
                     f"{m('preemptions') or 0:.0f} | {m('migrations') or 0:.0f} | {m('strategy_changes') or 0:.0f} | "
                     f"{'-' if share is None else f'{share:.1%}'} | {m('packed_pairs_per_round_mean') or 0:.1f} | "
                     f"{'-' if dec is None else f'{dec * 1000:.1f}'} | {n} |")
    L.append("")
    return L


def notes(rows: list[dict[str, Any]]) -> list[str]:
    L = ["## Reading the figures", "",
         "- A ratio labelled *type blindness* compares with a placement that does not look at GPU types; on a "
         "mixed cluster much of it comes from that alone, not from Tesserae's matching.",
         "- Under Gavel's policy both placements run exactly the units the policy's per-type queues chose, and "
         "the policy is credited with what actually ran; the Tesserae steps change which unit runs on which type "
         "(within the GPUs of each type the policy used) and where on the nodes.",
         "- Gavel's plain and packed LPs are different policies: `tesserae+packing` under the plain LP pairs the "
         "policy's overflow, under the packed LP it runs the policy's pairs.",
         ""]
    missing = [g for g, *_ in GAINS if not any(r["gain"] == g for r in rows)]
    if missing:
        L += ["Gains with no runs in the cache yet: " + ", ".join(missing) + ".", ""]
    return L


# ------------------------------------------------------------------------------------------ main
def estimate(run: Run) -> float:
    """Rough relative cost, to start the longest runs first."""
    c = 4.0 if run.cluster.endswith("256") else 1.0
    p = {"gavel-packed": 6.0, "gavel": 3.0}.get(run.policy, 1.0)
    return c * p * (2.0 if "packing" in run.config else 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[],
                    help="run only keys matching this shell pattern (repeatable), e.g. 'hetero-64/*/gavel/*'")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--smoke", action="store_true",
                    help="a wiring check: 2 seeds, 200 Philly jobs (from day 20, arriving 4x faster) / 150 LLM "
                         "jobs per run, 64-GPU clusters; its cache and report go to out/tesserae-smoke/, never to "
                         "docs/")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from the cache, run nothing")
    ap.add_argument("--list", action="store_true", help="list the runs (with * when cached) and exit")
    ap.add_argument("--rerun", action="store_true", help="run matching keys again even if cached")
    ap.add_argument("--check", action="store_true", help="run the cached runs (matching --only) again; fail unless "
                                                         "every figure but the timings and the report are the same")
    args = ap.parse_args()
    for f in (GAVEL_JSON, NORM_SPEED, PHILLY):
        if not f.exists():
            sys.exit(f"needs {f} (the shared reference data beside the checkout)")
    smoke: dict[str, int] = {}
    global CACHE, REPORT
    if args.smoke:
        args.seeds = min(args.seeds, 2)
        smoke = {"philly_jobs": 200, "llm_jobs": 150}
        CACHE = ROOT / "out" / "tesserae-smoke" / "tesserae_results.json"
        REPORT = ROOT / "out" / "tesserae-smoke" / "tesserae.md"
        if not args.only:
            args.only = ["*-64/*"]
    data = load_cache()
    runs = all_runs(args.seeds)
    if args.only:
        runs = [r for r in runs if any(fnmatch.fnmatchcase(r.key, pat) for pat in args.only)]
    if args.list:
        for r in runs:
            print(("* " if r.key in data["runs"] else "  ") + r.key)
        return
    if args.check:
        sys.exit(check(data, runs, args.seeds, args.workers))
    todo = [] if args.report_only else [r for r in runs if args.rerun or r.key not in data["runs"]]
    # Setting by setting in the plan's order (the most telling first), the longest runs of each first.
    settings_order = list(PLAN)
    todo.sort(key=lambda r: (settings_order.index((r.cluster, r.cost)), -estimate(r)))
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    wall0 = time.perf_counter()
    if todo:
        # The session is recorded before its first run and updated after each, so a session that is
        # stopped part-way still names the runs it added.
        session = {"date": today(), "machine": machine(), "runs": 0, "wall_seconds": 0.0,
                   "command": "benchmarks/reproduce_tesserae.py " + " ".join(sys.argv[1:])}
        data["sessions"].append(session)
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as prog, ProcessPoolExecutor(max_workers=args.workers) as pool:
            bar = prog.add_task(f"{len(todo)} runs", total=len(todo))
            futures = {pool.submit(execute, r, smoke): r for r in todo}
            for fut in as_completed(futures):
                r = fut.result()
                data["runs"][r["key"]] = r
                session["runs"] += 1
                session["wall_seconds"] = time.perf_counter() - wall0
                save_cache(data)
                prog.console.print(f"{r['key']:60s} JCT {fmt_h(r['avg_jct']):>7s} h  cpu {r['cpu_seconds']:.0f} s",
                                   highlight=False)
                prog.advance(bar)
    write_report(data, args.seeds)
    console.print(f"{len(todo)} runs done; {len(data['runs'])} cached; wrote {REPORT}")


if __name__ == "__main__":
    main()
