"""Profile one configuration on the full Philly-derived trace (pyinstrument, one process, one core).

Prints the simulation's summary (average JCT, preemptions, migrations: what an optimization must
leave unchanged) and the frames that take the most time, by self time and by total time, so that
the hot spots of a configuration can be read without a viewer.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/profile_philly.py las:tesserae+packing [--top 15] [--days 40,50]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

from _profile import print_top_frames
from _report import SHARED_DATA

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="policy:placement[+packing], e.g. las:tesserae+packing")
    ap.add_argument("--cluster", default="64x8")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--no-profile", action="store_true", help="only the summary and wall time")
    ap.add_argument("--days", help="FROM,TO: only the jobs submitted in these days of the trace (a window)")
    args = ap.parse_args()
    trace = SHARED_DATA / "philly" / "philly.csv"
    if not trace.exists():
        sys.exit(f"needs {trace} (the shared reference data beside the checkout)")
    from pyinstrument import Profiler

    from tesserae.config import RunSpec, parse_run_label
    from tesserae.profiles.loader import load_profile
    from tesserae.sim.runner import simulate
    from tesserae.traces import read_trace
    from tesserae.traces.cluster_file import load_cluster

    model = load_profile(None)
    cluster = load_cluster(args.cluster)
    specs = read_trace(str(trace), "philly", model)
    if args.days:
        lo, hi = (float(d) * 86400 + min(j.submit_time for j in specs) for d in args.days.split(","))
        specs = [j for j in specs if lo <= j.submit_time < hi]
    run = parse_run_label(args.config, RunSpec())
    profiler = None if args.no_profile else Profiler(interval=0.005)
    t0, c0 = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.start()
    _, s = simulate(specs, cluster, model, run)
    if profiler is not None:
        profiler.stop()
    wall = time.perf_counter() - t0
    out = {"config": args.config, "jobs": len(specs), "wall_s": round(wall, 1),
           "cpu_s": round(time.process_time() - c0, 1), "completed": s["completed"], "avg_jct": s["avg_jct"],
           "makespan": s["makespan"], "preemptions": s["preemptions"], "migrations": s["migrations"],
           "decisions": s["decisions"], "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    print(json.dumps(out))
    if profiler is None:
        return
    session = profiler.last_session
    root = session.root_frame() if session is not None else None
    if root is None:
        return
    print_top_frames(root, args.top)


if __name__ == "__main__":
    main()
