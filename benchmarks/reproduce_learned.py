"""How much of the oracle's gain survives when the scheduler learns the rates (issue 25).

    .venv/bin/python benchmarks/reproduce_learned.py [--only GLOB] [--seeds 5] [--workers 2]
    .venv/bin/python benchmarks/reproduce_learned.py --smoke          # minutes: is it wired?
    .venv/bin/python benchmarks/reproduce_learned.py --report-only    # rewrite the report from the cache
    .venv/bin/python benchmarks/reproduce_learned.py --list           # the runs and whether cached

For each setting (a workload on a cluster) and policy, the same workloads run with Tesserae's whole
placement (``tesserae+packing``) three times: the scheduler reading the true rates (``oracle``),
learning them from the jobs' progress (``learned``: ``--throughputs learned``), and knowing nothing
(``generic``: every job the built-in model's generic job); and once with the policy's own placement
reading the true rates (the baseline of ``docs/reproduction/tesserae.md``). The gain of a mode is
the baseline's average JCT over the mode's; the share of the oracle's gain a mode keeps is
log(gain) / log(oracle's gain). In every run (every mode) the jobs' true rates vary per job (a seeded
factor, ``RATE_VARIATION``), and a learned run observes them with ``RATE_NOISE`` relative noise.

Settings (workloads built as in ``benchmarks/reproduce_tesserae.py``): Philly arrivals on the mixed
64-GPU and 256-GPU clusters (windows of days 15-30 where its busy part starts, ``PHILLY_64_DAYS`` and
``PHILLY_256_DAYS``, sized so that the study fits a shared 2-core machine), the LLM mix on 64 GPUs,
and Gavel's generated traces (its generator's distributions: ``tesserae.traces.synthetic`` with the
``gavel`` GPU mix) on the mixed 64-GPU cluster. Policies: LAS, Tiresias-LAS (P = 8) and Gavel's max-min (plain LP; the
placement pairs its overflow). Learned without the declared types as family hints, and learned
without exploration, run on the mixed 64-GPU Philly setting (``ABLATIONS``).

Runs are cached in ``docs/reproduction/learned_results.json`` as they finish (``--only`` runs a
chunk; an interrupted study resumes); the report ``docs/reproduction/learned.md`` is rewritten from
every cached run after each chunk.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np

import learned_gavel_trace
import reproduce_tesserae as rt
from _paired_latency import section_lines, target_lines
from _report import ROOT, machine, today

OUT = ROOT / "docs" / "reproduction"
CACHE = OUT / "learned_results.json"
CACHE_FORMAT = "learned-1"
REPORT = OUT / "learned.md"
LATENCY = ROOT / "docs" / "benchmarks" / "round_latency_learned.json"
#: Gavel's own estimator run in Gavel's simulator (figures recorded from its run: commit, command, patch).
GAVEL_EST = OUT / "learned_gavel.json"

ROUND = 300.0
RATE_NOISE = 0.05
RATE_VARIATION = 0.3
#: The Philly windows (days of the trace) the study runs: where the window's busy part starts, sized so that
#: 5 seeds x 12 configurations of every setting fit the shared 2-core machine (the whole days 15-30 are
#: ~1,100 jobs a run at 64 GPUs and ~4,300 at 256).
PHILLY_64_DAYS = (20.0, 23.0)
PHILLY_256_DAYS = (20.0, 21.0)
#: What one run of the issue's whole window (days 15-30) costs, measured: run key -> (jobs, CPU seconds, finished),
#: beside the same key's run in the study's window (from the cache). Measured 2026-12-02 07:41-08:01 UTC with
#: ``execute`` on the key and both windows set to days 15-30, under ``nice -n 10``, load 5-11 (2 shared cores).
FULL_WINDOW_RUNS: dict[str, tuple[int, float, bool]] = {
    "philly-hetero-64/las/learned/seed0": (1107, 37.0, True),
    "philly-hetero-256/las/oracle/seed0": (4316, 45.4, True),
    "philly-hetero-256/las/learned/seed0": (4316, 138.0, False),  # stopped unfinished after 138 s of CPU
}
LLM_JOBS = 150
GAVEL_GEN_JOBS, GAVEL_GEN_LOAD = 150, 1.2


@dataclass(frozen=True)
class Setting:
    name: str
    cluster: str  # a key of reproduce_tesserae.CLUSTERS
    workload: str  # philly | llm | gavel-gen
    label: str


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("philly-hetero-64", "hetero-64", "philly", "Philly days {:g}-{:g}, mixed 64 GPUs".format(
        *PHILLY_64_DAYS)),
    Setting("philly-hetero-256", "hetero-256", "philly", "Philly days {:g}-{:g}, mixed 256 GPUs".format(
        *PHILLY_256_DAYS)),
    Setting("llm-64", "llm-64", "llm", f"LLM mix ({LLM_JOBS} jobs, load {rt.LLM_LOAD['llm-64']}), 64 GPUs"),
    Setting("gavel-gen-64", "hetero-64", "gavel-gen", f"Gavel's generated trace ({GAVEL_GEN_JOBS} jobs, "
            f"load {GAVEL_GEN_LOAD}), mixed 64 GPUs"),
)}


@dataclass(frozen=True)
class Policy:
    name: str
    label: str
    spec: dict[str, Any]
    base: dict[str, Any]  # the policy's own placement
    full: dict[str, Any]  # all of Tesserae's placement


TESS = {"placement": "tesserae", "packing": True}
POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("las", "LAS", {"policy": "las"}, {"placement": "gavel"}, TESS),
    Policy("tiresias", "Tiresias-LAS, P = 8", {"policy": "tiresias-las", "promote_knob": 8.0},
           {"placement": "tiresias"}, TESS),
    Policy("gavel", "Gavel max-min (plain LP)", {"policy": "gavel-maxmin"}, {"placement": "gavel"},
           {**TESS, "policy_packing": False}),
)}
#: Configurations: the baseline reads the truth; Tesserae's placement in each information mode.
MODES = ("base", "oracle", "learned", "generic")
#: Ablations, on one setting: learned without family hints, and learned without exploration.
ABLATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "learned-nohints": ("philly-hetero-64", ("las",)),
    "learned-noexplore": ("philly-hetero-64", ("las",)),
}


ABLATION_TEXT = {"learned-nohints": "learned without family hints, `{learned,no-hints}`",
                 "learned-noexplore": "learned without exploration, `explore_budget` 0"}


def modes_of(setting: str, policy: str) -> tuple[str, ...]:
    return MODES + tuple(m for m, (s, ps) in ABLATIONS.items() if s == setting and policy in ps)


@dataclass(frozen=True)
class Run:
    setting: str
    policy: str
    mode: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.setting}/{self.policy}/{self.mode}/seed{self.seed}"


def all_runs(seeds: int) -> list[Run]:
    return [Run(s, p, m, k) for s in SETTINGS for p in POLICIES for m in modes_of(s, p) for k in range(seeds)]


def run_spec(run: Run) -> Any:
    from tesserae.config import RunSpec

    p = POLICIES[run.policy]
    place = p.base if run.mode == "base" else p.full
    info = {"base": "oracle", "oracle": "oracle", "generic": "generic"}.get(run.mode, "learned")
    extra = {"explore_budget": 0.0} if run.mode == "learned-noexplore" else {}
    return RunSpec.flat(**p.spec, **place, round_seconds=ROUND, restart_overhead=30.0, throughputs=info,
                        rate_noise=RATE_NOISE, rate_variation=RATE_VARIATION,
                        learned_hints=run.mode != "learned-nohints", **extra)


_SMOKE: dict[str, int] = {}


def workload(run: Run, cluster: Any) -> tuple[list[Any], Any]:
    s = SETTINGS[run.setting]
    if s.workload == "llm":
        n = _SMOKE.get("llm_jobs", LLM_JOBS)
        return rt.llm_workload(cluster, n, rt.LLM_LOAD[s.cluster], run.seed), rt.llm_model()
    model = rt.gavel_model()
    if s.workload == "gavel-gen":
        from tesserae.traces.synthetic import generate_workload

        n = _SMOKE.get("gavel_jobs", GAVEL_GEN_JOBS)
        return generate_workload(n, GAVEL_GEN_LOAD, cluster, model, 300 + run.seed, "gavel"), model
    days = PHILLY_256_DAYS if s.cluster == "hetero-256" else PHILLY_64_DAYS
    jobs = rt.philly_workload(cluster.num_gpus, run.seed, days)
    if "philly_jobs" in _SMOKE:
        jobs = jobs[: _SMOKE["philly_jobs"]]
    return jobs, model


KEYS = ("jobs", "completed", "unfinished", "avg_jct", "median_jct", "p95_jct", "makespan", "utilization",
        "preemptions", "migrations", "type_switches", "packed_pairs_per_round_mean", "decision_seconds_mean",
        "exploration_share", "exploration_gpu_seconds", "exploration_runs", "unmeasured_share", "harmful_pairs",
        "harmful_pairs_undone_within_2", "harmful_pairs_kept", "vetoed_pairs", "stalled_runs", "estimate_error",
        "learned_classes_mean", "learned_classes_max", "learned_refresh_seconds_mean",
        "estimator_refresh_seconds_mean", "estimator", "warnings", "estimate_error_paired")


def execute(run: Run, smoke: dict[str, int]) -> dict[str, Any]:
    """In a worker process: one simulation and its figures."""
    from tesserae.core.cluster import parse_cluster_spec
    from tesserae.sim.runner import simulate

    _SMOKE.clear()
    _SMOKE.update(smoke)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    cluster = parse_cluster_spec(rt.CLUSTERS[SETTINGS[run.setting].cluster][0])
    specs, model = workload(run, cluster)
    _res, s = simulate(specs, cluster, model, run_spec(run), seed=run.seed)
    out = {k: s.get(k) for k in KEYS}
    out.update(key=run.key, label=s.get("label"), cpu_seconds=time.process_time() - cpu0,
               wall_seconds=time.perf_counter() - wall0)
    return out


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
def ratio(runs: dict[str, Any], setting: str, policy: str, a: str, b: str, seeds: int,
          metric: str = "avg_jct") -> rt.Ratio:
    """``a``'s metric over ``b``'s per seed (> 1: ``b`` is better)."""
    r = rt.Ratio()
    for s in range(seeds):
        ra, rb = runs.get(Run(setting, policy, a, s).key), runs.get(Run(setting, policy, b, s).key)
        if ra and rb and ra.get(metric) and rb.get(metric):
            r.values.append(ra[metric] / rb[metric])
    return r


def mean_of(runs: dict[str, Any], setting: str, policy: str, mode: str, seeds: int, metric: str) -> float | None:
    vals = [runs[k][metric] for s in range(seeds) if (k := Run(setting, policy, mode, s).key) in runs
            and runs[k].get(metric) is not None]
    return float(np.mean(vals)) if vals else None


def error_of(runs: dict[str, Any], setting: str, policy: str, mode: str, seeds: int, rounds: int,
             stat: str, which: str = "estimate_error") -> float | None:
    vals = [e[str(rounds)][stat] for s in range(seeds) if (k := Run(setting, policy, mode, s).key) in runs
            and (e := runs[k].get(which)) and e.get(str(rounds), {}).get(stat) is not None]
    return float(np.mean(vals)) if vals else None


def kept(gain_mode: rt.Ratio, gain_oracle: rt.Ratio) -> float | None:
    """log(mode's gain) / log(oracle's gain), from the geometric means (None when the oracle gains under 1%:
    a share of nearly nothing is noise)."""
    go, gm = gain_oracle.geo(), gain_mode.geo()
    if not (math.isfinite(go) and math.isfinite(gm)) or abs(math.log(go)) < math.log(1.01):
        return None
    return math.log(gm) / math.log(go)


def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}%"


def hours(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x / 3600:.2f}"


# ------------------------------------------------------------------------------------------ report
def rows_of(runs: dict[str, Any], seeds: int) -> list[dict[str, Any]]:
    out = []
    for s in SETTINGS:
        for p in POLICIES:
            g = {m: ratio(runs, s, p, "base", m, seeds)
                 for m in ("oracle", "learned", "generic", "learned-nohints", "learned-noexplore")}
            if not g["oracle"].values:
                continue
            out.append({
                "setting": s, "policy": p, "gains": g,
                "kept": kept(g["learned"], g["oracle"]), "kept_nohints": kept(g["learned-nohints"], g["oracle"]),
                "kept_noexplore": kept(g["learned-noexplore"], g["oracle"]),
                "generic_kept": kept(g["generic"], g["oracle"]),
                "vs_generic": ratio(runs, s, p, "generic", "learned", seeds),
                "vs_oracle": ratio(runs, s, p, "oracle", "learned", seeds),
                "mk": {m: ratio(runs, s, p, "base", m, seeds, "makespan") for m in ("oracle", "learned", "generic")},
            })
    return out


def write_report(data: dict[str, Any], seeds: int) -> None:
    runs = data["runs"]
    rows = rows_of(runs, seeds)
    learned_runs = [r for k, r in runs.items() if "/learned" in k]
    L = ["# Learned throughputs: how much of the oracle's gain survives", "",
         "Every figure below was measured by `benchmarks/reproduce_learned.py` (it writes this page and "
         "`learned_results.json`, the cache of every run). Sessions that filled the cache:", ""]
    for sess in data["sessions"]:
        L.append(f"- {sess['date']}: `{sess['command']}` on {sess['machine']}: {sess['runs']} runs, "
                 f"{sess['wall_seconds'] / 60:.1f} min wall" + (f" ({sess['note']})" if sess.get("note") else ""))
    cpu = sum(r.get("cpu_seconds", 0.0) for r in runs.values())
    L += ["", f"Runs cached: {len(runs)} of the {len(all_runs(seeds))} of the study at {seeds} seeds; their "
          f"simulation CPU time adds up to {cpu / 3600:.2f} h.", ""]
    missing = sorted({f"`{r.setting}/{r.policy}`" for r in all_runs(seeds) if r.key not in runs},
                     key=lambda x: (list(SETTINGS).index(x.strip("`").split("/")[0]), x))
    if missing:
        L += ["**Not run yet** (no figure below for them; `benchmarks/reproduce_learned.py` runs what is missing "
              "and rewrites this page): " + ", ".join(missing) + ".", ""]
    L += setup_section(runs, seeds)
    L += targets_section(rows, runs, learned_runs, seeds)
    L += gains_section(rows, runs, seeds)
    L += error_section(runs, seeds)
    L += cost_section(runs, seeds)
    L += latency_section()
    L += gavel_section()
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(L) + "\n")


def setup_section(runs: dict[str, Any], seeds: int) -> list[str]:
    sizes = []
    for s in SETTINGS:
        jobs = [r["jobs"] for k, r in runs.items() if k.startswith(s + "/") and r.get("jobs")]
        if jobs:
            sizes.append(f"{s}: {min(jobs)}-{max(jobs)} jobs per run")
    return [
        "## Setup", "",
        "- **Settings**: " + "; ".join(f"`{s.name}` = {s.label} (`{rt.CLUSTERS[s.cluster][0]}`)"
                                       for s in SETTINGS.values()) + ".",
        "- **Sizes**: " + ("; ".join(sizes) if sizes else "no runs yet") + ". The Philly windows are days "
        f"{PHILLY_64_DAYS[0]:g}-{PHILLY_64_DAYS[1]:g} (64 GPUs) and {PHILLY_256_DAYS[0]:g}-{PHILLY_256_DAYS[1]:g} "
        "(256 GPUs) of the trace, where the busy part of `tesserae.md`'s days 15-30 starts, thinned to the "
        "cluster as there. " + window_cost(runs) + " "
        f"The LLM mix has {LLM_JOBS} jobs a run; Gavel's generated trace has "
        f"{GAVEL_GEN_JOBS} jobs at offered load {GAVEL_GEN_LOAD} (Poisson arrivals, Gavel's GPU-count mix and "
        "Philly-like durations, types uniform over Gavel's table), seed 300 + s.",
        "- **Policies**: " + "; ".join(f"{p.label} (`{p.spec}`; baseline placement `{p.base['placement']}`)"
                                       for p in POLICIES.values()) + ". Tesserae's placement is "
        "`tesserae+packing` (under Gavel: the plain LP's overflow paired by the placement).",
        "- **Modes**: `base` = the policy's own placement reading the true rates; `oracle`, `learned`, `generic` = "
        "Tesserae's placement with the true rates, learned ones (`--throughputs learned`: built-in model as the "
        "prior, declared job types as family hints only, never their profile rows), or none (every job "
        "`generic`). Ablations: " + "; ".join(f"`{m}` ({ABLATION_TEXT[m]}) on {s} under {', '.join(ps)}"
                                              for m, (s, ps) in ABLATIONS.items()) + ".",
        f"- **Physics**, the same in every mode: each job's true rates (and work, so the trace's durations stay) "
        f"scaled by its own factor exp({RATE_VARIATION} z) (`--rate-variation {RATE_VARIATION}`); learned runs see "
        f"each observed rate with {RATE_NOISE:.0%} relative noise (`--rate-noise {RATE_NOISE}`); 300 s rounds "
        "(Gavel's policy with Gavel's rounds), 30 s restart cost.",
        f"- **Statistics**: {seeds} seeds per setting; a gain is the baseline's average JCT over the mode's, "
        "geometric mean over the seeds with a 95% interval (Student's t on the log-ratios); the share of the "
        "oracle's gain a mode keeps is log(mode's gain) / log(oracle's gain).", ""]


def window_cost(runs: dict[str, Any]) -> str:
    """Why the study's Philly windows are smaller than the issue's days 15-30: what a full-window run costs."""
    parts, scale = [], {}
    for key, (jobs, cpu, done) in FULL_WINDOW_RUNS.items():
        small = runs.get(key)
        ratio = cpu / small["cpu_seconds"] if small and small.get("cpu_seconds") else None
        setting = key.split("/")[0]
        if ratio and done and "learned" not in key:
            scale.setdefault(setting, ratio)
        elif ratio and done:
            scale[setting] = ratio
        parts.append(f"`{key}` {jobs:,} jobs, " + (f"{cpu:.0f} s of CPU" if done else f"unfinished after {cpu:.0f} "
                     "s of CPU (stopped)") + (f", {'at least ' if not done else ''}{ratio:.0f}x its run in the "
                                               f"study's window ({small['jobs']} jobs)" if ratio else ""))
    total = 0.0
    for k, r in runs.items():
        total += r.get("cpu_seconds", 0.0) * scale.get(k.split("/")[0], 1.0)
    return ("The whole days 15-30 were measured per run: " + "; ".join(parts) + ". Scaling every cached run of "
            "these settings by its setting's measured factor (" + ", ".join(f"{s} {f:.0f}x" for s, f in scale.items())
            + f") puts the study at full windows at about {total / 3600:.1f} h of CPU (an estimate from these "
            "measurements), against the ~1 h of one core this shared 2-core machine could give it (load 5-15 from the "
            "other sessions while it ran), so the study keeps these windows.")


def targets_section(rows: list[dict[str, Any]], runs: dict[str, Any], learned_runs: list[dict[str, Any]],
                    seeds: int) -> list[str]:
    L = ["## Targets", ""]
    big = [r for r in rows if r["gains"]["oracle"].geo() >= 1.2 and r["kept"] is not None]
    short = [r for r in big if r["kept"] < 0.9]
    cells = ", ".join(f"{r['policy']} on {r['setting']}: {pct(r['kept'], 0)}" for r in big)
    if big:
        verdict = "met" if not short else "**missed** in " + ", ".join(f"{r['policy']} on {r['setting']}"
                                                                          for r in short)
        L.append(f"- **learned keeps >= 90% of the oracle's gain where the oracle's gain is >= 1.2x**: {cells}: "
                 f"{verdict}.")
        for r in short:
            L.append("  - Why, " + why_short(r, runs, seeds))
    else:
        L.append("- **learned keeps >= 90% of the oracle's gain where the oracle's gain is >= 1.2x**: no such "
                 "setting measured yet.")
    worse = [r for r in rows if r["vs_generic"].values and r["vs_generic"].significant() < 0]
    L.append(f"- **learned never worse than generic beyond the interval**: {len(worse)} of "
             f"{sum(1 for r in rows if r['vs_generic'].values)} settings are"
             + (": " + ", ".join(f"{r['policy']} on {r['setting']} ({r['vs_generic'].text()})" for r in worse)
                if worse else "") + (": met." if not worse else ": **missed**."))
    med3 = [e["3"]["median"] for r in learned_runs
            if (e := r.get("estimate_error")) and e["3"]["median"] is not None]
    if med3:
        worst = max(med3)
        L.append(f"- **median relative error of a job's rate on its current placement <= 10% after 3 rounds, at "
                 f"{RATE_NOISE:.0%} noise**: per learned run, median {pct(float(np.median(med3)))}, worst run "
                 f"{pct(worst)}: {'met' if worst <= 0.10 else '**missed**'}.")
    shares = [r["exploration_share"] for r in learned_runs if r.get("exploration_share") is not None]
    if shares:
        top = max(shares)
        L.append(f"- **exploration costs <= 3% of all GPU-time**: mean {pct(float(np.mean(shares)), 2)}, worst run "
                 f"{pct(top, 2)}: {'met' if top <= 0.03 else '**missed**'}.")
    L += target_lines(latency_rows())
    L.append("")
    return L


def why_short(r: dict[str, Any], runs: dict[str, Any], seeds: int) -> str:
    s, p = r["setting"], r["policy"]
    m = {k: mean_of(runs, s, p, "learned", seeds, k) for k in ("unmeasured_share", "exploration_share",
                                                               "type_switches", "migrations")}
    o = {k: mean_of(runs, s, p, "oracle", seeds, k) for k in ("type_switches", "migrations")}
    e0, e1 = error_of(runs, s, p, "learned", seeds, 0, "median"), error_of(runs, s, p, "learned", seeds, 1, "median")
    return (f"{p} on {s} (learned {r['gains']['learned'].text()} vs oracle {r['gains']['oracle'].text()}): "
            f"{pct(m['unmeasured_share'])} of the GPU-time runs before the job's first observation (placed on "
            f"priors: median error of the first placement's rate {pct(e0)}, after one round {pct(e1)}); type "
            f"switches per run {m['type_switches'] or 0:.0f} learned vs {o['type_switches'] or 0:.0f} oracle, "
            f"migrations {m['migrations'] or 0:.0f} vs {o['migrations'] or 0:.0f}; exploration "
            f"{pct(m['exploration_share'], 2)} of GPU-time.")


def gains_section(rows: list[dict[str, Any]], runs: dict[str, Any], seeds: int) -> list[str]:
    L = ["## Gains with each kind of information", "",
         "Average JCT (h, mean over the seeds) and the gain over the policy's own placement reading the true rates "
         "(baseline / mode, > 1 is better); *kept* = log(gain) / log(oracle's gain).", "",
         "| setting | policy | baseline JCT | oracle: JCT, gain | learned: JCT, gain | kept | generic: JCT, gain "
         "| kept | learned / generic | learned, no hints: gain, kept | learned, no exploration: gain, kept |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        s, p, g = r["setting"], r["policy"], r["gains"]

        def j(mode: str, s: str = s, p: str = p) -> str:
            return hours(mean_of(runs, s, p, mode, seeds, "avg_jct"))

        nh = f"{g['learned-nohints'].text()}, {pct(r['kept_nohints'], 0)}" if g["learned-nohints"].values else "-"
        ne = f"{g['learned-noexplore'].text()}, {pct(r['kept_noexplore'], 0)}" if g["learned-noexplore"].values \
            else "-"
        L.append(f"| {s} | {p} | {j('base')} | {j('oracle')}, {g['oracle'].text()} | {j('learned')}, "
                 f"{g['learned'].text()} | {pct(r['kept'], 0)} | {j('generic')}, {g['generic'].text()} | "
                 f"{pct(r['generic_kept'], 0)} | {r['vs_generic'].text()} | {nh} | {ne} |")
    L += ["", "Makespan gain over the baseline (same reading):", "",
          "| setting | policy | oracle | learned | generic |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        L.append(f"| {r['setting']} | {r['policy']} | {r['mk']['oracle'].text()} | {r['mk']['learned'].text()} | "
                 f"{r['mk']['generic'].text()} |")
    L += ["", "What learning costs against the oracle, per setting: oracle's JCT / learned's JCT (1.00x: nothing "
          "lost): " + "; ".join(f"{r['policy']} on {r['setting']} {r['vs_oracle'].text()}" for r in rows) + ".", ""]
    return L


def error_section(runs: dict[str, Any], seeds: int) -> list[str]:
    L = ["## Estimation error over a job's life", "",
         "Relative error |estimate / true - 1| of a running job's rate on its current placement (GPU type, "
         "consolidated or not, partner), at the decision after it has run k rounds (k = 0: its prior); median and "
         "p90 over the run's jobs, mean over the seeds.", "",
         "| setting | policy | mode | k = 0 | k = 1 | k = 3 | k = 10 | GPU-time before the first observation |",
         "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        for p in POLICIES:
            for mode in ("learned", "learned-nohints", "learned-noexplore"):
                if mode not in modes_of(s, p) or mean_of(runs, s, p, mode, seeds, "avg_jct") is None:
                    continue
                cells = [f"{pct(error_of(runs, s, p, mode, seeds, k, 'median'))} / "
                         f"{pct(error_of(runs, s, p, mode, seeds, k, 'p90'))}" for k in (0, 1, 3, 10)]
                L.append(f"| {s} | {p} | {mode} | " + " | ".join(cells) +
                         f" | {pct(mean_of(runs, s, p, mode, seeds, 'unmeasured_share'))} |")
    L += ["", "The same on placements next to a partner only (what packing decisions read; `-` where no pair "
          "formed at that age):", "", "| setting | policy | k = 0 | k = 1 | k = 3 | k = 10 |",
          "| --- | --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        for p in POLICIES:
            if all(error_of(runs, s, p, "learned", seeds, k, "median", "estimate_error_paired") is None
                   for k in (0, 1, 3, 10)):
                continue
            cells = [f"{pct(error_of(runs, s, p, 'learned', seeds, k, 'median', 'estimate_error_paired'))} / "
                     f"{pct(error_of(runs, s, p, 'learned', seeds, k, 'p90', 'estimate_error_paired'))}"
                     for k in (0, 1, 3, 10)]
            L.append(f"| {s} | {p} | " + " | ".join(cells) + " |")
    L.append("")
    return L


def cost_section(runs: dict[str, Any], seeds: int) -> list[str]:
    L = ["## Exploration, harmful pairs, and the scheduler's view", "",
         "Exploration: GPU-seconds of runs on a GPU type whose presented rate carried the exploration bonus, or "
         "next to a partner while the job's sharing terms carried it (a pair's GPUs counted once; from the decision "
         "that chose it to the next), over all busy GPU-seconds. Harmful pairs: pairs formed "
         "whose two jobs run, in truth, slower together than alone (the factors sum below 1); undone = split "
         "within two decisions of forming; vetoed = pairs the estimator measured slower than alone and shows as "
         "unable to share. Stalls: runs placed where the truth gives no rate (out of memory next to the partner).",
         "", "| setting | policy | mode | exploration (mean / max) | exploration runs | harmful pairs | undone <= 2 "
         "rounds | kept | vetoed | stalled runs | classes (mean / max) | view per decision (ms) | estimator refit "
         "per decision (ms) |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        for p in POLICIES:
            for mode in ("learned", "learned-nohints", "learned-noexplore", "generic"):
                keys = [k for k in (Run(s, p, mode, i).key for i in range(seeds)) if k in runs]
                if not keys:
                    continue
                rs = [runs[k] for k in keys]

                def tot(name: str, rs: list[dict[str, Any]] = rs) -> int:
                    return int(sum(r.get(name) or 0 for r in rs))

                ex = [r.get("exploration_share") for r in rs if r.get("exploration_share") is not None]
                cls = [r.get("learned_classes_mean") for r in rs if r.get("learned_classes_mean") is not None]
                clm = [r.get("learned_classes_max") for r in rs if r.get("learned_classes_max") is not None]
                view = [r.get("learned_refresh_seconds_mean") for r in rs if r.get("learned_refresh_seconds_mean")]
                fitr = [r.get("estimator_refresh_seconds_mean") for r in rs if r.get("estimator_refresh_seconds_mean")]
                L.append(f"| {s} | {p} | {mode} | "
                         + (f"{pct(float(np.mean(ex)), 2)} / {pct(max(ex), 2)}" if ex else "-")
                         + f" | {tot('exploration_runs')} | {tot('harmful_pairs')} | "
                         f"{tot('harmful_pairs_undone_within_2')} | {tot('harmful_pairs_kept')} | "
                         f"{tot('vetoed_pairs')} | "
                         f"{tot('stalled_runs')} | "
                         + (f"{np.mean(cls):.1f} / {max(clm)}" if cls else "-") + " | "
                         + (f"{1000 * np.mean(view):.2f}" if view else "-") + " | "
                         + (f"{1000 * np.mean(fitr):.2f}" if fitr else "-") + " |")
    L.append("")
    return L


#: The earlier measurement of the same command (before this round's estimator changes), for the reading of a miss.
def latency_rows() -> list[dict[str, Any]]:
    return json.loads(LATENCY.read_text()) if LATENCY.exists() else []


def latency_section() -> list[str]:
    return section_lines(latency_rows())


def gavel_section() -> list[str]:
    """Gavel's own estimator: what it estimates (read from its code), and the figures of its run if recorded."""
    L = ["## Gavel's own estimator side by side", "",
         "Gavel's estimator is `scheduler/throughput_estimator.py` (`ThroughputEstimator`) in "
         "stanford-futuredata/gavel; its `Scheduler` switches it on when `profiling_percentage` < 1 or "
         "`num_reference_models` < the number of job types. What it estimates, from its code: for a new job, "
         "the row of *normalized co-location throughputs* (rate next to each reference job type on each GPU "
         "type, over its rate alone) is profiled on a random `profiling_percentage` of the entries, completed by "
         "matrix completion (`matrix_completion.pmf_solve`, k = 10, mu = 0.01) against the reference job types' "
         "rows, and the job is then taken to be the nearest reference type (cosine distance); the policy's pair "
         "throughputs are that reference type's normalized ones times the job's true alone throughputs. So:",
         "",
         "- it does not estimate a job's alone rate per GPU type at all: the simulator reads it from the oracle "
         "(`# NOTE: Assumes single job throughputs are accurate in simulation + estimation case`), so the type "
         "matching gains of this page (the Philly rows) are outside what it learns, and running it on them would "
         "compare our learned alone rates with the oracle's;",
         "- it runs on single-GPU jobs only (`assert(job.scale_factor == 1)` in "
         "`_populate_job_combination_metadata`): the Philly windows (1-8 GPUs) and the LLM mix (2-4 GPUs) cannot "
         "be fed to it;",
         "- jobs are their type: a job's row is its type's row of `simulation_throughputs.json`, so per-job "
         "variation and observation noise (this page's physics) have no place in it, and its profiling costs "
         "nothing in its simulation;",
         "- of its two drivers, `simulate_scheduler_with_trace.py` passes neither knob to `Scheduler`, and "
         "`simulate_scheduler_with_generated_jobs.py` passes `profiling_percentage` but drops the parsed "
         "`--num_reference_models`.", "",
         "The one input both can run is single-GPU packing on Gavel's table under Gavel's max-min: a Gavel trace "
         "of single-GPU jobs with `max_min_fairness_packed`.", ""]
    if not GAVEL_EST.exists():
        return [*L, "No run of it is recorded (`learned_gavel.json` is absent).", ""]
    g = json.loads(GAVEL_EST.read_text())
    L += [f"Recorded in `learned_gavel.json`: Gavel at commit `{g['gavel_commit']}`, trace `{g['trace']}` "
          f"({g['trace_command']}), cluster {g['cluster']}, driver: {g['driver']}.", ""]
    if g.get("patch"):
        L += [g["patch"], ""]
    for r in g["runs"]:
        L.append(f"- `{r['command']}` ({r['date']}, load {r['load']}): {r['outcome']}")
    L += ["", *learned_gavel_trace.report_lines(), g.get("conclusion", ""), ""]
    return L


# ------------------------------------------------------------------------------------------ main
def estimate(run: Run) -> float:
    """Rough relative cost, to start the longest runs first."""
    c = 4.0 if run.setting.endswith("256") else 1.0
    p = 3.0 if run.policy == "gavel" else 1.0
    return c * p * (3.0 if "learned" in run.mode else 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="run only keys matching this shell pattern "
                    "(repeatable), e.g. 'philly-hetero-64/las/*'")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--smoke", action="store_true", help="a wiring check: 2 seeds, 150 jobs per run, 64-GPU "
                    "settings; its cache and report go to out/learned-smoke/, never to docs/")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from the cache, run nothing")
    ap.add_argument("--list", action="store_true", help="list the runs (with * when cached) and exit")
    ap.add_argument("--rerun", action="store_true", help="run matching keys again even if cached")
    args = ap.parse_args()
    for f in (rt.GAVEL_JSON, rt.NORM_SPEED, rt.PHILLY):
        if not f.exists():
            sys.exit(f"needs {f} (the shared reference data beside the checkout)")
    smoke: dict[str, int] = {}
    global CACHE, REPORT
    if args.smoke:
        args.seeds = min(args.seeds, 2)
        smoke = {"philly_jobs": 150, "llm_jobs": 150, "gavel_jobs": 150}
        CACHE = ROOT / "out" / "learned-smoke" / "learned_results.json"
        REPORT = ROOT / "out" / "learned-smoke" / "learned.md"
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
    todo = [] if args.report_only else [r for r in runs if args.rerun or r.key not in data["runs"]]
    order = list(SETTINGS)
    todo.sort(key=lambda r: (order.index(r.setting), -estimate(r)))
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    wall0 = time.perf_counter()
    if todo:
        session = {"date": today(), "machine": machine(), "runs": 0, "wall_seconds": 0.0,
                   "command": "benchmarks/reproduce_learned.py " + " ".join(sys.argv[1:])}
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
                prog.console.print(f"{r['key']:50s} JCT {hours(r['avg_jct']):>7s} h  cpu {r['cpu_seconds']:.0f} s",
                                   highlight=False)
                prog.advance(bar)
    write_report(data, args.seeds)
    console.print(f"{len(todo)} runs done; {len(data['runs'])} cached; wrote {REPORT}")


if __name__ == "__main__":
    main()
