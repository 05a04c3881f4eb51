#!/usr/bin/env python3
"""A CPU-only toy "trainer" that cooperates with Tesserae through ``tesserae.job``.

Each iteration takes ``--seconds-per-iteration`` seconds (a paced sleep: it needs no GPU) and updates
a deterministic running value. The state (iteration, value, the list of runs) is checkpointed
every ``--checkpoint-every`` iterations and when the controller preempts the job (SIGTERM), after
which the script exits with the preemption code so that it is requeued; the next run resumes
from the checkpoint. At the end it writes ``result.json`` in its checkpoint folder: the runs
(first and last iteration of each) show whether any progress was lost or repeated, and
``--completions FILE`` appends one line per completion (a test of exactly-once completion).
With ``--nproc N`` every rank runs the loop; rank 0 alone writes progress, checkpoints and
``result.json`` (``tesserae.job`` is rank-aware).

Options for the runtime's crash tests: ``--wait-for FILE`` holds each run at its start until FILE
exists (still answering SIGTERM), so a test decides when jobs make progress instead of racing
them; ``--gpu-locks DIR`` holds an exclusive lock on ``DIR/gpu-N`` for each GPU of the run and
records any GPU found held by another run (a GPU given twice); ``--linger S`` keeps the process
alive S seconds after it completed, while the interpreter shuts down (where a stop signal used to
turn a completed job into a killed one); ``--heartbeat FILE`` appends the run id and the time at
every iteration (when each run was alive, to check that none outlived being declared lost).

**A test device** for learned throughputs on a machine without GPUs (``docs/learned-throughputs.md``):
``--type-speed x=3,y=1`` makes an iteration take ``--seconds-per-iteration`` divided by the speed of
the run's GPU type (``TESSERAE_GPU_TYPE``, which the server sets from ``--gpu-type x:1,y:1``; a type
not named runs at speed 1), so two jobs can differ in how much a GPU type speeds them up; with
``--device-dir DIR`` (one folder shared by all the jobs of a server) each run marks its GPUs there at
every iteration, and while another job has marked one of them within the last second, its iterations take
``--shared-slowdown`` times longer (default 3: a pair that runs slower than its two jobs alone).

From the repository's root, with the Python that has tesserae installed first on the server's PATH
(the job runs in its own folder, so the script's path is absolute)::

    tesserae submit --gpus 1 --iterations 200 -- python $PWD/examples/toy_trainer.py --iterations 200 \\
        --seconds-per-iteration 0.05
    tesserae submit --gpus 2 --nproc 2 --iterations 200 -- python $PWD/examples/toy_trainer.py \\
        --iterations 200 --seconds-per-iteration 0.05

Outside Tesserae it runs the same way (checkpoints in ./tesserae-checkpoints).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, required=True, help="Total iterations.")
    parser.add_argument("--seconds-per-iteration", type=float, default=0.1, help="Time of one iteration (s).")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="Also checkpoint every K iterations.")
    parser.add_argument("--completions", default=None, help="Append a line to this file on completion.")
    parser.add_argument("--fail-at", type=int, default=None, help="Exit with code 3 at this iteration (tests).")
    parser.add_argument("--ignore-sigterm", action="store_true", help="Do not stop on SIGTERM (tests).")
    parser.add_argument("--wait-for", default=None, help="Wait at the start of each run until this file exists.")
    parser.add_argument("--gpu-locks", default=None, help="Lock DIR/gpu-N for each GPU of the run (tests).")
    parser.add_argument("--linger", type=float, default=0.0, help="Stay alive this long after completing (tests).")
    parser.add_argument("--heartbeat", default=None, help="Append 'RUN TIME ITERATION' to this file at every "
                                                         "iteration (tests: which run was alive when).")
    parser.add_argument("--type-speed", default="", help="TYPE=SPEED,...: an iteration on a GPU of TYPE takes "
                                                         "--seconds-per-iteration / SPEED (test device).")
    parser.add_argument("--device-dir", default=None, help="Mark this run's GPUs in DIR; slow down while another "
                                                           "job marks one of them too (test device).")
    parser.add_argument("--shared-slowdown", type=float, default=3.0, help="With --device-dir: how many times "
                                                                           "longer an iteration takes when sharing.")
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.seconds_per_iteration < 0:
        parser.error("--iterations must be >= 1 and --seconds-per-iteration >= 0")
    if not args.shared_slowdown >= 1:
        parser.error("--shared-slowdown must be >= 1")
    try:
        device = Device(args.type_speed, args.device_dir, args.shared_slowdown)
    except ValueError as e:
        parser.error(str(e))

    from tesserae.job import Job

    job = Job(total_iterations=args.iterations, report_interval=0.2)
    who = f"toy[rank {job.rank}/{job.world_size}]" if job.world_size > 1 else "toy"
    # Two runs of one job must never overlap: rank 0 holds the run lock while its run lasts.
    if not job.lock_run():
        print(f"{who}: another run of this job holds the lock: two runs at once!", flush=True)
        with open(job.checkpoint_dir / "overlap.log", "a") as f:
            f.write(f"{os.getpid()} {time.time()}\n")
        return 4
    if args.gpu_locks:
        _HELD.extend(_lock_gpus(args.gpu_locks))  # released when the process ends, however it ends
    if args.wait_for:
        while not os.path.exists(args.wait_for):
            if job.preempted:
                print("toy: preempted while waiting to start", flush=True)
                job.exit_preempted()
            time.sleep(0.02)
    state = job.restore() or {"iteration": 0, "value": 0, "runs": []}
    start = int(state["iteration"])
    state["runs"].append({"start": start, "end": start, "pid": os.getpid(), "time": time.time()})
    print(f"{who}: start iteration={start} of {args.iterations} time={time.time():.6f} "
          f"gpus={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)
    job.report(start, force=True)
    # Iterations are paced on a schedule (each ends one iteration time after the previous one's end), so
    # the job runs at exactly 1 / seconds-per-iteration (times its device's speed), whatever the bookkeeping costs.
    deadline = time.monotonic()
    for it in range(start, args.iterations):
        if args.fail_at is not None and it == args.fail_at:
            print(f"{who}: failing on purpose at iteration {it}", flush=True)
            return 3
        deadline += args.seconds_per_iteration * device.slowdown()
        delay = deadline - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        state["value"] = (state["value"] * 31 + it + 1) % 1_000_003
        state["iteration"] = it + 1
        state["runs"][-1]["end"] = it + 1
        job.report(it + 1)
        if args.heartbeat and job.is_primary:
            with open(args.heartbeat, "a") as f:
                f.write(f"{os.environ.get('TESSERAE_RUN_ID', '-')} {time.time():.6f} {it + 1}\n")
        if job.preempted and not args.ignore_sigterm:
            job.save(state)
            print(f"{who}: preempted at iteration {it + 1}; checkpoint saved", flush=True)
            job.exit_preempted()
        if args.checkpoint_every and (it + 1) % args.checkpoint_every == 0:
            job.save(state)
    job.save(state)
    job.complete()
    if job.is_primary:
        with open(job.checkpoint_dir / "result.json", "w") as f:
            json.dump({"iterations": state["iteration"], "value": state["value"], "runs": state["runs"]}, f)
        if args.completions:
            with open(args.completions, "a") as f:
                f.write(f"{os.environ.get('TESSERAE_JOB_ID', '-')} {state['value']}\n")
    print(f"{who}: done, {state['iteration']} iterations in {len(state['runs'])} run(s), time={time.time():.6f}",
          flush=True)
    if args.linger > 0:
        _LINGER.append(_Linger(args.linger))
    return 0


class Device:
    """The test device: a speed per GPU type, and a slowdown while another job shares a GPU (module docstring)."""

    def __init__(self, type_speed: str, folder: str | None, shared_slowdown: float) -> None:
        speeds: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in type_speed.split(","))):
            name, _, value = part.partition("=")
            try:
                speed = float(value)
            except ValueError:
                speed = -1.0
            if not name or not speed > 0 or speed == float("inf"):
                raise ValueError(f"--type-speed: '{part}' is not TYPE=SPEED with SPEED > 0")
            speeds[name.lower()] = speed
        gpu_type = os.environ.get("TESSERAE_GPU_TYPE", "").lower()
        self.speed = speeds.get(gpu_type, 1.0)
        self.shared_slowdown = shared_slowdown
        self.me = f"{os.environ.get('TESSERAE_JOB_ID', os.getpid())}"
        self.marks = []
        if folder:
            for gpu in filter(None, os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")):
                os.makedirs(os.path.join(folder, f"gpu-{gpu}"), exist_ok=True)
                self.marks.append(os.path.join(folder, f"gpu-{gpu}"))

    def slowdown(self) -> float:
        """How many times longer than its base time the next iteration takes."""
        factor = 1.0 / self.speed
        if not self.marks:
            return factor
        now = time.time()
        shared = False
        for folder in self.marks:
            with open(os.path.join(folder, self.me), "w") as f:
                f.write(f"{now}\n")
            for other in os.listdir(folder):
                if other == self.me:
                    continue
                try:
                    age = now - os.stat(os.path.join(folder, other)).st_mtime
                except FileNotFoundError:
                    continue
                shared = shared or age < 1.0
        return factor * (self.shared_slowdown if shared else 1.0)


class _Linger:
    """Sleeps when collected, which is late in interpreter shutdown (after Python's signal handlers are gone)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __del__(self) -> None:
        time.sleep(self.seconds)


_LINGER: list[_Linger] = []
_HELD: list[object] = []


def _lock_gpus(folder: str) -> list[object]:
    """An exclusive lock per GPU of this run, held until the process ends; a GPU already locked by
    another run is recorded in ``DIR/double-booked.log``."""
    os.makedirs(folder, exist_ok=True)
    held = []
    for gpu in filter(None, os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")):
        f = open(os.path.join(folder, f"gpu-{gpu}"), "a")  # noqa: SIM115 - held for the whole run
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with open(os.path.join(folder, "double-booked.log"), "a") as log:
                log.write(f"gpu {gpu} job {os.environ.get('TESSERAE_JOB_ID', '-')} {time.time()}\n")
        held.append(f)
    return held


if __name__ == "__main__":
    sys.exit(main())
