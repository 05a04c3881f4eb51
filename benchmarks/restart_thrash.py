"""Restart costs at the round length: time-slicing policies thrash, a minimum run quantum fixes it.

    .venv/bin/python benchmarks/restart_thrash.py [--data ../shared/data] [--seeds 0,1,2,3,4] [--workers 2]

Gavel's measured profile (``simulation_throughputs.json``), 300 generated jobs at load 1.5 on
16x4 v100 GPUs, 300 s rounds, for ``las`` (consolidated placement) and ``gavel-maxmin`` (Gavel's
placement and rounds). Restart costs:

- a fixed 30 s (the default, the reference);
- a fixed 300 s without a quantum (``--allow-thrashing``: what every run did before the guard);
  runs stop after 3,000 simulated hours;
- a fixed 300 s with ``--min-run-quantum`` 1 and 3;
- the job-dependent cost (``--restart-cost job``, the built-in model: start-up + checkpoint /
  10 Gbit/s).

Writes ``docs/reproduction/restart_thrash.md`` and ``restart_thrash.json`` (every summary).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from _report import ROOT, machine, today
from tesserae.config import RunSpec
from tesserae.core.cluster import parse_cluster_spec
from tesserae.profiles.loader import load_profile
from tesserae.sim.runner import simulate
from tesserae.traces import generate_workload

DEFAULT_DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "docs" / "reproduction"
CLUSTER, JOBS, LOAD, ROUND = "16x4", 300, 1.5, 300.0
CAP_HOURS = 3000.0
POLICIES = (("las", "consolidated"), ("gavel-maxmin", "gavel"))
VARIANTS: dict[str, dict[str, Any]] = {
    "fixed 30 s": {"restart_overhead": 30.0},
    "fixed 300 s, no quantum": {"restart_overhead": 300.0, "allow_thrashing": True},
    "fixed 300 s, quantum 1": {"restart_overhead": 300.0, "min_run_quantum": 1.0},
    "fixed 300 s, quantum 3": {"restart_overhead": 300.0, "min_run_quantum": 3.0},
    "job-dependent (model)": {"restart_cost": "job"},
}
KEEP = ("completed", "unfinished", "avg_jct", "median_jct", "p95_jct", "makespan", "preemptions", "migrations",
        "utilization", "restart_seconds_mean", "restart_seconds_max", "restart_cost_kind", "warnings")


def _run(profile: str, policy: str, placement: str, variant: str, seed: int) -> dict[str, Any]:
    model = load_profile(profile)
    cluster = parse_cluster_spec(CLUSTER)
    specs = generate_workload(JOBS, LOAD, cluster, model, seed=seed)
    run = RunSpec(policy=policy, placement=placement, round_seconds=ROUND, **VARIANTS[variant])
    t0 = time.perf_counter()
    _, s = simulate(specs, cluster, model, run, seed=seed, until=CAP_HOURS * 3600)
    return {"policy": policy, "variant": variant, "seed": seed, "wall": time.perf_counter() - t0,
            **{k: s[k] for k in KEEP}}


def _hours(x: float | None) -> str:
    return "-" if x is None else f"{x / 3600:.1f}"


def _mean_ci(values: list[float]) -> str:
    a = np.asarray(values, dtype=float)
    if a.size == 1:
        return f"{a[0]:.1f}"
    half = 1.96 * a.std(ddof=1) / np.sqrt(a.size)
    return f"{a.mean():.1f} ± {half:.1f}"


def write_report(results: list[dict[str, Any]], seeds: list[int], wall: float, command: str) -> Path:
    lines = ["# Restart costs at the round length: thrashing and the minimum run quantum", "",
             f"Measured by `{command}` on {today()}, {machine()}; {wall:.0f} s.", "",
             f"Gavel's measured profile, {JOBS} generated jobs at load {LOAD} on {CLUSTER} GPUs, {ROUND:g} s rounds, "
             f"seeds {', '.join(map(str, seeds))}. A run stops after {CAP_HOURS:,.0f} simulated hours; "
             "`unfinished` counts the jobs still in the system then, and the JCT figures cover the completed "
             "jobs only (so a run with unfinished jobs reads better than it is). The job-dependent cost is the "
             "built-in model (a model, not a measurement).", ""]
    for policy, placement in POLICIES:
        lines += [f"## `{policy}` ({placement} placement)", "",
                  "| restart cost | completed / unfinished (all seeds) | avg JCT (h), mean ± 95% CI | "
                  "makespan (h) | preemptions (mean) | restart s (mean) |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for variant in VARIANTS:
            rows = [r for r in results if r["policy"] == policy and r["variant"] == variant]
            done = sum(r["completed"] for r in rows)
            left = sum(r["unfinished"] for r in rows)
            jct = [r["avg_jct"] / 3600 for r in rows if r["avg_jct"] is not None]
            mk = [r["makespan"] / 3600 for r in rows]
            pre = np.mean([r["preemptions"] for r in rows])
            lines.append(f"| {variant} | {done} / {left} | {_mean_ci(jct)} | {_mean_ci(mk)} | {pre:,.0f} | "
                         f"{np.mean([r['restart_seconds_mean'] for r in rows]):.1f} |")
        lines += ["", "Per seed (completed / unfinished, avg JCT h, preemptions):", ""]
        lines += ["| restart cost | " + " | ".join(f"seed {s}" for s in seeds) + " |",
                  "| --- |" + " --- |" * len(seeds)]
        for variant in VARIANTS:
            cells = []
            for s in seeds:
                r = next(x for x in results if x["policy"] == policy and x["variant"] == variant and x["seed"] == s)
                cells.append(f"{r['completed']}/{r['unfinished']}, {_hours(r['avg_jct'])}, {r['preemptions']:,}")
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
        lines.append("")
    path = OUT / "restart_thrash.md"
    path.write_text("\n".join(lines) + "\n")
    (OUT / "restart_thrash.json").write_text(json.dumps(results, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared reference data folder")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds of the generated workload")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="simulations in parallel")
    args = ap.parse_args(argv)
    profile = str(args.data / "gavel" / "simulation_throughputs.json")
    seeds = [int(x) for x in args.seeds.split(",")]
    tasks = [(profile, p, pl, v, s) for p, pl in POLICIES for v in VARIANTS for s in seeds]
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=ctx) as pool:
        futures = [pool.submit(_run, *t) for t in tasks]
        for i, fut in enumerate(as_completed(futures), 1):
            r = fut.result()
            results.append(r)
            print(f"[{i}/{len(tasks)}] {r['policy']} {r['variant']} seed {r['seed']}: {r['completed']} done, "
                  f"{r['unfinished']} unfinished, avg JCT {_hours(r['avg_jct'])} h, {r['preemptions']:,} "
                  f"preemptions ({r['wall']:.0f} s)", flush=True)
    results.sort(key=lambda r: (r["policy"], list(VARIANTS).index(r["variant"]), r["seed"]))
    command = "python benchmarks/restart_thrash.py" + (f" --seeds {args.seeds}" if args.seeds != "0,1,2,3,4" else "")
    path = write_report(results, seeds, time.perf_counter() - started, command)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
