"""Speed against the peers' own simulators: Tiresias' and Gavel's, side by side on the same inputs.

    .venv/bin/python benchmarks/peer_speed.py \\
        --tiresias PEERS/tiresias/simulator --tiresias-commit SHA \\
        --gavel PEERS/gavel/scheduler --gavel-python PEERS/gavel-venv/bin/python --gavel-commit SHA \\
        [--case NAME ...] [--gavel-size GPUS ...] [--repeats N] [--cpu-limit S] [--work DIR] [--write]

Each case runs the peer's simulator and ``tesserae simulate`` on the same input files, one after
the other in the same run (``--repeats`` alternates them), each as a plain process: its wall time
and its CPU time (user + system, from the process's own resource usage) are measured around the
whole process, start-up and imports included. The table gives ours / peer for both; a ratio at
or below 1 means ours is as fast or faster. Both processes get the same environment with one
BLAS/OpenMP thread (the machine is shared) and bytecode caches written beforehand for both sides'
sources; the peer's output goes to a file, as ours does. A run is stopped after ``--cpu-limit``
seconds of CPU (RLIMIT_CPU) and reported as not finished: its ratio is then an upper bound. The
average JCT of both runs is shown beside the times: the two simulators computed the same schedule
(fidelity is measured by ``tiresias_fidelity.py`` and ``gavel_fidelity.py``), and so is the time
our run spent simulating (its summary's ``wall_seconds``: the rest is start-up and writing files).

Peers, prepared by hand outside this repository (this script never fetches, patches or builds
them; ``--tiresias`` and ``--gavel`` are their folders):

- Tiresias (SymbioticLab/Tiresias ``simulator/``): the Python 3 copy that
  ``docs/reproduction/tiresias.md`` describes, run by ``--tiresias-python`` (default: python3)
  as ``run_sim.py --scheme=count``; ``fifo`` is ours ``fifo --no-backfill``, ``dlas-gpu`` is
  ``tiresias-las`` and ``dlas-gpu-gittins`` is ``tiresias-gittins`` (Tiresias' queues 3250,7200
  GPU-s), all event-driven, on one node, first-fit placement, no restart cost.
- Gavel (stanford-futuredata/gavel ``scheduler/``, ``make rpc_stubs`` done, the one-line NumPy 2
  change of ``docs/reproduction/gavel.md``) in the virtual environment of ``--gavel-python``:
  ``scripts/drivers/simulate_scheduler_with_trace.py``; its traces are written by its own
  ``scripts/utils/generate_trace.py`` into ``--work``. ``max_min_fairness_perf`` is ours
  ``gavel-maxmin``, ``max_min_fairness_packed`` is ``gavel-maxmin --packing`` and ``fifo_perf``
  is ``gavel-fifo``, on one-GPU servers with 360 s rounds and no restart cost. ``--gavel-size N``
  (a multiple of 12) scales the fidelity study's traces to N GPUs at the same offered load (jobs
  x N/12, inter-arrival x 12/N) on N/3 GPUs of each type: its cases are ``gavel:multi_gN:...`` and
  ``gavel:single_gN:...``. The largest sizes were run one case at a time, e.g.
  ``--gavel-size 3072 --case gavel:multi_g3072:max_min_fairness_perf --cpu-limit 1500``.

Inputs for Tiresias: its own ``60_job.csv`` and windows of the Philly-derived trace (job types
drawn with seed 0, whole seconds, Tiresias' job CSV), each on one node. ``--write`` puts the table
in the ``peer_speed`` section of BENCHMARKS.md.

Each row keeps when and on which machine it was measured, the peer's commit and Python and its
runs; ``--json FILE`` collects rows over several runs (cases already in it are not run again), and
``--report --json FILE`` writes the table from them alone. The rows of BENCHMARKS.md's table are in
``benchmarks/results/peer_speed.json`` (paths written as WORK).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

import tesserae as tesserae_package
from _report import SHARED_DATA, machine, today, update_section
from gavel_fidelity import POLICIES as GAVEL_POLICIES
from gavel_fidelity import our_command as gavel_our_command
from gavel_fidelity import read_gavel_log
from peer_speed_text import LIBRARIES, gavel_scale_text, slower_text
from process_timing import Timing, compile_sources, timed
from tesserae.profiles.default_model import DefaultModel
from tesserae.traces import read_trace
from tiresias_fidelity import (
    NO_ROUNDS,
    PHILLY,
    PRIOR,
    QUEUES,
    philly_window,
    read_jobs,
    write_one_node_cluster,
    write_tiresias_trace,
)


# ----------------------------------------------------------------------------------- cases
@dataclasses.dataclass(frozen=True)
class TiresiasTrace:
    name: str
    days: tuple[float, float] | None  # a window of the Philly trace, days from its first submission
    gpus: int

    def path(self, work: Path) -> Path:
        return SHARED_DATA / "tiresias" / "60_job.csv" if self.days is None and self.name == "60_job" \
            else work / "tiresias" / f"{self.name}.csv"


TIRESIAS_TRACES = {t.name: t for t in [
    TiresiasTrace("60_job", None, 8),
    TiresiasTrace("philly_d75-80", (75.0, 80.0), 128),
    TiresiasTrace("philly_d20-25", (20.0, 25.0), 256),
    TiresiasTrace("philly_all", (0.0, 1e9), 512),
]}

#: Tiresias' --schedule -> ours.
TIRESIAS_POLICIES = {
    "fifo": ["--policy", "fifo", "--no-backfill"],
    "dlas-gpu": ["--policy", "tiresias-las", "--tiresias-thresholds", QUEUES, "--promote-knob", "0"],
    "dlas-gpu-gittins": ["--policy", "tiresias-gittins", "--tiresias-thresholds", QUEUES, "--promote-knob", "0",
                         "--gittins-prior", str(PRIOR)],
}


@dataclasses.dataclass(frozen=True)
class GavelTrace:
    """A trace written by Gavel's generate_trace.py: ``jobs`` jobs, mean inter-arrival ``lam`` s."""

    name: str
    jobs: int
    lam: float
    seed: int
    multi_gpu: bool

    def path(self, work: Path) -> Path:
        return work / "gavel" / f"{self.name}.trace"

    def generate_args(self, out: Path) -> list[str]:
        return ["scripts/utils/generate_trace.py", "--num_jobs", str(self.jobs), "-l", f"{self.lam:g}",
                "--seed", str(self.seed), *(["-m"] if self.multi_gpu else []),
                "--throughputs_file", "simulation_throughputs.json", "--output_file", str(out)]


def _gavel_trace(kind: str, gpus: int) -> GavelTrace:
    """The fidelity study's traces (at 12 GPUs: multi 200 jobs, -l 2400; single 150 jobs, -l 500),
    scaled to ``gpus`` at the same offered load: jobs x gpus/12, inter-arrival x 12/gpus."""
    jobs, lam, seed, multi = {"multi": (200, 2400.0, 1, True), "single": (150, 500.0, 4, False)}[kind]
    f = gpus / 12
    return GavelTrace(f"{kind}_g{gpus}", round(jobs * f), lam / f, seed, multi)


@dataclasses.dataclass(frozen=True)
class Case:
    peer: str  # "tiresias" or "gavel"
    trace: str
    policy: str  # the peer's name
    gpus: int

    @property
    def name(self) -> str:
        return f"{self.peer}:{self.trace}:{self.policy}"


def _gavel_vpk(gpus: int) -> str:
    """V100:P100:K80 counts, a third of the GPUs each."""
    third = gpus // 3
    return f"{third}:{third}:{third}"


def all_cases(gavel_sizes: list[int]) -> list[Case]:
    cases = [Case("tiresias", t, p, TIRESIAS_TRACES[t].gpus)
             for t in ("60_job", "philly_d75-80", "philly_d20-25", "philly_all")
             for p in ("fifo", "dlas-gpu", "dlas-gpu-gittins")]
    for g in gavel_sizes:
        cases += [Case("gavel", f"multi_g{g}", "max_min_fairness_perf", g),
                  Case("gavel", f"multi_g{g}", "fifo_perf", g),
                  Case("gavel", f"single_g{g}", "max_min_fairness_packed", g)]
    return cases


# ----------------------------------------------------------------------------------- inputs
def write_tiresias_inputs(work: Path, traces: set[str]) -> None:
    (work / "tiresias").mkdir(parents=True, exist_ok=True)
    philly = None
    for name in sorted(traces):
        t = TIRESIAS_TRACES[name]
        write_one_node_cluster(work / "tiresias" / f"n1g{t.gpus}.csv", t.gpus)
        if t.days is None or t.path(work).is_file():
            continue
        if philly is None:
            philly = read_trace(PHILLY, "philly", DefaultModel(), seed=0)
        write_tiresias_trace(t.path(work), philly_window(t.days, t.gpus, philly))


def write_gavel_inputs(work: Path, traces: set[str], gavel: Path, python: str) -> None:
    (work / "gavel").mkdir(parents=True, exist_ok=True)
    for name in sorted(traces):
        kind, g = name.split("_g")
        t = _gavel_trace(kind, int(g))
        if not t.path(work).is_file():
            subprocess.run([python, *t.generate_args(t.path(work).resolve())], cwd=gavel, check=True,
                           stdout=subprocess.DEVNULL)


# ----------------------------------------------------------------------------------- commands
def tiresias_peer_command(case: Case, work: Path, python: str, out: Path) -> list[str]:
    t = TIRESIAS_TRACES[case.trace]
    return [python, "run_sim.py", f"--cluster_spec={(work / 'tiresias' / f'n1g{t.gpus}.csv').resolve()}",
            "--scheme=count", f"--trace_file={t.path(work).resolve()}", f"--schedule={case.policy}",
            f"--log_path={out.resolve()}"]


def tiresias_our_command(case: Case, work: Path, out: Path) -> list[str]:
    t = TIRESIAS_TRACES[case.trace]
    return ["tesserae", "simulate", "--trace", str(t.path(work)), "--format", "tiresias",
            "--cluster", str(work / "tiresias" / f"n1g{t.gpus}.csv"), *TIRESIAS_POLICIES[case.policy],
            "--placement", "first-fit", "--event-driven", "--restart-overhead", "0",
            "--round-seconds", str(NO_ROUNDS), "--out", str(out), "-q"]


def gavel_peer_command(case: Case, work: Path, python: str) -> list[str]:
    kind, g = case.trace.split("_g")
    t = _gavel_trace(kind, int(g))
    return [python, "scripts/drivers/simulate_scheduler_with_trace.py", "-t", str(t.path(work).resolve()),
            "-p", case.policy, "-c", _gavel_vpk(case.gpus), "--throughputs_file", "simulation_throughputs.json",
            "--seed", "0", "--time_per_iteration", "360"]


def avg_jct_tiresias(peer_out: Path, ours_out: Path) -> tuple[float, float, int]:
    peer = read_jobs(peer_out / "job.csv", "JCT", "end_time")
    ours = read_jobs(ours_out / "jobs.csv", "jct", "finish_time")
    if sorted(peer) != sorted(ours):
        sys.exit(f"{peer_out}: the two runs finished different jobs ({len(peer)} against {len(ours)})")
    n = len(peer)
    return sum(v[0] for v in peer.values()) / n, sum(v[0] for v in ours.values()) / n, n


def avg_jct_gavel(peer_log: Path, ours_out: Path) -> tuple[float, float, int]:
    """Both sides' average JCT over the jobs Gavel finished (it gives up on a job whose micro-tasks fail)."""
    jct, _, _ = read_gavel_log(peer_log)
    with (ours_out / "jobs.csv").open() as f:
        ours = {int(r["name"]): float(r["jct"]) for r in csv.DictReader(f) if r["jct"]}
    missing = set(jct) - set(ours)
    if missing:
        sys.exit(f"{ours_out}: ours did not finish {len(missing)} job(s) Gavel finished")
    return sum(jct.values()) / len(jct), sum(ours[i] for i in jct) / len(jct), len(jct)


def ours_simulating(ours_out: Path) -> float:
    """Seconds our run spent simulating (the summary's ``wall_seconds``: no start-up, no output)."""
    return float(json.loads((ours_out / "summary.json").read_text())["wall_seconds"])


def ours_lp(ours_out: Path) -> tuple[float, int] | None:
    """Seconds our run spent in the policy's LP and how many it solved (Gavel's max-min), if any."""
    summary = json.loads((ours_out / "summary.json").read_text())
    return (float(summary["lp_seconds_total"]), int(summary["lp_solves"])) if summary.get("lp_solves") else None


def run_case(case: Case, args: argparse.Namespace) -> dict:
    work: Path = args.work
    runs = work / "runs" / case.name.replace(":", "_")
    runs.mkdir(parents=True, exist_ok=True)
    tesserae = str(Path(sys.executable).parent / "tesserae")
    if case.peer == "tiresias":
        peer_cmd = tiresias_peer_command(case, work, args.tiresias_python, runs / "peer")
        ours_cmd = tiresias_our_command(case, work, runs / "ours")
        peer_cwd = args.tiresias
    else:
        kind, g = case.trace.split("_g")
        peer_cmd = gavel_peer_command(case, work, args.gavel_python)
        ours_cmd = gavel_our_command(_gavel_trace(kind, int(g)).path(work), case.policy, _gavel_vpk(case.gpus),
                                     runs / "ours")
        peer_cwd = args.gavel
    peer_t: list[Timing] = []
    ours_t: list[Timing] = []
    load = [os.getloadavg()[0]]
    for i in range(args.repeats):
        pair = [("peer", peer_cmd, peer_cwd, peer_t), ("ours", [tesserae, *ours_cmd[1:]], None, ours_t)]
        for side, cmd, cwd, into in pair if i % 2 == 0 else pair[::-1]:
            into.append(timed(cmd, cwd, runs / f"{side}.log", args.cpu_limit))
        load.append(os.getloadavg()[0])
    row = {"case": case.name, "peer": case.peer, "trace": case.trace, "policy": case.policy, "gpus": case.gpus,
           "peer_command": _anonymous(shlex.join(peer_cmd), args),
           "ours_command": _anonymous(shlex.join(ours_cmd), args), "load": load,
           "peer_finished": all(t.finished for t in peer_t), "ours_finished": all(t.finished for t in ours_t),
           "peer_wall": statistics.median(t.wall for t in peer_t), "peer_cpu": statistics.median(t.cpu for t in peer_t),
           "ours_wall": statistics.median(t.wall for t in ours_t), "ours_cpu": statistics.median(t.cpu for t in ours_t),
           "repeats": args.repeats, "cpu_limit": args.cpu_limit, "measured": today(), "machine": machine(),
           "peer_commit": getattr(args, f"{case.peer}_commit"),
           "peer_python": _version(getattr(args, f"{case.peer}_python")),
           "ours_simulating": ours_simulating(runs / "ours") if all(t.finished for t in ours_t) else None,
           "ours_lp": ours_lp(runs / "ours") if all(t.finished for t in ours_t) else None}
    if row["peer_finished"] and row["ours_finished"]:
        if case.peer == "tiresias":
            row["peer_jct"], row["ours_jct"], row["jobs"] = avg_jct_tiresias(runs / "peer", runs / "ours")
        else:
            row["peer_jct"], row["ours_jct"], row["jobs"] = avg_jct_gavel(runs / "peer.log", runs / "ours")
    return row


# ----------------------------------------------------------------------------------- report
def _ratio(row: dict, key: str) -> str:
    """ours / peer; a stopped run makes it a bound (ours stopped: a lower one; both: unknown)."""
    r = row[f"ours_{key}"] / row[f"peer_{key}"]
    ours_done = row.get("ours_finished", True)
    if not ours_done and not row["peer_finished"]:
        return "? (both stopped)"
    text = f"{r:.2f}" if row["peer_finished"] and ours_done else f"< {r:.3f}" if ours_done else f"**> {r:.2f}**"
    return f"**{text}**" if ours_done and r > 1 else text


def table(rows: list[dict]) -> str:
    lines = ["| peer | trace | GPUs | jobs | peer policy | ours | peer wall (s) | ours wall (s) | wall ours / peer "
             "| peer CPU (s) | ours CPU (s) | CPU ours / peer | ours simulating (s) | avg JCT peer / ours (s) | load "
             "| measured (runs each) |",
             "|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    machines = {r.get("machine", "?") for r in rows}
    for r in rows:
        where = f", {_cpu_name(r.get('machine', '?'))}" if len(machines) > 1 else ""
        ours = " ".join(TIRESIAS_POLICIES[r["policy"]][1:2] + (["--no-backfill"] if r["policy"] == "fifo" else [])
                        if r["peer"] == "tiresias" else GAVEL_POLICIES[r["policy"]][1:])
        unfinished = "" if r["peer_finished"] else " (stopped)"
        ours_unfinished = "" if r.get("ours_finished", True) else " (stopped)"
        jct = f"{r['peer_jct']:.0f} / {r['ours_jct']:.0f}" if "peer_jct" in r else "-"
        lines.append(
            f"| {r['peer']} | {r['trace']} | {r['gpus']} | {r.get('jobs', '-')} | `{r['policy']}` | `{ours}` "
            f"| {r['peer_wall']:.2f}{unfinished} | {r['ours_wall']:.2f}{ours_unfinished} | {_ratio(r, 'wall')} "
            f"| {r['peer_cpu']:.2f} | {r['ours_cpu']:.2f} | {_ratio(r, 'cpu')} "
            f"| {'-' if r['ours_simulating'] is None else format(r['ours_simulating'], '.2f')} | {jct} "
            f"| {min(r['load']):.1f}-{max(r['load']):.1f} | {r.get('measured', '?')} ({r['repeats']}){where} |")
    return "\n".join(lines)


def _cpu_name(machine_text: str) -> str:
    """The processor of a row's machine ("2 cores (AMD EPYC), 24 GiB RAM, ..." -> "AMD EPYC")."""
    return machine_text.partition("cores (")[2].partition("), ")[0] or machine_text


def import_cpu(work: Path) -> float:
    """CPU seconds of a process that only imports the third-party libraries our CLI loads (median of 3)."""
    return statistics.median(timed([sys.executable, "-c", LIBRARIES], None, work / "imports.log", 60).cpu
                             for _ in range(3))


def section(rows: list[dict], args: argparse.Namespace, imports: float | None = None) -> str:
    examples = {}
    for r in rows:
        if r.get("peer_command"):  # rows kept from an earlier table may lack them
            examples.setdefault(r["peer"], r)
    cmds = "\n".join(
        f"- {peer}: `{_anonymous(r['peer_command'], args)}` (from its folder); ours: "
        f"`{_anonymous(r['ours_command'], args)}`" for peer, r in examples.items())
    machines = sorted({r.get("machine", "?") for r in rows}) or [machine()]
    peers = []
    for peer, what in (("tiresias", "Tiresias {} (`simulator/run_sim.py`, Python 3 copy, {})"),
                       ("gavel", "Gavel {} (`scheduler/scripts/drivers/simulate_scheduler_with_trace.py`, {}, ECOS)")):
        versions = sorted({(r["peer_commit"], r["peer_python"]) for r in rows if r["peer"] == peer})
        peers += [what.format(f"`{commit}`", python) for commit, python in versions]
    return f"""## Speed against the peers' own simulators

Generated by `benchmarks/peer_speed.py --write` ({today()}; measured on {'; '.join(machines)}).
Peers: {'; '.join(peers)}.
Each row: the peer's simulator and `tesserae simulate` on the same input files, one after the other
in the same run (the runs of each side in the last column, alternating; medians), every process
timed whole (start-up and imports included), one BLAS/OpenMP thread for both, bytecode caches of
both sides' sources written first. The rows were measured at the times in the last column, each on
one of the machines named above (its processor in the last column when there are several; a row's
two sides on the same one), each under the load shown (other sessions' work: wall times under load are rough, the CPU
ratio is the steadier one); `--json FILE` keeps them, and `--report --json FILE` writes the table
from that file alone. CPU = user + system seconds of the process; a run is stopped
after {max(r['cpu_limit'] for r in rows) if rows else 0:.0f} s of CPU or less (then its ratio is a
bound: `<` when the peer was stopped, `>` when ours was). A ratio above 1 (bold) means ours is
slower. "ours simulating" is the simulation alone (our summary's `wall_seconds`), the rest of our
run being start-up and output. "load" is the 1-minute load
average before and after the case's runs. The average JCTs show both computed the same schedule.

Commands, e.g.:
{cmds}

{table(rows)}

{slower_text(rows, imports, _cpu_name(machine()))}{gavel_scale_text(rows)}{missing_text(rows, args)}
"""


def missing_text(rows: list[dict], args: argparse.Namespace) -> str:
    """The cases of the plan that the table lacks (every ratio the issue asks for is then visible)."""
    done = {r["case"] for r in rows}
    missing = [c.name for c in all_cases(args.gavel_size or [24, 48]) if c.name not in done]
    return ("\n\nCases of the plan not in this table (not measured in the runs that wrote it): "
            + ", ".join(f"`{m}`" for m in missing) + ".") if missing else ""


def _version(python: str) -> str:
    r = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], capture_output=True,
                       text=True)
    return f"Python {r.stdout.strip()}"


def _anonymous(cmd: str, args: argparse.Namespace) -> str:
    """A command line without this machine's paths."""
    for path, name in ((args.work.resolve(), "WORK"), (SHARED_DATA.resolve(), "../shared/data"),
                       (args.work, "WORK"), (SHARED_DATA, "../shared/data")):
        cmd = cmd.replace(str(path), name)
    for python, name in ((args.gavel_python, "python"), (args.tiresias_python, "python3"),
                         (str(Path(sys.executable).parent / "tesserae"), "tesserae")):
        if python:
            cmd = cmd.replace(python, name)
    return cmd


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiresias", type=Path, help="Tiresias' simulator/ folder (a Python 3 copy)")
    ap.add_argument("--tiresias-python", default="python3")
    ap.add_argument("--tiresias-commit", default="unknown")
    ap.add_argument("--gavel", type=Path, help="Gavel's scheduler/ folder")
    ap.add_argument("--gavel-python", default="python3", help="the Python of Gavel's virtual environment")
    ap.add_argument("--gavel-commit", default="unknown")
    ap.add_argument("--gavel-size", type=int, action="append",
                    help="GPUs of a Gavel case, a multiple of 12 (default 24 and 48; any size: its traces are "
                         "the fidelity study's scaled to it)")
    ap.add_argument("--case", action="append", help="run only these cases (PEER:TRACE:POLICY; default: all whose "
                                                    "peer is given)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--cpu-limit", type=float, default=3600.0,
                    help="CPU seconds after which a run is stopped (and reported as not finished)")
    ap.add_argument("--work", type=Path, default=Path("out/peer_speed"))
    ap.add_argument("--json", type=Path, help="keep the rows in this file, rewritten after each case: cases "
                                              "already in it are not run again, and the table shows them all")
    ap.add_argument("--write", action="store_true", help="write the peer_speed section of BENCHMARKS.md")
    ap.add_argument("--report", action="store_true", help="with --json: the table from its rows, run no case")
    args = ap.parse_args()
    bad = [g for g in args.gavel_size or [] if g <= 0 or g % 12]
    if bad:
        ap.error(f"--gavel-size {', '.join(map(str, bad))}: a Gavel size must be a positive multiple of 12 (a "
                 "third of the GPUs of each type, and the fidelity study's 12-GPU traces scaled by a whole factor)")
    if args.report:
        if not args.json or not args.json.is_file():
            ap.error("--report needs --json FILE with the rows")
        rows = json.loads(args.json.read_text())
        args.work.mkdir(parents=True, exist_ok=True)
        text = section(rows, args, import_cpu(args.work))
        if args.write:
            update_section("peer_speed", text)
        print(text)
        return 0
    cases = [c for c in all_cases(args.gavel_size or [24, 48]) if getattr(args, c.peer) is not None]
    if args.case:
        known = {c.name: c for c in all_cases(sorted({*(args.gavel_size or []), 24, 48}))}
        unknown = [n for n in args.case if n not in known]
        if unknown:
            ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(known)}")
        cases = [known[n] for n in args.case]
    for c in cases:
        if getattr(args, c.peer) is None:
            ap.error(f"{c.name} needs --{c.peer}")
    compile_sources(sys.executable, Path(tesserae_package.__file__).parent)
    if args.tiresias:
        compile_sources(args.tiresias_python, args.tiresias)
    if args.gavel:
        compile_sources(args.gavel_python, args.gavel)
    write_tiresias_inputs(args.work, {c.trace for c in cases if c.peer == "tiresias"})
    if args.gavel:
        write_gavel_inputs(args.work, {c.trace for c in cases if c.peer == "gavel"}, args.gavel, args.gavel_python)
    rows = json.loads(args.json.read_text()) if args.json and args.json.is_file() else []
    done = {r["case"] for r in rows}
    for c in cases:
        if c.name in done:
            continue
        rows.append(run_case(c, args))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        r = rows[-1]
        print(f"{c.name}: peer {r['peer_wall']:.2f} s wall / {r['peer_cpu']:.2f} s CPU, ours {r['ours_wall']:.2f} / "
              f"{r['ours_cpu']:.2f} (CPU ratio {r['ours_cpu'] / r['peer_cpu']:.3f}), avg JCT "
              f"{r.get('peer_jct', float('nan')):.0f} / {r.get('ours_jct', float('nan')):.0f}, load "
              f"{min(r['load']):.1f}-{max(r['load']):.1f}", flush=True)
    text = section(rows, args, import_cpu(args.work))
    if args.write:
        update_section("peer_speed", text)
        print("wrote the peer_speed section of BENCHMARKS.md")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
