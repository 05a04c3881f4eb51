"""A synthetic "Philly x10" trace (ten times the jobs, same shape) replayed on a ten times larger cluster.

The generator resamples the Philly-derived trace: each of the ``factor`` x 82,247 jobs copies the
GPU count, duration and virtual cluster of a job drawn uniformly (with replacement) from the
original, and arrives at that job's submit time moved by a uniform jitter of at most
``JITTER_S`` seconds: the same arrival pattern over the same 109 days (diurnal and weekly shape,
bursts), the same joint distribution of size and duration, ``factor`` times the rate. It is
deterministic for a seed. The trace is written outside the repository (``out/``, ignored by git)
and each configuration is replayed on it in a fresh process by ``sim_throughput.py``, so that peak
memory is that run's own. Writes the ``philly_x10`` section of BENCHMARKS.md.

    .venv/bin/python benchmarks/philly_x10.py [--seed 0] [--factor 10] [--cluster 640x8]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _report import ROOT, SHARED_DATA, machine, today, update_section
from sim_throughput import result_table

JITTER_S = 1800.0
DEFAULT_CONFIGS = ["tiresias-las:consolidated", "las:tesserae+packing", "tiresias-las:tesserae+packing"]
FORMAT = "%Y-%m-%d %H:%M:%S"


def generate(src: Path, dst: Path, factor: int, seed: int) -> int:
    """Write the resampled trace to ``dst``; returns its number of jobs."""
    with src.open(newline="") as f:
        rows = list(csv.DictReader(f))
    epoch = dt.datetime(1970, 1, 1)
    submit = np.array([(dt.datetime.strptime(r["timestamp"], FORMAT) - epoch).total_seconds() for r in rows])
    rng = np.random.default_rng(seed)
    n = factor * len(rows)
    pick = rng.integers(len(rows), size=n)
    when = np.clip(submit[pick] + rng.uniform(-JITTER_S, JITTER_S, size=n), submit.min(), submit.max())
    order = np.argsort(when, kind="stable")
    dst.parent.mkdir(parents=True, exist_ok=True)
    with dst.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"])
        for i in order.tolist():
            r = rows[int(pick[i])]
            stamp = (epoch + dt.timedelta(seconds=int(when[i]))).strftime(FORMAT)
            w.writerow([stamp, r["duration"], r["num_gpus"], r["gpu_time"], r["cluster"]])
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--cluster", default="640x8")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per configuration")
    ap.add_argument("--out", type=Path, help="the generated trace (default out/philly_x<factor>_seed<seed>.csv)")
    args = ap.parse_args()
    src = SHARED_DATA / "philly" / "philly.csv"
    if not src.exists():
        sys.exit(f"needs {src} (the shared reference data beside the checkout)")
    dst = args.out or ROOT / "out" / f"philly_x{args.factor}_seed{args.seed}.csv"
    t0 = time.perf_counter()
    n = generate(src, dst, args.factor, args.seed)
    gen_s = time.perf_counter() - t0
    print(f"generated {n} jobs in {gen_s:.1f} s -> {dst}", file=sys.stderr, flush=True)
    rows = []
    for label in args.configs.split(","):
        print(f"running {label} ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, str(Path(__file__).with_name("sim_throughput.py")), "--cluster", args.cluster,
               "--trace", str(dst), "--child", label]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            rows.append({"label": label, "error": f"not finished within {args.timeout:.0f} s"})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            continue
        if out.returncode != 0:
            rows.append({"label": label, "error": (out.stderr.strip().splitlines() or ["failed"])[-1]})
        else:
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    # Every measured row is kept in a JSON file, so a rerun of some configurations replaces only
    # their rows; each row carries the date and command of its own run.
    store = ROOT / "docs" / "benchmarks" / f"philly_x{args.factor}.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    saved = json.loads(store.read_text()) if store.exists() else []
    stamp = {"date": today(), "seed": args.seed, "cluster": args.cluster, "jobs_in_trace": n,
             "command": ".venv/bin/python benchmarks/philly_x10.py " + " ".join(sys.argv[1:])}
    for r in rows:
        r.update(stamp)
    fresh = {r["label"] for r in rows}
    rows = [r for r in saved if r["label"] not in fresh] + rows
    store.write_text(json.dumps(rows, indent=1) + "\n")
    title = f"## Philly x{args.factor}: a synthetic trace ten times Philly's (`benchmarks/philly_x10.py`)"
    how = (f"Command: `.venv/bin/python benchmarks/philly_x10.py --seed {args.seed} --factor {args.factor} "
           f"--cluster {args.cluster}` (rows measured by separate runs name their own command and date in "
           f"`docs/benchmarks/philly_x{args.factor}.json`). Machine: {machine()}. Updated: {today()}.\n"
           f"Trace: {n:,} jobs resampled from `../shared/data/philly/philly.csv` (seed {args.seed}; each job a "
           f"uniform draw of an original job's GPU count and duration, at its submit time +- {JITTER_S:.0f} s), "
           f"generated in {gen_s:.0f} s and not kept in the repository; cluster {args.cluster}; built-in "
           "throughput model, 300 s rounds, 30 s restart overhead. CPU time is the process's own: on this shared "
           "machine the wall time also holds the time other processes had the cores.")
    lines = [title, "", how, "", *result_table(rows, dated=True)]
    update_section("philly_x10", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
