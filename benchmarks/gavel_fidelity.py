"""Side by side with Gavel's own simulator: our Gavel baselines against the logs of Gavel's runs.

    .venv/bin/python benchmarks/gavel_fidelity.py \\
        --case NAME,TRACE,POLICY,V:P:K,GAVEL_LOG,GAVEL_WALL_SECONDS [--case ...] [--out docs/reproduction]

For each case, runs our side as the ``tesserae simulate`` command below (a subprocess, timed), on
the same Gavel trace, cluster and throughput table, with Gavel's setting (360 s rounds, no restart
overhead, one GPU per server as Gavel's ``--num_gpus_per_server`` default 1:1:1), and compares it
with the Gavel run whose log (stdout and stderr of ``simulate_scheduler_with_trace.py``) is given.
POLICY is Gavel's name: ``max_min_fairness_perf`` -> ``gavel-maxmin``, ``max_min_fairness_packed``
-> ``gavel-maxmin --packing``, ``fifo_perf`` -> ``gavel-fifo``. GAVEL_WALL_SECONDS is the wall time
of the Gavel run (measured by whoever ran it). This script neither fetches nor runs Gavel.

Writes ``gavel_results.json`` (every figure, per-job JCTs of both sides) under ``--out`` and prints
the table ``docs/reproduction/gavel.md`` quotes.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "reproduction"
THROUGHPUTS = ROOT.parent / "shared" / "data" / "gavel" / "simulation_throughputs.json"
POLICIES = {
    "max_min_fairness_perf": ["--policy", "gavel-maxmin"],
    "max_min_fairness_packed": ["--policy", "gavel-maxmin", "--packing"],
    "fifo_perf": ["--policy", "gavel-fifo"],
}
_JOB = re.compile(r"^Job (\d+): ([0-9.]+)$")
_TOTAL = re.compile(r"^Total duration: ([0-9.]+) seconds")
_FAILED = re.compile(r"\[Job failed\]\tJob ID: (\d+)\t")


def read_gavel_log(path: Path) -> tuple[dict[int, float], float, list[int]]:
    """Per-job JCT (Gavel's ``get_average_jct`` lines), the makespan (``Total duration``) and the
    jobs Gavel gave up on (``[Job failed]``: five failed micro-tasks in a row)."""
    jct: dict[int, float] = {}
    total = None
    failed: list[int] = []
    for line in path.read_text().splitlines():
        m = _FAILED.search(line)
        if m:
            failed.append(int(m.group(1)))
            continue
        m = _JOB.match(line.strip())
        if m:
            jct[int(m.group(1))] = float(m.group(2))
            continue
        m = _TOTAL.match(line.strip())
        if m:
            total = float(m.group(1))
    if not jct or total is None:
        raise SystemExit(f"{path}: no 'Job N: JCT' lines or no 'Total duration' line (not a finished Gavel run)")
    return jct, total, failed


def cluster_spec(vpk: str) -> str:
    v, p, k = (int(x) for x in vpk.split(":"))
    parts = [f"{n}x1:{name}" for n, name in ((k, "k80"), (p, "p100"), (v, "v100")) if n > 0]
    return ",".join(parts)


def our_command(trace: Path, policy: str, vpk: str, out: Path) -> list[str]:
    return ["tesserae", "simulate", "--trace", str(trace), "--format", "gavel", "--cluster", cluster_spec(vpk),
            "--profile", str(THROUGHPUTS), *POLICIES[policy], "--placement", "gavel", "--round-seconds", "360",
            "--restart-overhead", "0", "--out", str(out), "--quiet"]


def run_ours(cmd: list[str], out: Path) -> tuple[dict[int, float], float, float]:
    exe = str(Path(sys.executable).parent / "tesserae")
    t0 = time.perf_counter()
    subprocess.run([exe, *cmd[1:]], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with (out / "jobs.csv").open() as f:
        jct = {int(r["name"]): float(r["jct"]) for r in csv.DictReader(f) if r["jct"]}
    makespan = json.loads((out / "summary.json").read_text())["makespan"]
    return jct, float(makespan), wall


def compare(name: str, trace: Path, policy: str, vpk: str, log: Path, gavel_wall: float, work: Path
            ) -> dict[str, Any]:
    g_jct, g_total, failed = read_gavel_log(log)
    out = work / name
    cmd = our_command(trace, policy, vpk, out)
    o_jct, o_makespan, wall = run_ours(cmd, out)
    ids = sorted(g_jct)
    # Jobs Gavel failed have no JCT there; they are compared on neither side (and reported).
    if set(ids) != set(o_jct) - set(failed):
        raise SystemExit(f"{name}: the two runs finished different jobs ({len(ids)} against {len(o_jct)})")
    g = np.array([g_jct[i] for i in ids])
    o = np.array([o_jct[i] for i in ids])
    rel = np.abs(o - g) / g
    return {
        "case": name, "policy": policy, "cluster_v100_p100_k80": vpk, "trace": trace.name, "jobs": len(ids),
        "gavel_failed_jobs": failed,
        "command": " ".join([*cmd[:-3], "--out", f"OUT/{name}", "--quiet"]),
        "gavel_avg_jct": float(g.mean()), "ours_avg_jct": float(o.mean()),
        "avg_jct_diff": float(o.mean() / g.mean() - 1),
        "gavel_makespan": g_total, "ours_makespan": o_makespan, "makespan_diff": float(o_makespan / g_total - 1),
        "within_10pct": float((rel <= 0.10).mean()), "within_1pct": float((rel <= 0.01).mean()),
        "pearson": float(np.corrcoef(g, o)[0, 1]) if len(ids) > 1 else 1.0,
        "gavel_wall_s": gavel_wall, "ours_wall_s": wall, "wall_ratio_ours_over_gavel": wall / gavel_wall,
        "jct": {"ids": ids, "gavel": g.tolist(), "ours": o.tolist()},
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| case | Gavel policy | jobs | avg JCT Gavel (h) | ours (h) | diff | makespan Gavel (h) | ours (h) | diff "
            "| within 10% | within 1% | Pearson r | wall ours / Gavel |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        lines.append(
            f"| {r['case']} | `{r['policy']}` | {r['jobs']} | {r['gavel_avg_jct'] / 3600:.2f} | "
            f"{r['ours_avg_jct'] / 3600:.2f} | {r['avg_jct_diff']:+.1%} | {r['gavel_makespan'] / 3600:.2f} | "
            f"{r['ours_makespan'] / 3600:.2f} | {r['makespan_diff']:+.1%} | {r['within_10pct']:.0%} | "
            f"{r['within_1pct']:.0%} | {r['pearson']:.3f} | {r['wall_ratio_ours_over_gavel']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", required=True,
                    help="NAME,TRACE,GAVEL_POLICY,V:P:K,GAVEL_LOG,GAVEL_WALL_SECONDS")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gavel_fidelity"))
    args = ap.parse_args()
    rows = []
    for spec in args.case:
        parts = spec.split(",")
        if len(parts) != 6 or parts[2] not in POLICIES:
            raise SystemExit(f"--case '{spec}': expected NAME,TRACE,POLICY,V:P:K,LOG,WALL with POLICY one of "
                             f"{', '.join(POLICIES)}")
        name, trace, policy, vpk, log, wall = parts
        rows.append(compare(name, Path(trace), policy, vpk, Path(log), float(wall), args.work))
        r = rows[-1]
        print(f"{name}: avg JCT {r['avg_jct_diff']:+.2%}, within 10% {r['within_10pct']:.0%}, "
              f"r {r['pearson']:.3f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gavel_results.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
