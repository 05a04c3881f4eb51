"""Tenant queues on the full Philly trace: what quotas and borrowing do to JCT and to each VC's share.

    .venv/bin/python benchmarks/multitenant.py [--data ../shared/data] [--policies fifo,las] [--workers 2]

Philly's virtual clusters (the ``cluster`` column of ``philly.csv``) become one queue each, with a
guarantee derived from the VC's share of the trace's GPU time (``--queue-config derived``:
floor(512 x share), the GPUs left to the largest remainders; weights 1; no borrowing limit).
For each policy, three runs on 64x8 GPUs, 300 s rounds, 30 s restart overhead:

- ``global``: one global queue, as Tesserae schedules without tenants; measured per VC;
- ``strict``: quotas, no borrowing (Philly's own VCs: idle quota stays idle);
- ``borrow``: quotas, idle quota lent by weighted max-min and reclaimed by preemption.

Per VC: average JCT, share of GPU time against its guaranteed share, *satisfaction* (GPU-seconds
received up to its entitlement min(guarantee, demand) at each instant, over the entitlement),
GPU-hours borrowed and reclaims; Jain's index over the VCs' satisfaction. Writes
``docs/reproduction/multitenant.md``, ``multitenant.png`` and ``multitenant_results.json``, and
the overall table into the ``multitenant`` section of BENCHMARKS.md.
The throughput model is the built-in one (a model, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from _report import ROOT, machine, today, update_section

DEFAULT_DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "docs" / "reproduction"
MODES = ("global", "strict", "borrow")
CLUSTER = "64x8"


def run_one(trace: str, policy: str, mode: str) -> dict[str, Any]:
    from tesserae.config import RunSpec
    from tesserae.profiles.default_model import DefaultModel
    from tesserae.sim.runner import simulate
    from tesserae.traces import load_cluster, read_trace

    model = DefaultModel()
    cluster = load_cluster(CLUSTER)
    specs = read_trace(trace, "philly", model, seed=0)
    run = RunSpec(policy=policy, placement="consolidated", queue_config="derived", quotas=mode)
    t0 = time.perf_counter()
    _, summary = simulate(specs, cluster, model, run, seed=0)
    summary["wall_seconds_total"] = time.perf_counter() - t0
    summary["mode"] = mode
    return summary


def hours(x: float | None) -> str:
    return "-" if x is None else f"{x / 3600:.2f}"


def overall_table(by: dict[tuple[str, str], dict[str, Any]], policies: list[str]) -> list[str]:
    """One row per policy and tenancy: JCT, utilization, the VCs' satisfaction, borrowing, reclaims."""
    lines = [
        "| policy | tenancy | jobs done / rejected | avg JCT (h) | median JCT (h) | p95 JCT (h) | makespan (h) | "
        "utilization | Jain (satisfaction) | lowest VC satisfaction | shortfall (GPU-h) | borrowed (GPU-h) | "
        "reclaims | preemptions per job | sim wall (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in policies:
        for m in MODES:
            r = by.get((p, m))
            if r is None:
                continue
            lines.append(
                f"| {p} | {m} | {r['completed']:,} / {r['rejected']:,} | {hours(r['avg_jct'])} | "
                f"{hours(r['median_jct'])} | {hours(r['p95_jct'])} | "
                f"{hours(r['makespan'])} | {r['utilization']:.1%} | {r['jain_satisfaction']:.3f} | "
                f"{r['min_satisfaction']:.3f} | {r['guarantee_shortfall_gpu_hours']:,.0f} | "
                f"{r['borrowed_gpu_hours']:,.0f} | {r['reclaims']:,} | "
                f"{r['preemptions'] / max(r['completed'], 1):.1f} | "
                f"{r['wall_seconds_total']:.0f} |")
    return lines


def benchmarks_section(results: list[dict[str, Any]], policies: list[str], command: str, date: str) -> str:
    """The ``multitenant`` section of BENCHMARKS.md: the overall table; per VC in the report."""
    by = {(r["policy"], r["mode"]): r for r in results}
    first = results[0]
    lines = [
        "## Tenant queues on the full Philly trace (`benchmarks/multitenant.py`)",
        "",
        f"Command: `{command}`. Machine: {machine()}. Date: {date}.",
        f"Philly's {len([q for q in first['queues'] if q['leaf']])} virtual clusters as queues with guarantees "
        f"from their share of GPU time (`--queue-config derived`), {first['jobs']:,} jobs on {CLUSTER} "
        "(consolidated placement, 300 s rounds, 30 s restart overhead, built-in throughput model): one global "
        "queue against strict quotas against quotas with borrowing and reclaim, same policy in each row pair. "
        "Per-VC tables, the plot and what the figures say: "
        "[docs/reproduction/multitenant.md](docs/reproduction/multitenant.md).",
        "",
        *overall_table(by, policies),
    ]
    return "\n".join(lines)


def write_report(results: list[dict[str, Any]], policies: list[str], command: str, trace: Path, date: str) -> str:
    by = {(r["policy"], r["mode"]): r for r in results}
    first = results[0]
    vcs = [q for q in first["queues"] if q["leaf"]]
    lines = [
        "# Tenant queues on the full Philly trace",
        "",
        f"Command: `{command}`. Machine: {machine()}. Date: {date}.",
        f"Trace: `{trace}` ({first['jobs']:,} jobs, {len(vcs)} virtual clusters), cluster {CLUSTER} "
        f"({first['cluster_gpus']} GPUs), `consolidated` placement, 300 s rounds, 30 s restart overhead, "
        "built-in throughput model (a model, not a measurement).",
        "",
        "Quotas (`--queue-config derived`): one queue per VC, guarantee = the VC's share of the trace's GPU "
        "time (GPUs x duration) times 512, floored, the GPUs left over going one each to the largest "
        "remainders; weight 1; no borrowing limit. `global` runs the policy over one global queue "
        "(what Tesserae did before queues) and only measures per VC; `strict` enforces the quotas with no "
        "borrowing (idle quota stays idle, as in Philly's VCs); `borrow` lends idle quota by weighted "
        "max-min and reclaims it by preemption, lowest-ranked job first.",
        "",
        "*Satisfaction* of a VC = GPU-seconds it received up to its entitlement, over its entitlement, where "
        "the entitlement at each instant is min(guarantee, GPUs its active jobs ask for): 1 means the VC had "
        "its guarantee whenever it had the demand. Over the whole trace every job finishes, so each VC's "
        "total GPU time is nearly the same in every run; satisfaction measures *when* it got it. Jain's "
        "index is taken over the VCs' satisfaction; it is scale-free (VCs all at 0.6 score 1, like VCs all at "
        "1), so the level is in the lowest VC's satisfaction and the *shortfall*: entitled minus received "
        "GPU-hours, summed over VCs. Rejected: jobs larger than their VC may ever hold (under `strict`, a VC "
        "with no guarantee can run nothing).",
        "",
        "## Overall",
        "",
        *overall_table(by, policies),
    ]
    for p in policies:
        if any((p, m) not in by for m in MODES):
            continue
        lines += ["", f"## Per VC, `{p}`", "",
                  "| VC | guarantee (GPUs) | jobs | avg JCT global / strict / borrow (h) | GPU-time share "
                  "(guaranteed) | satisfaction global / strict / borrow | borrowed GPU-h (borrow) | "
                  "reclaims (borrow) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        qs = {m: {q["queue"]: q for q in by[(p, m)]["queues"]} for m in MODES}
        for vc in sorted(vcs, key=lambda q: -q["guarantee"]):
            name = vc["queue"]
            g, s, b = (qs[m][name] for m in MODES)
            sat = " / ".join("-" if q["satisfaction"] is None else f"{q['satisfaction']:.3f}" for q in (g, s, b))
            lines.append(f"| {name} | {g['guarantee']} | {g['jobs']:,} | "
                         f"{hours(g['avg_jct'])} / {hours(s['avg_jct'])} / {hours(b['avg_jct'])} | "
                         f"{b['share_of_gpu_time']:.1%} ({b['guaranteed_share']:.1%}) | {sat} | "
                         f"{b['borrowed_gpu_seconds'] / 3600:,.0f} | {b['reclaims']:,} |")
    lines += ["", "![Per-VC satisfaction and average JCT](multitenant.png)", "", "## What the figures say", ""]
    for p in policies:
        if any((p, m) not in by for m in MODES):
            continue
        g, s, b = (by[(p, m)] for m in MODES)
        qg = {q["queue"]: q for q in g["queues"] if q["leaf"] and q["avg_jct"] is not None}
        qb = {q["queue"]: q for q in b["queues"] if q["leaf"] and q["avg_jct"] is not None}
        better = sorted(v for v in qg if v in qb and qb[v]["avg_jct"] < qg[v]["avg_jct"])
        worse = sorted(v for v in qg if v in qb and qb[v]["avg_jct"] > qg[v]["avg_jct"])
        lines.append(
            f"- `{p}`: average JCT {hours(g['avg_jct'])} h with one global queue, {hours(s['avg_jct'])} h with "
            f"strict quotas ({s['avg_jct'] / g['avg_jct']:.2f}x) and {hours(b['avg_jct'])} h with borrowing "
            f"({b['avg_jct'] / g['avg_jct']:.2f}x); utilization {g['utilization']:.1%} / {s['utilization']:.1%} / "
            f"{b['utilization']:.1%}; lowest VC satisfaction {g['min_satisfaction']:.3f} / "
            f"{s['min_satisfaction']:.3f} / {b['min_satisfaction']:.3f}; guarantee shortfall "
            f"{g['guarantee_shortfall_gpu_hours']:,.0f} / {s['guarantee_shortfall_gpu_hours']:,.0f} / "
            f"{b['guarantee_shortfall_gpu_hours']:,.0f} GPU-hours. With borrowing, {len(better)} VC(s) finish their "
            f"jobs sooner on average than in one global queue ({', '.join(better) or 'none'}) and {len(worse)} "
            f"later ({', '.join(worse) or 'none'}).")
    lines += [
        "",
        "Reading it: one global queue lets whichever VC submits the most (or, under `las`, the shortest) work "
        "take the cluster, so the others fall far below their guarantees (high shortfall) while the average JCT, "
        "dominated by the VCs with the most jobs, can look good; strict quotas keep every VC at its guarantee "
        "but leave quota idle (lower utilization) and cannot run a job larger than its VC's guarantee; borrowing "
        "keeps the guarantees and the cluster busy, at the price of reclaims (preemptions of borrowed jobs). "
        "Under `las` the queues also multiply preemptions: least-attained-service time-slicing happens inside "
        "each small queue, and every change of a queue's share moves its last jobs in or out.",
    ]
    lines += [
        "",
        "Why satisfaction stays below 1 even with quotas: in 300 s rounds a job that finishes mid-round leaves "
        "its GPUs idle until the next decision, a gang that does not fit what is left of its queue's budget "
        "waits (skip and continue takes smaller jobs behind it), and `consolidated` placement may refuse a "
        "gang that the GPU count alone would admit.",
        "",
        "Reproduce: the command above (one to five minutes per simulation on this machine, see the last "
        "column; `--workers` runs them in parallel). Every summary is in `multitenant_results.json`.",
    ]
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], policy: str, path: Path) -> None:
    by = {r["mode"]: r for r in results if r["policy"] == policy}
    if any(m not in by for m in MODES):
        return
    vcs = sorted((q for q in by["global"]["queues"] if q["leaf"]), key=lambda q: -q["guarantee"])
    names = [q["queue"] for q in vcs]
    x = np.arange(len(names))
    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    width = 0.27
    for k, m in enumerate(MODES):
        qs = {q["queue"]: q for q in by[m]["queues"]}
        sat = [qs[n]["satisfaction"] or 0.0 for n in names]
        jct = [(qs[n]["avg_jct"] or 0.0) / 3600 for n in names]
        axes[0].bar(x + (k - 1) * width, sat, width, label=m)
        axes[1].bar(x + (k - 1) * width, jct, width, label=m)
    axes[0].set_ylabel("satisfaction")
    axes[0].set_ylim(0, 1.05)
    axes[1].set_ylabel("average JCT (h)")
    axes[1].set_yscale("log")
    axes[1].set_xticks(x, [f"{n}\n({q['guarantee']})" for n, q in zip(names, vcs, strict=True)], fontsize=7)
    axes[1].set_xlabel("virtual cluster (guaranteed GPUs)")
    axes[0].legend(title="tenancy")
    fig.suptitle(f"Philly (full trace) on {CLUSTER}, {policy}: one global queue vs quotas (built-in model)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--policies", default="fifo,las")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from multitenant_results.json")
    args = ap.parse_args()
    trace = args.data / "philly" / "philly.csv"
    policies = [p for p in args.policies.split(",") if p]
    saved_path = OUT / "multitenant_results.json"
    if args.report_only:
        saved = json.loads(saved_path.read_text())  # {"command", "date", "results"} of the run that measured
        plot(saved["results"], policies[-1], OUT / "multitenant.png")
        (OUT / "multitenant.md").write_text(write_report(saved["results"], policies, saved["command"], trace,
                                                         saved["date"]))
        update_section("multitenant", benchmarks_section(saved["results"], policies, saved["command"],
                                                         saved["date"]))
        print(f"rewrote {OUT / 'multitenant.md'} from {saved_path}")
        return
    if not trace.is_file():
        sys.exit(f"no Philly trace at {trace}")
    tasks = [(p, m) for p in policies for m in MODES]
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = {pool.submit(run_one, str(trace), p, m): (p, m) for p, m in tasks}
        for f in as_completed(futures):
            r = f.result()
            results.append(r)
            print(f"{r['policy']:10s} {r['mode']:7s} avg JCT {r['avg_jct'] / 3600:8.2f} h  "
                  f"Jain {r['jain_satisfaction']:.3f}  ({r['wall_seconds_total']:.0f} s)", flush=True)
    results.sort(key=lambda r: (policies.index(r["policy"]), MODES.index(r["mode"])))
    command = "python benchmarks/multitenant.py " + " ".join(sys.argv[1:])
    OUT.mkdir(parents=True, exist_ok=True)
    date = today()
    saved_path.write_text(json.dumps({"command": command.strip(), "date": date, "results": results}, indent=1,
                                     default=float) + "\n")
    plot(results, policies[-1], OUT / "multitenant.png")
    (OUT / "multitenant.md").write_text(write_report(results, policies, command.strip(), trace, date))
    update_section("multitenant", benchmarks_section(results, policies, command.strip(), date))
    print(f"wrote {OUT / 'multitenant.md'}")


if __name__ == "__main__":
    main()
