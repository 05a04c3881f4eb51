"""Replay the full Philly-derived trace (82,247 jobs over 109 days) and measure the simulator.

For each configuration, in a fresh subprocess (so peak memory is that run's own): wall time,
peak resident memory, decisions and events per second. Writes the `sim_throughput` section of
BENCHMARKS.md.

    .venv/bin/python benchmarks/sim_throughput.py [--cluster 64x8] [--configs fifo:consolidated,...]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from _report import SHARED_DATA, machine, today, update_section

DEFAULT_CONFIGS = ["fifo:consolidated", "tiresias-las:consolidated", "tiresias-las:tiresias",
                   "tiresias-las:tesserae+packing", "las:tesserae+packing"]


def run_one(label: str, cluster: str, trace: str) -> dict:
    """Runs in the child process: one simulation, returns its figures."""
    from tesserae.config import RunSpec, parse_run_label
    from tesserae.profiles.loader import load_profile
    from tesserae.sim.runner import simulate
    from tesserae.traces import read_trace
    from tesserae.traces.cluster_file import load_cluster

    t0 = time.perf_counter()
    model = load_profile(None)
    cl = load_cluster(cluster)
    specs = read_trace(trace, "philly", model)
    read_s = time.perf_counter() - t0
    run = parse_run_label(label, RunSpec())
    _, s = simulate(specs, cl, model, run)
    total = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_mb = usage.ru_maxrss / 1024
    return {"label": label, "jobs": s["jobs"], "completed": s["completed"], "read_s": read_s,
            "sim_s": s["wall_seconds"], "total_s": total, "cpu_s": time.process_time(),
            "peak_mb": peak_mb, "decisions": s["decisions"],
            "events": s["events"], "decision_mean_ms": (s["decision_seconds_mean"] or 0) * 1000,
            "avg_jct_h": (s["avg_jct"] or 0) / 3600, "utilization": s["utilization"]}


BASELINE = "tiresias-las:consolidated"


def result_table(rows: list[dict], dated: bool = False) -> list[str]:
    """Markdown table of ``run_one`` rows, with wall and CPU time as ratios against ``BASELINE``."""
    base = next((r for r in rows if r["label"] == BASELINE and "error" not in r), None)
    head = ("| configuration | jobs done | wall total (s) | of which reading (s) | CPU (s) | wall / baseline "
            "| CPU / baseline | peak memory (MB) | decisions | mean decision (ms) | avg JCT (h) | utilization |")
    out = [head + (" measured |" if dated else ""), "| --- " * (12 + dated) + "|"]
    for r in rows:
        date = f" {r.get('date', '')} |" if dated else ""
        if "error" in r:
            out.append(f"| {r['label']} | failed: {r['error']} |" + " |" * 10 + date)
            continue
        wall_x = f"{r['total_s'] / base['total_s']:.2f}" if base else "n/a"
        cpu_x = f"{r['cpu_s'] / base['cpu_s']:.2f}" if base and base.get("cpu_s") and r.get("cpu_s") else "n/a"
        cpu = f"{r['cpu_s']:.1f}" if r.get("cpu_s") else "n/a"
        out.append(f"| {r['label']} | {r['completed']}/{r['jobs']} | {r['total_s']:.1f} | {r['read_s']:.1f} | {cpu} "
                   f"| {wall_x} | {cpu_x} | {r['peak_mb']:.0f} | {r['decisions']} | {r['decision_mean_ms']:.2f} "
                   f"| {r['avg_jct_h']:.1f} | {r['utilization']:.1%} |" + date)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="64x8")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    ap.add_argument("--trace", help="a Philly-format CSV instead of the shared one (benchmarks/philly_x10.py)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    trace = SHARED_DATA / "philly" / "philly.csv" if args.trace is None else Path(args.trace)
    if args.child:
        print(json.dumps(run_one(args.child, args.cluster, str(trace))))
        return
    if args.trace is not None:
        sys.exit("--trace only goes with the runs of benchmarks/philly_x10.py, which writes its own section")
    if not trace.exists():
        sys.exit(f"needs {trace} (the shared reference data beside the checkout)")
    rows = []
    for label in args.configs.split(","):
        print(f"running {label} ...", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, __file__, "--cluster", args.cluster, "--child", label],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            rows.append({"label": label, "error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"})
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr)
    lines = [
        "## Full Philly-derived trace replay (`benchmarks/sim_throughput.py`)",
        "",
        f"Command: `.venv/bin/python benchmarks/sim_throughput.py --cluster {args.cluster}`. "
        f"Machine: {machine()}. Date: {today()}.",
        "Trace: `../shared/data/philly/philly.csv`, built-in throughput model, 300 s rounds, 30 s restart overhead.",
        "",
        "CPU is the process's own time; on a shared machine the wall time also holds the time others had the cores, "
        "so the ratios against `tiresias-las:consolidated` of the same run are the figures to compare.",
        "",
        *result_table(rows),
    ]
    update_section("sim_throughput", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
