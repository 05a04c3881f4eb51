"""Chaos: SIGKILL the controller at random points while jobs run; every job must complete exactly once.

    .venv/bin/python benchmarks/chaos.py --jobs 40 --kills 60 --seed 1

A real ``tesserae server`` (local executor, virtual GPUs, LAS with short rounds, so runs are
started, preempted and resumed all the time) runs toy jobs that checkpoint every few iterations.
The controller is killed with SIGKILL over and over, two ways at once: from inside, at a random
step of its write-ahead protocol (``TESSERAE_FAULT=random:SEED:P``, see ``runtime.faults``), and
from outside, at a random moment (0.3 to 2.5 s after it answers). After each kill a new server
starts on the same state folder. Once the kill budget is spent the last server runs every job to
the end. Then the invariants are checked against what the jobs themselves recorded:

- every job completed exactly once (the toy appends a line per completion): *lost* are jobs that
  never completed, *duplicated* jobs that completed more than once;
- no two runs of a job at once (the toy locks its checkpoint folder and records a clash);
- no GPU given twice (each run locks a file per GPU it was given and records a clash);
- no job process left behind.

The section ``chaos`` of BENCHMARKS.md gets kills survived, jobs, lost, duplicated and the rest.
``tests/runtime/test_runtime_chaos.py`` runs a short version in CI.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _report import machine, today, update_section
from support.chaos import run_chaos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fault-p", type=float, default=0.03, help="Kill probability at each fault point.")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--no-write", action="store_true", help="Do not update BENCHMARKS.md.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tesserae-chaos-") as tmp:
        r = run_chaos(Path(tmp), jobs=args.jobs, kills=args.kills, seed=args.seed, gpus=args.gpus,
                      fault_p=args.fault_p, timeout=args.timeout, say=lambda m: print(m, flush=True))
    print(r.summary())
    if args.no_write:
        raise SystemExit(0 if r.ok else 1)
    command = (f".venv/bin/python benchmarks/chaos.py --jobs {args.jobs} --kills {args.kills} --gpus {args.gpus} "
               f"--seed {args.seed} --fault-p {args.fault_p}")
    body = f"""## Chaos: the controller SIGKILLed at random (`benchmarks/chaos.py`)

Command: `{command}`. Machine: {machine()}. Date: {today()}.

A real server (local executor, {args.gpus} virtual GPUs, LAS, rounds of 0.5 s, grace 3 s) runs {args.jobs} toy jobs
(20-60 iterations of 20-50 ms, 1 or 2 GPUs, a checkpoint every 5 iterations); its controller is SIGKILLed at
random steps of the write-ahead protocol (probability {args.fault_p} at each fault point) and at random moments
(0.3-2.5 s after it answers), and restarted on the same state folder, until {args.kills} kills; then it runs
every job to the end. The jobs themselves record completions, runs of one job overlapping, and GPUs held by
two runs at once.

| kills survived | at fault points | at random moments | jobs | completed | lost | duplicated | two runs at once | GPU given twice | leftover processes | runs | adopted | lost runs | wall (s) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| {r.kills} | {r.fault_kills} | {r.timer_kills} | {r.jobs} | {r.completed} | {len(r.lost)} | {len(r.duplicated)} | {len(r.overlaps)} | {len(r.double_booked)} | {r.leftover_processes} | {r.runs} | {r.adopted} | {r.lost_runs} | {r.wall_seconds:.0f} |
"""  # noqa: E501
    update_section("chaos", body)
    print("wrote the 'chaos' section of BENCHMARKS.md")
    raise SystemExit(0 if r.ok else 1)


if __name__ == "__main__":
    main()
