"""Importing a Slurm history: a synthetic sacct dump of 100,000 jobs through ``tesserae trace import slurm``.

``synthetic_dump`` writes a dump as ``sacct --parsable2 --allocations --duplicates --format`` with
``traces.slurm.SACCT_FORMAT`` prints it, with what a busy site's month holds: Poisson arrivals
(one job every ~26 s: 100,000 jobs in a month), the GPU counts of Philly's mix, typed and untyped
GRES, a few hundred accounts and users, about 70% completed, 10% failed, 8% cancelled while
running and 5% while waiting, 3% timed out, 1% node failures, 2% requeued once (two records),
arrays of tasks (``123_4``), CPU-only jobs, jobs still pending or running at the end, and ``|`` in
some job names. The import target of issue 28: <= 10 s for 100,000 jobs, end to end (the CLI: read,
convert, write the canonical CSV). The reader alone and the canonical CSV reader on the same jobs
are timed in the same run, as the baseline. Writes the ``slurm_import`` section of BENCHMARKS.md.

    .venv/bin/python benchmarks/slurm_import.py [--jobs 100000] [--seed 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from _report import machine, today, update_section

START = datetime(2024, 3, 1, tzinfo=UTC).timestamp()
GPU_MIX = ((1, 0.7), (2, 0.1), (4, 0.1), (8, 0.08), (16, 0.02))
ENDS = (("COMPLETED", 0.70), ("FAILED", 0.10), ("CANCELLED_RUN", 0.08), ("CANCELLED_WAIT", 0.05), ("TIMEOUT", 0.03),
        ("NODE_FAIL", 0.01), ("REQUEUED", 0.02), ("RUNNING", 0.005), ("PENDING", 0.005))


def _t(x: float) -> str:
    return datetime.fromtimestamp(x, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def synthetic_dump(path: Path, jobs: int, seed: int = 1) -> int:
    """Write a dump of ``jobs`` jobs (see the module docstring); returns its number of records."""
    from tesserae.traces.slurm import SACCT_FORMAT

    rng = np.random.default_rng(seed)
    gaps = rng.exponential(30 * 86400 / jobs, jobs)
    submit = START + np.cumsum(gaps)
    counts, p = zip(*GPU_MIX, strict=True)
    gpus = rng.choice(counts, size=jobs, p=p)
    ends, q = zip(*ENDS, strict=True)
    end_kind = rng.choice(len(ends), size=jobs, p=np.array(q) / sum(q))
    wait = rng.exponential(600, jobs)
    run = np.minimum(np.exp(rng.normal(7.5, 1.6, jobs)), 7 * 86400).astype(np.int64) + 1
    users = rng.integers(0, 400, jobs)
    cpu_only = rng.random(jobs) < 0.03
    typed = rng.random(jobs) < 0.5
    array = rng.random(jobs) < 0.05
    records = 0
    next_raw = 1
    with open(path, "w") as f:
        f.write("|".join(SACCT_FORMAT) + "\n")
        for k in range(jobs):
            raw = next_raw
            next_raw += 1
            g = int(gpus[k])
            jobid = f"{raw - (k % 7)}_{k % 7}" if array[k] else str(raw)
            nodes = max(1, g // 8)
            gres = "" if cpu_only[k] else (f"gres/gpu:a100={g},gres/gpu={g}," if typed[k] else f"gres/gpu={g},")
            alloc = f"billing={4 * g},cpu={4 * g},{gres}mem={16 * g}G,node={nodes}"
            req = f"billing={4 * g},cpu={4 * g},{gres}mem={16 * g}G,node={nodes}"
            user = f"u{users[k]:03d}"
            account = f"acct{users[k] % 37:02d}"
            name = "train|eval" if k % 997 == 0 else ("resnet50" if k % 5 == 0 else f"job{k % 100}")
            s = float(submit[k])
            start = s + float(wait[k])
            kind = ends[end_kind[k]]
            attempts: list[tuple[str, float | None, int]] = []
            if kind == "CANCELLED_WAIT":
                attempts.append(("CANCELLED by 1000", None, 0))
            elif kind == "PENDING":
                attempts.append(("PENDING", None, 0))
            elif kind == "REQUEUED":
                attempts.append(("REQUEUED", start, int(run[k] // 3) + 1))
                attempts.append(("COMPLETED", start + run[k] + 60, int(run[k])))
            else:
                state = {"CANCELLED_RUN": "CANCELLED by 1000"}.get(kind, kind)
                attempts.append((state, start, int(run[k])))
            for state, st, secs in attempts:
                if st is None:
                    start_s, end_s, alloc_s, cpus = "None" if state == "PENDING" else "Unknown", (
                        "Unknown" if state == "PENDING" else _t(s + wait[k])), "", 0
                else:
                    end_s = "Unknown" if state == "RUNNING" else _t(st + secs)
                    start_s, alloc_s, cpus = _t(st), alloc, 4 * g
                f.write("|".join((str(raw), jobid, state, _t(s), start_s, end_s, str(secs), alloc_s, req, str(cpus),
                                  str(nodes), user, account, "gpu", name)) + "\n")
                records += 1
    return records


def _timed(cmd: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of a command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="Keep the dump and the canonical output here.")
    args = ap.parse_args()
    from tesserae.profiles.default_model import DefaultModel
    from tesserae.traces.canonical import read_canonical_csv
    from tesserae.traces.slurm import read_slurm_import

    work = args.keep or Path(tempfile.mkdtemp(prefix="slurm-import-"))
    work.mkdir(parents=True, exist_ok=True)
    dump, out = work / "sacct.txt", work / "history.csv"
    t0 = time.perf_counter()
    records = synthetic_dump(dump, args.jobs, args.seed)
    gen = time.perf_counter() - t0
    cli = [sys.executable, "-m", "tesserae.cli", "trace", "import", "slurm", str(dump), "--out", str(out)]
    walls, cpus, reads, canon = [], [], [], []
    for _ in range(args.repeat):
        wall, cpu = _timed(cli)
        walls.append(wall)
        cpus.append(cpu)
        t0 = time.process_time()
        result = read_slurm_import(dump, DefaultModel())
        reads.append(time.process_time() - t0)
        t0 = time.process_time()
        read_canonical_csv(out)
        canon.append(time.process_time() - t0)
    left = ", ".join(f"{n} {why}" for why, n in sorted(result.left_out.items(), key=lambda x: -x[1]))
    load = os.getloadavg()
    size = dump.stat().st_size / 2**20
    med = [sorted(x)[len(x) // 2] for x in (walls, cpus, reads, canon)]
    runs = [", ".join(f"{w:.2f}" for w in x) for x in (walls, cpus, reads, canon)]
    body = f"""## Importing a Slurm history (`benchmarks/slurm_import.py`)

Issue 28's target: a 100,000-job sacct dump imported in <= 10 s. A synthetic dump
(`synthetic_dump`: a month of a busy site, every end state, requeues, arrays, CPU-only jobs) of
{args.jobs:,} jobs, {records:,} records, {size:.1f} MiB, imported {args.repeat} times; median of the runs.

| step | seconds (median) | all runs |
| --- | ---: | --- |
| `tesserae trace import slurm DUMP --out history.csv` (start, read, write), wall | {med[0]:.2f} | {runs[0]} |
| the same command, CPU (user + system) | {med[1]:.2f} | {runs[1]} |
| `read_slurm_import` alone (parse, group attempts, convert), CPU | {med[2]:.2f} | {runs[2]} |
| baseline: `read_canonical_csv` of the {len(result.jobs):,} imported jobs, CPU | {med[3]:.2f} | {runs[3]} |

Imported {len(result.jobs):,} jobs; left out: {left}. Generating the dump took {gen:.1f} s.
Target (<= 10 s): CPU {max(cpus):.2f} s at most ({'met' if max(cpus) <= 10 else 'MISSED'}); wall {max(walls):.2f} s
at most ({'met' if max(walls) <= 10 else 'MISSED'}) on this shared machine, whose load inflates wall time.

Machine: {machine()}; load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} at the end; {today()}.
Command: `.venv/bin/python benchmarks/slurm_import.py --jobs {args.jobs} --seed {args.seed} --repeat {args.repeat}`.
"""
    update_section("slurm_import", body)
    print(body)


if __name__ == "__main__":
    main()
