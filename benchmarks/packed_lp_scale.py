"""CPU time of Gavel's packed max-min LP per decision at 256 GPUs (issue 29: within 10 s).

    .venv/bin/python benchmarks/packed_lp_scale.py [--solves 100] [--per-job] [--write]

The placement study's heterogeneous 256-GPU setting (``reproduce_tesserae.py``: 11x8 K80, 11x8
P100, 10x8 V100; Philly arrivals of days 15-30 thinned to 256 GPUs, seed 0, job types from Gavel's
``simulation_throughputs.json``) under ``gavel-maxmin --packing`` with Gavel's placement and 30 s
restarts, as the study runs it. Each LP the policy solves (one per decision that re-solves) is timed
in CPU seconds of this process, with its size; the run stops after ``--solves`` LPs. ``--per-job``
solves the LP over every job and pair of jobs instead of the one over job classes (the formulation
before issue 29; it had not finished one run in 120 s of CPU). ``--write`` puts the figures in the
``packed_lp`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from _report import machine, today, update_section
from reproduce_tesserae import CLUSTERS, gavel_model, philly_workload
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobTable
from tesserae.scheduling.gavel_maxmin import GavelMaxMin
from tesserae.sim.runner import RunSpec, simulate

#: Issue 29's bound on one decision's LP.
TARGET_CPU = 10.0


class _Enough(Exception):
    """Raised from inside the simulation once enough LPs were timed."""


def measure(solves: int, by_classes: bool) -> list[dict]:
    """The first ``solves`` LPs of the run: jobs, pairs, variables and CPU seconds of each."""
    cluster = parse_cluster_spec(CLUSTERS["hetero-256"][0])
    specs = philly_workload(cluster.num_gpus, 0)
    solve = GavelMaxMin.solve
    log: list[dict] = []

    def timed(self: GavelMaxMin, table: JobTable, rows: list[int], pairs: list[tuple[int, int]] | None = None):
        self.by_classes = by_classes
        t0 = time.process_time()
        out = solve(self, table, rows, pairs)
        log.append({"jobs": len(rows), "pairs": len(pairs or []), "variables": self.variables[-1],
                    "cpu": time.process_time() - t0})
        if len(log) >= solves:
            raise _Enough
        return out

    GavelMaxMin.solve = timed
    try:
        simulate(specs, cluster, gavel_model(),
                 RunSpec(policy="gavel-maxmin", packing=True, placement="gavel", restart_overhead=30.0))
    except _Enough:
        pass
    finally:
        GavelMaxMin.solve = solve
    return log


def section(log: list[dict], by_classes: bool, command: str) -> str:
    cpu = [r["cpu"] for r in log]
    worst = max(log, key=lambda r: r["cpu"])
    table = "\n".join([
        "| LPs | jobs per LP (max) | job pairs per LP (max) | LP variables (max) | CPU per LP: median (s) "
        "| max (s) | target (s) |", "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {len(log)} | {max(r['jobs'] for r in log)} | {max(r['pairs'] for r in log)} "
        f"| {max(r['variables'] for r in log)} | {statistics.median(cpu):.3f} | {max(cpu):.3f} | {TARGET_CPU:g} |"])
    return f"""## Gavel's packed LP at 256 GPUs (`benchmarks/packed_lp_scale.py`)

`{command}` ({today()}; {machine()}; load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}
at the end). The placement study's hetero-256 Philly workload (11x8 K80, 11x8 P100, 10x8 V100, days
15-30 thinned to 256 GPUs, seed 0) under `gavel-maxmin --packing`, Gavel's placement, 30 s restarts;
the LP {'over job classes and pairs of classes' if by_classes else 'over every job and pair of jobs'}.
CPU seconds of each LP solve (one per re-solving decision), first {len(log)} LPs of the run:

{table}

The slowest LP: {worst['jobs']} jobs, {worst['pairs']} pairs, {worst['variables']} variables.
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solves", type=int, default=100, help="LPs to time (the run stops after them)")
    ap.add_argument("--per-job", action="store_true", help="the LP over every job and pair of jobs")
    ap.add_argument("--write", action="store_true", help="write the packed_lp section of BENCHMARKS.md")
    args = ap.parse_args()
    if args.solves < 1:
        ap.error("--solves must be at least 1")
    log = measure(args.solves, not args.per_job)
    if not log:
        sys.exit("the run solved no LP")
    cpu = [r["cpu"] for r in log]
    print(f"{len(log)} LPs: CPU median {statistics.median(cpu):.3f} s, max {max(cpu):.3f} s; "
          f"at most {max(r['jobs'] for r in log)} jobs, {max(r['pairs'] for r in log)} pairs, "
          f"{max(r['variables'] for r in log)} variables")
    text = section(log, not args.per_job, "benchmarks/packed_lp_scale.py " + " ".join(sys.argv[1:]))
    if args.write:
        update_section("packed_lp", text)
        print("wrote the packed_lp section of BENCHMARKS.md")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
