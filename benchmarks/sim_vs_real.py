"""Sim vs real: one small workload run for real by the runtime and in the simulator; JCT errors.

The real run: a `tesserae server` (local executor, virtual GPUs) runs toy jobs
(`examples/toy_trainer.py`: known time per iteration, checkpoint on SIGTERM) submitted over HTTP
at their arrival times. The simulator then replays the same jobs (the submit times the server
recorded, the same GPU counts and iterations, rate = 1 / time per iteration) under the same
policy, placement, round length and event-driven setting. The simulation's three measured inputs,
each the mean over the real run:

- the stop latency (``--stop-latency``): from the decision that asked a run to stop (the
  ``preempting`` or ``migrating`` event) to the run's recorded end. The runtime's ``apply_plan``
  starts nothing until the decision's stops are done, and the stopped job holds its GPUs until
  then; the simulator models both;
- of it, the signal delay (``--stop-signal-delay``): how long a stopped run still made progress
  after the ask (its iterations, from the toy's log), the stop not having reached it yet;
- the restart overhead: from the moment a run could start (its decision, or when the runs that
  decision stopped had ended) to its first iteration (process start, checkpoint restore).

The simulation is also run with no overhead and no stop latency, to show what they are worth, and
with the previous calibration (no stop latency; the overhead measured from the decision, so that
the wait for the stops is charged to the starting job), to show what separating them is worth.
Writes the `sim_vs_real` section of BENCHMARKS.md.

With ``--executor slurm`` (root, Slurm installed) the real run is under a Slurm partition instead:
real daemons started for it (``slurm_cluster.SlurmCluster``: one node of ``--gpus`` GPUs) and
``tesserae server --executor slurm``; it writes the `sim_vs_real_slurm` section.

    .venv/bin/python benchmarks/sim_vs_real.py [--jobs 24] [--gpus 4] [--seed 1 | --seeds 1,2,3]
        [--configs tiresias-las:10,las] [--executor local|slurm] [--repeats R]

A real run is not repeatable (its average JCT moves by several percent between identical runs), so
``--repeats R`` runs each seed and configuration R times and judges the simulator, calibrated from
all R runs pooled, against their mean with its 95% interval (``_sim_vs_real_repeats.py``).

A runtime slow to stop (a Slurm job still being started cannot be signalled: see docs/slurm.md)
shows in the stop latency first.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from _report import ROOT, machine, today, update_section
from _sim_vs_real_repeats import aggregate, groups, report_lines
from _sim_vs_real_state import (
    completion_gaps,
    measured_overheads,
    real_from_state,
    stop_latencies,
    stop_signal_delays,
)
from tesserae.core.throughput import ThroughputModel

TOY = ROOT / "examples" / "toy_trainer.py"
PY = sys.executable


class ToyModel(ThroughputModel):
    """Throughput of toy jobs: 1 / (seconds per iteration), whatever the placement. Not a measurement
    of a GPU: the toy job's own, known, iteration time."""

    measured = False
    reference_gpu_type = "v100"

    def __init__(self, seconds_per_iteration: float) -> None:
        self.name = f"toy ({seconds_per_iteration:g} s/iteration)"
        self.r = 1.0 / seconds_per_iteration

    def rate(self, job_type: str, num_gpus: int, gpu_type: str, consolidated: bool = True,
             partner: tuple[str, int] | None = None, strategy: str | None = None,
             partner_strategy: str | None = None) -> float:
        return 0.0 if partner is not None else self.r

    def strategy_for(self, job_type: str, num_gpus: int, partner: tuple[str, int] | None = None) -> str | None:
        return None

    def reference_rate(self, job_type: str, num_gpus: int) -> float:
        return self.r

    def skew(self, job_type: str) -> float | None:
        return None

    def restart_cost(self, job_type: str) -> None:
        return None  # the simulation charges the fixed --restart-overhead measured for toy jobs

    def restart_seconds(self, job_type: str, num_gpus: int, storage_gbps: float = 10.0) -> float:
        raise ValueError("toy jobs have no restart cost model; simulate them with a fixed restart overhead")

    def job_types(self) -> list[str]:
        return ["toy"]

    def gpu_types(self) -> list[str]:
        return ["v100"]


def workload(n: int, seed: int, spi: float, mean_gap: float) -> list[dict[str, Any]]:
    """n toy jobs: Poisson arrivals, 1/2/4 GPUs, 3-12 s of isolated work each."""
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for i in range(n):
        gpus = rng.choice([1, 1, 1, 2, 2, 4])
        seconds = rng.uniform(3.0, 12.0)
        jobs.append({"index": i, "at": t, "gpus": gpus, "iterations": max(1, round(seconds / spi))})
        t += rng.expovariate(1.0 / mean_gap)
    return jobs


def start_server(state: Path, gpus: int, policy: str, placement: str, round_seconds: float,
                 event_driven: bool, queues: str | None, where: list[str] | None = None,
                 extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str, str]:
    where = where or ["--virtual-gpus", str(gpus)]
    cmd = [PY, "-m", "tesserae.cli", "server", "--state", str(state), *where, "--host",
           "127.0.0.1", "--port", "0", "--policy", policy, "--placement", placement, "--round-seconds",
           str(round_seconds), "--grace-seconds", "10", "--event-driven" if event_driven else "--rounds-only",
           "--insecure-same-user"]  # the toy jobs use this checkout's Python environment
    if queues:
        cmd += ["--tiresias-thresholds", queues]
    log = (state.parent / "server.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**env, **(extra_env or {})})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {(state.parent / 'server.log').read_text()}")
        try:
            info = json.loads((state / "server.json").read_text())
            if httpx.get(info["url"] + "/healthz", timeout=2).status_code == 200:
                return proc, info["url"], (state / "admin.token").read_text().strip()
        except (OSError, ValueError, KeyError, httpx.HTTPError):
            pass
        time.sleep(0.05)
    raise SystemExit("the server did not start")


def run_real(jobs: list[dict[str, Any]], args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    state = workdir / "state"
    cluster = None
    where, env = None, None
    if args.executor == "slurm":
        from support.slurm_cluster import SlurmCluster

        cluster = SlurmCluster(workdir / "slurm", gpus=args.gpus).start()
        where, env = ["--executor", "slurm", "--slurm-partition", "tess"], cluster.env()
    try:
        return _run_real(jobs, args, state, where, env)
    finally:
        if cluster is not None:
            cluster.stop()


def _run_real(jobs: list[dict[str, Any]], args: argparse.Namespace, state: Path, where: list[str] | None,
              env: dict[str, str] | None) -> dict[str, Any]:
    proc, url, token = start_server(state, args.gpus, args.policy, args.placement, args.round_seconds,
                                    args.event_driven, args.queues, where, env)
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    try:
        t0 = time.monotonic()
        for job in jobs:
            delay = t0 + job["at"] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            cmd = [PY, str(TOY), "--iterations", str(job["iterations"]), "--seconds-per-iteration", str(args.spi)]
            r = http.post("/v1/jobs", json={"command": cmd, "gpus": job["gpus"], "iterations": job["iterations"],
                                            "name": f"toy-{job['index']}"})
            r.raise_for_status()
            job["id"] = r.json()["id"]
            print(f"  submitted job {job['id']} ({job['gpus']} GPU, {job['iterations']} iterations)", flush=True)
        while True:
            views = http.get("/v1/jobs").json()["jobs"]
            states = [v["state"] for v in views]
            if all(s in ("completed", "failed", "cancelled") for s in states):
                break
            time.sleep(0.5)
        bad = [v["id"] for v in views if v["state"] != "completed"]
        if bad:
            raise SystemExit(f"jobs {bad} did not complete; see {state}")
    finally:
        http.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return {v["id"]: v for v in views}


def run_sim(jobs: list[dict[str, Any]], real: dict[int, Any], args: argparse.Namespace, overhead: float,
            stop_latency: float = 0.0, signal_delay: float = 0.0) -> tuple[dict[int, float], int]:
    from tesserae.config import RunSpec
    from tesserae.core.jobs import JobSpec
    from tesserae.runtime.executor.gpus import machine_cluster, virtual_gpus
    from tesserae.sim.runner import simulate

    model = ToyModel(args.spi)
    cluster, _ = machine_cluster(virtual_gpus(args.gpus))
    first = min(real[j["id"]]["submit_time"] for j in jobs)
    specs = [JobSpec(j["id"], real[j["id"]]["submit_time"] - first, j["gpus"], "toy", float(j["iterations"]),
                     j["iterations"] * args.spi) for j in jobs]
    queues = tuple(float(x) for x in args.queues.split(",")) if args.queues else None
    options = {} if queues is None else {"queues": queues}  # only tiresias-las takes queue thresholds
    run = RunSpec.flat(policy=args.policy, placement=args.placement, round_seconds=args.round_seconds,
                       restart_overhead=overhead, stop_latency=stop_latency,
                       stop_signal_delay=signal_delay, event_driven=args.event_driven,
                       **options)
    result, _ = simulate(specs, cluster, model, run)
    t = result.table
    return {int(t.job_id[r]): float(t.finish[r] - t.submit[r]) for r in range(t.n)}, int(t.preemptions.sum())


def one_config(jobs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Real run, then the simulator with the measured overhead and with none, for one policy."""
    jobs = [dict(j) for j in jobs]
    workdir = Path(tempfile.mkdtemp(prefix="tesserae-sim-vs-real-"))
    label = args.policy + (f"(queues {args.queues})" if args.queues else "") + f":{args.placement}"
    where = f"a Slurm partition of {args.gpus} GPUs" if args.executor == "slurm" else f"{args.gpus} virtual GPUs"
    print(f"real run of {label}: {len(jobs)} toy jobs on {where} (state in {workdir})", flush=True)
    wall0 = time.monotonic()
    real = run_real(jobs, args, workdir)
    wall = time.monotonic() - wall0
    try:
        out = simulate_against(jobs, real, args, workdir / "state", label, wall)
        out["date"], out["load"] = today(), os.getloadavg()[0]  # of the real run, for --resimulate's report
        return out
    finally:
        from tesserae.runtime.launch import procs

        procs.kill_pids(procs.pids_with_marker_prefix(str((workdir / "state").resolve())))
        if args.keep:
            print(f"state kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def simulate_against(jobs: list[dict[str, Any]], real: dict[int, Any], args: argparse.Namespace, state: Path,
                     label: str, wall: float) -> dict[str, Any]:
    """The simulations of a real run (its state folder), calibrated from it, and their errors."""
    overheads, from_decision = measured_overheads(state)
    stops = stop_latencies(state)
    gaps = completion_gaps(state)
    overhead = statistics.mean(overheads)
    stop_latency = statistics.mean(stops) if stops else 0.0
    signals = stop_signal_delays(state, args.spi)
    signal_delay = min(stop_latency, statistics.mean(signals)) if signals else 0.0
    sim, sim_preempt = run_sim(jobs, real, args, overhead, stop_latency, signal_delay)
    sim0, sim0_preempt = run_sim(jobs, real, args, 0.0)
    old_overhead = statistics.mean(from_decision)
    sim_old, _ = run_sim(jobs, real, args, old_overhead)
    rows = [{"id": j["id"], "gpus": j["gpus"], "iterations": j["iterations"], "real": real[j["id"]]["jct_seconds"],
             "sim": sim[j["id"]], "sim0": sim0[j["id"]], "sim_old": sim_old[j["id"]],
             "preemptions": real[j["id"]]["preemptions"], "submit": real[j["id"]]["submit_time"]}
            for j in jobs]
    out = {"label": label, "seed": args.seed, "policy": args.policy, "queues": args.queues, "state": str(state),
           "repeat": getattr(args, "repeat", 1), "stops": stops, "signals": signals, "rows": rows, "wall": wall,
           "overhead": overhead,
           "overheads": overheads, "stop_latency": stop_latency, "old_overhead": old_overhead,
           "signal_delay": signal_delay,
           "gaps": gaps,
           "real_avg": statistics.mean(r["real"] for r in rows),
           "sim_avg": statistics.mean(r["sim"] for r in rows),
           "sim0_avg": statistics.mean(r["sim0"] for r in rows),
           "sim_old_avg": statistics.mean(r["sim_old"] for r in rows),
           "per_job": [abs(r["sim"] - r["real"]) / r["real"] for r in rows],
           "per_job0": [abs(r["sim0"] - r["real"]) / r["real"] for r in rows],
           "real_preempt": sum(r["preemptions"] for r in rows), "sim_preempt": sim_preempt,
           "sim0_preempt": sim0_preempt,
           "makespan": max(v["finish_time"] for v in real.values()) - min(v["submit_time"] for v in real.values())}
    out["avg_err"] = abs(out["sim_avg"] - out["real_avg"]) / out["real_avg"]
    out["avg_err0"] = abs(out["sim0_avg"] - out["real_avg"]) / out["real_avg"]
    out["avg_err_old"] = abs(out["sim_old_avg"] - out["real_avg"]) / out["real_avg"]
    print(f"  average JCT: real {out['real_avg']:.2f} s, sim {out['sim_avg']:.2f} s (error {out['avg_err']:.1%}); "
          f"without overhead or stop latency {out['sim0_avg']:.2f} s (error {out['avg_err0']:.1%}); previous "
          f"calibration {out['sim_old_avg']:.2f} s (error {out['avg_err_old']:.1%}); per-job error mean "
          f"{statistics.mean(out['per_job']):.1%}, max {max(out['per_job']):.1%}; preemptions real "
          f"{out['real_preempt']}, sim {sim_preempt}; overhead {overhead:.2f} s (from the decision "
          f"{old_overhead:.2f} s); stop asked -> run ended {_mean_max(stops)}, of which still running "
          f"{signal_delay:.2f} s; a job's end -> next decision "
          f"{_mean_max(gaps)}", flush=True)
    return out


def _mean_max(values: list[float]) -> str:
    return f"{statistics.mean(values):.2f} / {max(values):.2f} s" if values else "none"


SLURM_RUN = ("Slurm executor: real slurmctld and slurmd daemons started for the run, one node whose GPUs are GRES "
             "backed by placeholder device files; each run a Slurm batch job whose launcher starts the toy job, which "
             "checkpoints on SIGTERM (scancel --signal) and resumes")


SLURM_STOPS = (
    "Before the lease file carried stops (issue 28), plain `las` missed here by 91% (seed 1, the previous round: "
    "real 129.0 s, sim 246.8 s, preemptions 64 / 151). Traced run by run (seed 1 again before the fix: real 95.1 s, "
    "sim 198.2 s, preemptions 52 / 124): LAS preempts a run a tenth of a second after starting it when a job "
    "arrives, while its Slurm job is still pending or configuring; Slurm refuses to signal such a job (\"Job can "
    "not be altered now\"), `scancel` sleeps 5 s and retries, and meanwhile the controller was blocked, the "
    "preempted job ran on (or until SIGKILL after the 10 s grace period) and no decision was taken. Stop asked -> "
    "run ended was 1.98 s on average and 10.19 s at most (0.29 / 1.24 s after the fix, same seed); the real run "
    "decided every ~5 s instead of at each event, and the stalls inflated the measured overhead (2.86 s, 1.43 s "
    "after the fix), which the simulator charges to every start.")


def report(results: list[dict[str, Any]], args: argparse.Namespace, summaries: list[dict[str, Any]]) -> str:
    slurm = args.executor == "slurm"
    loads = [r["load"] for r in results if r.get("load") is not None] or [math.nan]
    counts = sorted({s["repeats"] for s in summaries})
    repeats = counts[-1]
    times = f"{repeats} times" if len(counts) == 1 else f"{counts[0]}-{repeats} times (each row says how often)"
    results = [r for g in groups(results) for r in g]  # a configuration's runs together
    files = len(args.resimulate or [])
    lines = [
        "## Simulator vs real runtime under Slurm (`benchmarks/sim_vs_real.py --executor slurm`)" if slurm else
        "## Simulator vs real runtime (`benchmarks/sim_vs_real.py`)",
        "",
        f"Command: `.venv/bin/python benchmarks/sim_vs_real.py --jobs {args.jobs} --gpus {args.gpus} --seeds "
        f"{','.join(map(str, args.seed_list))} --configs {args.configs} --round-seconds {args.round_seconds:g}"
        f"{' --executor slurm' if slurm else ''}"
        f"{f' --repeats {repeats}' if len(counts) == 1 and repeats > 1 else ''}`. "
        f"Machine: {machine()}; load average "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end. Date: {today()}.",
        "",
        *([f"The real runs are those of {'an earlier' if files == 1 else files} `--keep --json` run"
           f"{'s' if files > 1 else ''} of this command without `--repeats` (ended {min(r['date'] for r in results)}"
           f" to {max(r['date'] for r in results)}, load average {min(loads):.1f}-{max(loads):.1f}), "
           f"{'each run of a (seed, configuration) one repeat, ' if files > 1 else ''}simulated again from their "
           f"kept state folders with `--resimulate` on {today()}.", ""] if args.resimulate is not None else []),
        f"Workload (seeds {', '.join(map(str, args.seed_list))}): {args.jobs} toy jobs (`examples/toy_trainer.py`, "
        f"{args.spi:g} s per "
        f"iteration, 3-12 s of work each, 1, 2 or 4 GPUs, Poisson arrivals every {args.mean_gap:g} s on average) on "
        f"{args.gpus} {'GPUs of a Slurm partition' if slurm else 'virtual GPUs'}, rounds of {args.round_seconds:g} s"
        f"{', event-driven' if args.event_driven else ''}, submitted over HTTP at their arrival times to a real "
        "`tesserae server` (" + (SLURM_RUN if slurm else "local executor: each run a process that checkpoints on "
                                 "SIGTERM and resumes") + "). The "
        "simulator replays the submit times the server recorded with the same policy, placement and rounds; its "
        "measured inputs are means over the real run: the **stop latency** (`--stop-latency`), from the "
        "decision that asked a run to stop to the run's end, during which the stopped job holds its GPUs and the "
        "decision's starts wait (the runtime's `apply_plan` starts nothing before the stops are done); of it, the "
        "**signal delay** (`--stop-signal-delay`), how long the stopped job still made progress (the toy's "
        "iterations: the stop had not reached it yet; no progress for the rest); and the **restart overhead**, "
        "from the moment a run could start (its decision, or the end of the "
        "runs that decision stopped) to its first iteration (process start, checkpoint restore). Two more "
        "simulations show what these are worth: the previous calibration (no stop latency, the overhead measured "
        "from the decision, so that the wait for the stops is charged to the starting job) and none (no overhead, "
        "no stop latency). The last column is not an input: from a job's last iteration to the next decision "
        "(when it started a run and another job was waiting), the GPUs stay idle in the real run, while the "
        "event-driven simulator decides at the completion itself.",
        "",
        *([f"**Repeats.** Each (seed, configuration) ran {times} for real. A real run is not repeatable "
           "(process starts, Slurm's scheduling passes, the machine's load), so the simulator is judged against the "
           "mean of the real runs' average JCTs, shown with its 95% interval (Student's t, R - 1 degrees of "
           "freedom) and the run-to-run spread (range and coefficient of variation, relative to the mean). The "
           "simulation is calibrated from all the runs of a (seed, configuration) **pooled**: the overhead, the "
           "stop latency and the signal delay are each the mean over every start or stop of all its runs. They "
           "are the runtime's, not one run's, and a calibration per run would fit that run's own noise, which a "
           "simulator used to predict does not have. Each run's own submit times are replayed with it, and the "
           "simulator's average is the mean of those simulations. So that nothing is hidden, the table also "
           "gives each run's error against that simulation, and each run's error against the simulation "
           "calibrated from it alone (the per-run table below), and the error of the mean of those per-run "
           "simulations.", "", *report_lines(summaries), "", "Each run:", ""] if repeats > 1 else []),
        "| seed | run | configuration | real avg JCT (s) | sim avg JCT (s) | **avg JCT error** | per-job error: mean / "
        "median / max | preemptions real / sim | restart overhead (s) | stop latency: mean / max (of which still "
        "running) | previous "
        "calibration: overhead, avg JCT error | no overhead, no stop latency: avg JCT error | a job's end -> next "
        "decision: mean / max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r['seed']} | {r.get('repeat', 1)} | `{r['label']}` | {r['real_avg']:.2f} | "
            f"{r['sim_avg']:.2f} | **{r['avg_err']:.1%}** | "
            f"{statistics.mean(r['per_job']):.1%} / {statistics.median(r['per_job']):.1%} / {max(r['per_job']):.1%} | "
            f"{r['real_preempt']} / {r['sim_preempt']} | {r['overhead']:.2f} (over {len(r['overheads'])} runs) | "
            f"{_mean_max(r['stops'])} ({r.get('signal_delay', 0.0):.2f} s; over {len(r['stops'])} stops) | "
            f"{r['old_overhead']:.2f} s, "
            f"{r['avg_err_old']:.1%} | {r['avg_err0']:.1%} | {_mean_max(r.get('gaps', []))} |")
    met = all(r["avg_err"] <= 0.05 for r in results)
    lines += [
        "",
        f"Target: average JCT within 5%: {'met by every run' if met else 'NOT met by every run'} (each simulated "
        "with its own calibration)" + (", see the repeats above for the mean." if repeats > 1 else "."),
        "Per-job errors come from jobs whose turn depends on near-ties (two jobs with almost the same attained "
        "service, a completion a few milliseconds before or after a round): such a job takes a different path in "
        "the two runs while the average holds. Plain `las`, which preempts at every arrival and every round, is "
        "the more sensitive; Tiresias' discretized queues (FIFO inside a queue) much less.",
    ]
    if slurm:
        lines += ["", SLURM_STOPS]
    for r in results:
        lines += ["", f"<details><summary>Per job, seed {r['seed']}, <code>{r['label']}</code>, run "
                  f"{r.get('repeat', 1)} (real run: "
                  f"{r['wall']:.0f} s of wall time, makespan {r['makespan']:.1f} s)</summary>", "",
                  "| job | GPUs | iterations | real JCT (s) | sim JCT (s) | error | real preemptions | previous "
                  "calibration: sim JCT (s) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in r["rows"]:
            lines.append(f"| {row['id']} | {row['gpus']} | {row['iterations']} | {row['real']:.2f} | "
                         f"{row['sim']:.2f} | {(row['sim'] - row['real']) / row['real']:+.1%} | {row['preemptions']} | "
                         f"{row['sim_old']:.2f} |")
        lines += ["", "</details>"]
    return "\n".join(lines)


def pooled_simulation(run: dict[str, Any], args: argparse.Namespace) -> Any:
    """``run_sim`` for the configuration of this run, as ``aggregate`` calls it."""
    one = argparse.Namespace(**{**vars(args), "seed": run["seed"]}, policy=run["policy"], queues=run["queues"])
    return lambda jobs, real, overhead, stop, signal_delay: run_sim(jobs, real, one, overhead, stop, signal_delay)


def resimulate(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The results of ``--resimulate FILE``: each kept real run simulated again."""
    results = []
    olds = [old for path in args.resimulate for old in json.loads(path.read_text())]
    for old in olds:
        state = Path(old["state"])
        repeat = sum(o["seed"] == old["seed"] and o["label"] == old["label"] for o in olds[:len(results)]) + 1
        one = argparse.Namespace(**{**vars(args), "seed": old["seed"], "repeat": repeat}, policy=old["policy"],
                                 queues=old["queues"])
        real = real_from_state(state)
        by_name = {v["name"]: i for i, v in real.items()}
        jobs = [{**j, "id": by_name[f"toy-{j['index']}"]} for j in workload(args.jobs, old["seed"], args.spi,
                                                                             args.mean_gap)]
        print(f"simulating again {old['label']}, seed {old['seed']} (state in {state})", flush=True)
        out = simulate_against(jobs, real, one, state, old["label"], old["wall"])
        out["date"], out["load"] = old.get("date", "?"), old.get("load")
        results.append(out)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", default=None, help="Comma-separated seeds, one workload each (instead of --seed).")
    ap.add_argument("--spi", type=float, default=0.05, help="Seconds per iteration of the toy jobs.")
    ap.add_argument("--mean-gap", type=float, default=1.5, help="Mean time between arrivals (s).")
    ap.add_argument("--configs", default="tiresias-las:10,las",
                    help="Comma-separated POLICY[:QUEUE_THRESHOLDS], thresholds separated by '/'.")
    ap.add_argument("--placement", default="consolidated")
    ap.add_argument("--round-seconds", type=float, default=5.0)
    ap.add_argument("--event-driven", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--keep", action="store_true", help="Keep the state folders.")
    ap.add_argument("--no-write", action="store_true", help="Do not update BENCHMARKS.md.")
    ap.add_argument("--json", type=Path, default=None, help="Also write every result (per job too) to this file.")
    ap.add_argument("--repeats", type=int, default=1, help="Real runs of each (seed, configuration); with more than "
                    "one, the simulator (calibrated from all of them pooled) is judged against their mean.")
    ap.add_argument("--resimulate", type=Path, nargs="+", default=None, help="No real run: simulate again the real "
                    "runs whose results --keep --json wrote to these files (their state folders kept), with this "
                    "simulator; runs of the same seed and configuration are repeats; the other options must be "
                    "those of those runs.")
    ap.add_argument("--executor", choices=("local", "slurm"), default="local",
                    help="Where the real run happens: virtual GPUs here, or real Slurm daemons started for it.")
    args = ap.parse_args()

    try:
        args.seed_list = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    except ValueError:
        ap.error(f"--seeds takes comma-separated integers, not {args.seeds!r}")
    if args.repeats < 1:
        ap.error(f"--repeats takes a count of at least 1, not {args.repeats}")
    results = [] if args.resimulate is None else resimulate(args)
    for seed in args.seed_list if args.resimulate is None else []:
        jobs = workload(args.jobs, seed, args.spi, args.mean_gap)
        for config in args.configs.split(","):
            policy, _, queues = config.partition(":")
            for repeat in range(1, args.repeats + 1):
                one = argparse.Namespace(**{**vars(args), "seed": seed, "repeat": repeat}, policy=policy,
                                         queues=queues.replace("/", ",") or None)
                results.append(one_config(jobs, one))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    summaries = [aggregate(g, pooled_simulation(g[0], args)) for g in groups(results)]
    for s in summaries:
        print(f"seed {s['seed']} {s['label']}: real mean {s['real_mean']:.2f} s [{s['real_lo']:.2f}, "
              f"{s['real_hi']:.2f}] over {s['repeats']} runs ({', '.join(f'{x:.2f}' for x in s['reals'])}), "
              "sim (pooled calibration) "
              f"{s['sim_mean']:.2f} s: error {s['err']:.1%}", flush=True)
    if not args.no_write:
        section = "sim_vs_real_slurm" if args.executor == "slurm" else "sim_vs_real"
        update_section(section, report(results, args, summaries))
        print(f"wrote the {section} section of BENCHMARKS.md")


if __name__ == "__main__":
    main()
