"""The ``tesserae`` command: simulate, compare, and trace tools.

User mistakes surface as one line on stderr and exit code 2, never as a traceback.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tesserae.cli_help import (
    PlacementOpt,
    PolicyOpt,
    TesseraeCommand,
    TesseraeGroup,
    VersionOpt,
    complete_placement,
)
from tesserae.cli_options import parse_queues
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.restart import DEFAULT_STORAGE_GBPS
from tesserae.core.throughput import ThroughputModel
from tesserae.profiler.cli_command import register as register_profile_command
from tesserae.runtime.commands import register as register_runtime_commands
from tesserae.sim.metrics import restart_description
from tesserae.web.viewer import register as register_view_command

# Click's plain help layout (see tesserae.cli_help), as wide as the terminal up to 120 columns.
app = typer.Typer(cls=TesseraeGroup, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"max_content_width": 120})
trace_app = typer.Typer(cls=TesseraeGroup, no_args_is_help=True, rich_markup_mode=None,
                        help="Read, convert and describe traces.")
app.add_typer(trace_app, name="trace")


@app.callback()
def _root(version: VersionOpt = False) -> None:
    """Tesserae: GPU cluster scheduling for deep-learning jobs (simulator and runtime)."""


# Wide tables when output is piped (Rich would fall back to 80 columns and wrap every cell).
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

# ----------------------------------------------------------------------------- shared options
TraceOpt = Annotated[Path | None, typer.Option("--trace", help="Trace file; without it, a generated workload.")]
FormatOpt = Annotated[str, typer.Option("--format", help="tiresias, philly, gavel or canonical (CSV/Parquet).")]
ClusterOpt = Annotated[str, typer.Option("--cluster", help="NODESxGPUS[:TYPE],... or a Tiresias cluster CSV.")]
JobsOpt = Annotated[int, typer.Option("--jobs", min=1, help="Generated workload: number of jobs.")]
LoadOpt = Annotated[float, typer.Option("--load", min=0.01, help="Generated workload: offered load.")]
MixOpt = Annotated[str, typer.Option("--gpu-mix", help="Generated workload: GPU-count mix, gavel, blox or "
                                     "COUNT:P,... e.g. 1:0.7,2:0.3.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for generated workloads and type assignment.")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="Throughput profile (default: built-in model).")]
RoundOpt = Annotated[float, typer.Option("--round-seconds", min=1.0, help="Round length (s).")]
OverheadOpt = Annotated[float, typer.Option("--restart-overhead", min=0.0, help="Fixed start/resume/migration "
                                            "cost (s), with --restart-cost fixed.")]
RestartCostOpt = Annotated[str, typer.Option("--restart-cost", help="'fixed' (every start, resume or migration "
                                              "costs --restart-overhead) or 'job' (each job type's start-up + "
                                              "checkpoint bytes / --storage-gbps, from the profile or the built-in "
                                              "model).")]
StorageOpt = Annotated[float, typer.Option("--storage-gbps", min=0.001, help="With --restart-cost job: storage "
                                           "bandwidth a restarting job reads its checkpoint at, Gbit/s.")]
QuantumOpt = Annotated[float, typer.Option("--min-run-quantum", min=0.0, help="A (re)started job runs K times "
                                           "its restart cost before it may be preempted (0 = off).")]
ThrashOpt = Annotated[bool, typer.Option("--allow-thrashing", help="Run a time-slicing policy even though some "
                                         "restart cost reaches the round length (and no --min-run-quantum).")]
NoBackfillOpt = Annotated[bool, typer.Option("--no-backfill", help="Stop at the first job that does not fit.")]
EventOpt = Annotated[bool, typer.Option("--event-driven", help="Also decide at arrivals, completions, "
                                        "demotions and promotions.")]
PackingOpt = Annotated[bool, typer.Option("--packing", help="Let pairs of jobs share GPUs.")]
QueuesOpt = Annotated[str | None, typer.Option("--queues", help="Tiresias queue thresholds (GPU-s), "
                                               "comma-separated, e.g. 3250,7200.")]
KnobOpt = Annotated[float | None, typer.Option("--promote-knob", min=0.0, help="Tiresias starvation "
                                               "guard P (0 = off).")]
PriorOpt = Annotated[str | None, typer.Option("--gittins-prior", help="File of job GPU-times for Gittins.")]
GittinsIndexOpt = Annotated[str | None, typer.Option("--gittins-index", help="tiresias (Tiresias' simulator's "
                                                     "index, the default) or paper (the definition).")]
SkewOpt = Annotated[float | None, typer.Option("--skew-threshold", help="Tiresias placement skew threshold.")]
WindowOpt = Annotated[str | None, typer.Option("--measure-jobs", help="Measurement window of job ids, "
                                               "LO:HI (half-open).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
ResetOpt = Annotated[float, typer.Option("--gavel-reset-interval", min=0.0, help="Gavel baselines: minimum "
                                         "seconds between allocation re-solves (0 = at every job-set change).")]
GavelLpOpt = Annotated[str, typer.Option("--gavel-lp", help="gavel-maxmin's optimum: 'center' (Gavel's "
                                         "interior-point solution) or 'max-total' (a vertex with the largest "
                                         "total throughput at the max-min optimum).")]
QueueConfigOpt = Annotated[str | None, typer.Option("--queue-config", help="Tenant queues: a queue file "
                                                    "(YAML), or 'derived' (one queue per user, e.g. Philly's VCs, "
                                                    "guarantees from each one's share of GPU time).")]
QuotasOpt = Annotated[str, typer.Option("--quotas", help="With --queue-config: 'borrow' (quotas, idle quota "
                                        "lent), 'strict' (no borrowing) or 'global' (one global queue, reported "
                                        "per queue).")]
GavelRoundsOpt = Annotated[bool | None, typer.Option("--gavel-rounds/--fixed-rounds", help="Gavel's round ending "
                                                     "and idle jump (default: on for gavel-maxmin and gavel-fifo "
                                                     "only).", show_default=False)]
PolicyPackingOpt = Annotated[bool | None, typer.Option("--policy-packing/--no-policy-packing", help="Whether the "
                                                       "policy itself packs (gavel-maxmin's pair LP; default: as "
                                                       "--packing). --packing --no-policy-packing: the plain LP, "
                                                       "the placement pairs its overflow.", show_default=False)]
TypeMatchingOpt = Annotated[bool, typer.Option("--type-matching/--no-type-matching", help="tesserae placement: "
                                               "match jobs to GPU types (off: the policy's advised types, or the "
                                               "previous type else the fastest with room).")]
StrategyChoiceOpt = Annotated[bool, typer.Option("--strategy-choice/--no-strategy-choice", help="tesserae "
                                                 "placement: pick each pair's parallelism strategy (off: every "
                                                 "job keeps its best strategy alone).")]


_IMPORTED = time.perf_counter()


def _wall_seconds() -> float:
    """Seconds since this process started (from /proc on Linux), else since this module was imported."""
    from tesserae.runtime.procs import start_ticks

    ticks = start_ticks(os.getpid())
    if ticks is None or not hasattr(time, "CLOCK_BOOTTIME"):
        return time.perf_counter() - _IMPORTED
    return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")


def _parse_window(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m or int(m.group(1)) >= int(m.group(2)):
        raise InputError(f"'{text}' is not LO:HI with LO < HI", field="measure-jobs")
    return int(m.group(1)), int(m.group(2))


def _restart_cost(text: str) -> Any:
    if text not in ("fixed", "job"):
        raise InputError(f"'{text}' is not fixed or job", field="restart-cost")
    return text


def _print_warnings(summaries: list[dict[str, Any]]) -> None:
    """Each distinct warning of the runs, once, on stderr (they are in every summary.json too)."""
    seen: dict[str, None] = {}
    for s in summaries:
        for w in s.get("warnings", []):
            seen.setdefault(w, None)
    for w in seen:
        err.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False, soft_wrap=True)


def _quotas(text: str) -> Any:
    if text not in ("borrow", "strict", "global"):
        raise InputError(f"'{text}' is not borrow, strict or global", field="quotas")
    return text


def _gavel_lp(text: str) -> Any:
    if text not in ("center", "max-total"):
        raise InputError(f"'{text}' is not center or max-total", field="gavel-lp")
    return text


def _load_setup(cluster_spec: str, profile: str | None) -> tuple[Cluster, ThroughputModel]:
    from tesserae.profiles.loader import load_profile
    from tesserae.traces.cluster_file import load_cluster

    return load_cluster(cluster_spec), load_profile(profile)


def _progress(quiet: bool, label: str) -> tuple[Progress | None, Any]:
    if quiet:
        return None, None
    prog = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("jobs done, simulated {task.fields[sim]}"), TimeElapsedColumn(),
                    console=err, transient=False)
    task = prog.add_task(label, total=None, sim="0.0 h")

    def update(sim_t: float, done: int, total: int) -> None:
        prog.update(task, completed=done, total=total, sim=f"{sim_t / 3600:.1f} h")

    return prog, update


def _summary_table(title: str, summaries: list[dict[str, Any]]) -> Table:
    rows = [("jobs done / rejected / unfinished", None), ("avg JCT (h)", "avg_jct"),
            ("median JCT (h)", "median_jct"), ("p95 JCT (h)", "p95_jct"), ("p99 JCT (h)", "p99_jct"),
            ("makespan (h)", "makespan"), ("avg queueing (h)", "avg_queueing_delay"),
            ("utilization", "utilization"), ("preemptions", "preemptions"), ("migrations", "migrations"),
            ("decision time mean (ms)", "decision_seconds_mean"), ("restart cost", "restart_cost")]
    table = Table(title=title)
    table.add_column("metric")
    base = summaries[0]
    for s in summaries:
        table.add_column(s.get("label", s["policy"]), justify="right")
    for name, key in rows:
        cells = []
        for s in summaries:
            if key is None:
                cells.append(f"{s['completed']} / {s['rejected']} / {s['unfinished']}")
                continue
            v = s.get(key)
            if key == "restart_cost":
                cells.append(restart_description(s, short=True) if v is not None else "-")
                continue
            if v is None:
                cells.append("-")
                continue
            if key in ("utilization",):
                text = f"{v:.1%}"
            elif key in ("preemptions", "migrations"):
                text = f"{v:d}"
            elif key == "decision_seconds_mean":
                text = f"{v * 1000:.2f}"
            else:
                text = f"{v / 3600:.2f}"
            b = base.get(key)
            if len(summaries) > 1 and s is not base and b and isinstance(v, float) and key != "utilization":
                text += f" ({v / b:.2f}x)"
            cells.append(text)
        table.add_row(name, *cells)
    if any(s.get("lifecycle") for s in summaries):  # a trace with lifecycle controls
        table.add_row("failed / timed out / cancelled / retries",
                      *(("{failed} / {timed_out} / {cancelled} / {retries}".format(**s["lifecycle"])
                         if s.get("lifecycle") else "-") for s in summaries))
    return table


def _queue_table(summary: dict[str, Any]) -> Table:
    """Per tenant queue: jobs, JCT, share of GPU time against the guarantee, borrowing, reclaims."""
    jain = summary.get("jain_satisfaction")
    table = Table(title=f"tenant queues ({summary.get('tenancy')}); Jain's index over the leaf queues' "
                        f"satisfaction: {'-' if jain is None else f'{jain:.3f}'}")
    for col in ("queue", "guarantee", "jobs", "avg JCT (h)", "GPU-time share", "guaranteed share",
                "satisfaction", "borrowed (GPU-h)", "reclaims"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    for q in summary["queues"]:
        sat = q["satisfaction"]
        table.add_row(q["path"], str(q["guarantee"]), str(q["jobs"]),
                      "-" if q["avg_jct"] is None else f"{q['avg_jct'] / 3600:.2f}", f"{q['share_of_gpu_time']:.1%}",
                      f"{q['guaranteed_share']:.1%}", "-" if sat is None else f"{sat:.3f}",
                      f"{q['borrowed_gpu_seconds'] / 3600:.1f}", str(q["reclaims"]))
    return table


def _run_dir_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")


# ----------------------------------------------------------------------------- simulate / compare
@app.command(cls=TesseraeCommand)
def simulate(
    out: Annotated[Path, typer.Option("--out", help="Output folder (summary.json, jobs.csv, timeline.csv).")],
    trace: TraceOpt = None, format: FormatOpt = "canonical", cluster: ClusterOpt = "16x4",
    jobs: JobsOpt = 500, load: LoadOpt = 0.8, gpu_mix: MixOpt = "gavel", seed: SeedOpt = 0,
    profile: ProfileOpt = None,
    policy: PolicyOpt = "fifo", placement: PlacementOpt = "consolidated",
    round_seconds: RoundOpt = 300.0, restart_overhead: OverheadOpt = 30.0, no_backfill: NoBackfillOpt = False,
    event_driven: EventOpt = False, packing: PackingOpt = False, queues: QueuesOpt = None,
    promote_knob: KnobOpt = None, gittins_prior: PriorOpt = None, gittins_index: GittinsIndexOpt = None,
    skew_threshold: SkewOpt = None,
    measure_jobs: WindowOpt = None, quiet: QuietOpt = False, gavel_reset_interval: ResetOpt = 1920.0,
    gavel_lp: GavelLpOpt = "center", gavel_rounds: GavelRoundsOpt = None, restart_cost: RestartCostOpt = "fixed",
    storage_gbps: StorageOpt = DEFAULT_STORAGE_GBPS, min_run_quantum: QuantumOpt = 0.0,
    allow_thrashing: ThrashOpt = False, policy_packing: PolicyPackingOpt = None,
    type_matching: TypeMatchingOpt = True, strategy_choice: StrategyChoiceOpt = True,
    queue_config: QueueConfigOpt = None, quotas: QuotasOpt = "borrow",
) -> None:
    """Replay a trace (or the generated default workload) under one policy and placement."""
    from tesserae.sim.report import write_run
    from tesserae.sim.runner import RunSpec, build_scheduler
    from tesserae.sim.runner import simulate as run_sim
    from tesserae.sim.workload import WorkloadSpec, build_workload
    from tesserae.web.report import write_report

    run = RunSpec(policy=policy, placement=placement, round_seconds=round_seconds,
                  restart_overhead=restart_overhead, no_backfill=no_backfill, event_driven=event_driven,
                  packing=packing, queues=parse_queues(queues), promote_knob=promote_knob,
                  gittins_prior=gittins_prior, gittins_index=gittins_index, skew_threshold=skew_threshold,
                  gavel_reset_interval=gavel_reset_interval, gavel_lp=_gavel_lp(gavel_lp), gavel_rounds=gavel_rounds,
                  restart_cost=_restart_cost(restart_cost), storage_gbps=storage_gbps,
                  min_run_quantum=min_run_quantum, allow_thrashing=allow_thrashing,
                  policy_packing=policy_packing, type_matching=type_matching, strategy_choice=strategy_choice,
                  queue_config=queue_config, quotas=_quotas(quotas))
    window = _parse_window(measure_jobs)
    cl, model = _load_setup(cluster, profile)
    build_scheduler(cl, model, run)  # a policy and placement that do not fit are refused before any work
    wl = WorkloadSpec(trace, format, jobs, load, gpu_mix, seed)
    specs = build_workload(wl, cl, model)
    prog, update = _progress(quiet, run.label)
    if prog:
        with prog:
            result, summary = run_sim(specs, cl, model, run, seed=seed, window=window, progress=update)
    else:
        result, summary = run_sim(specs, cl, model, run, seed=seed, window=window)
    summary["workload"] = wl.describe()
    write_run(out, result, summary)
    write_report(out)
    _print_warnings([summary])
    console.print(_summary_table(f"{run.label} on {cl.describe()} ({model.name})", [summary]))
    if "queues" in summary:
        console.print(_queue_table(summary))
    queue_csv = " queues.csv," if "queues" in summary else ""
    console.print(f"wrote {out}/summary.json, jobs.csv, timeline.csv,{queue_csv} report.html  "
                  f"(wall {_wall_seconds():.1f} s, "
                  f"of which simulating {summary['wall_seconds']:.1f} s)", soft_wrap=True)


@app.command(cls=TesseraeCommand)
def compare(
    out: Annotated[Path, typer.Option("--out", help="Output folder: one subfolder per run, compare.csv, PNGs.")],
    run: Annotated[list[str], typer.Option("--run", metavar="RUN", help="A configuration, "
                                           "POLICY[(no-backfill)|(plain)][:PLACEMENT] with an optional +packing, "
                                           "e.g. las:tesserae+packing; repeat.")],
    trace: TraceOpt = None, format: FormatOpt = "canonical", cluster: ClusterOpt = "16x4",
    jobs: JobsOpt = 500, load: LoadOpt = 0.8, gpu_mix: MixOpt = "gavel", seed: SeedOpt = 0,
    profile: ProfileOpt = None,
    placement: Annotated[str, typer.Option("--placement", help="Placement of the runs that name none: "
                                           "{placements}.", autocompletion=complete_placement)] = "consolidated",
    round_seconds: RoundOpt = 300.0, restart_overhead: OverheadOpt = 30.0, no_backfill: NoBackfillOpt = False,
    event_driven: EventOpt = False, packing: PackingOpt = False, queues: QueuesOpt = None,
    promote_knob: KnobOpt = None, gittins_prior: PriorOpt = None, gittins_index: GittinsIndexOpt = None,
    skew_threshold: SkewOpt = None,
    measure_jobs: WindowOpt = None, quiet: QuietOpt = False,
    seeds: Annotated[str | None, typer.Option("--seeds", help="Sweep: comma-separated seeds (overrides --seed).")]
    = None,
    loads: Annotated[str | None, typer.Option("--loads", help="Sweep: comma-separated loads of the generated "
                                              "workload (overrides --load).")] = None,
    ray: Annotated[str | None, typer.Option("--ray", help="Spread the sweep over a Ray cluster: its address, "
                                            "or 'local' to start one here.")] = None,
    gavel_reset_interval: ResetOpt = 1920.0, gavel_lp: GavelLpOpt = "center", gavel_rounds: GavelRoundsOpt = None,
    restart_cost: RestartCostOpt = "fixed", storage_gbps: StorageOpt = DEFAULT_STORAGE_GBPS,
    min_run_quantum: QuantumOpt = 0.0, allow_thrashing: ThrashOpt = False,
    type_matching: TypeMatchingOpt = True, strategy_choice: StrategyChoiceOpt = True,
    queue_config: QueueConfigOpt = None,
    quotas: Annotated[str, typer.Option("--quotas", help="With --queue-config, for runs that name none: borrow, "
                                        "strict or global (a run may add +strict, +global or +borrow).")] = "borrow",
) -> None:
    """Run several configurations on the same workload and cluster; ratios are to the first run.

    With --seeds/--loads it is a sweep (configurations x seeds x loads); ratios are then taken
    against the first configuration at the same seed and load.
    """
    from tesserae.sim.plots import plot_jct_cdf, plot_timeline
    from tesserae.sim.report import write_run_files
    from tesserae.sim.runner import RunSpec, build_scheduler, parse_run_label
    from tesserae.sim.sweep import SweepPoint, run_sweep
    from tesserae.sim.workload import WorkloadSpec
    from tesserae.web.report import write_report

    base = RunSpec(placement=placement, round_seconds=round_seconds, restart_overhead=restart_overhead,
                   no_backfill=no_backfill, event_driven=event_driven, packing=packing,
                   queues=parse_queues(queues), promote_knob=promote_knob, gittins_prior=gittins_prior,
                   gittins_index=gittins_index, skew_threshold=skew_threshold,
                   gavel_reset_interval=gavel_reset_interval,
                   gavel_lp=_gavel_lp(gavel_lp), gavel_rounds=gavel_rounds,
                   restart_cost=_restart_cost(restart_cost), storage_gbps=storage_gbps,
                   min_run_quantum=min_run_quantum, allow_thrashing=allow_thrashing,
                   type_matching=type_matching, strategy_choice=strategy_choice,
                   queue_config=queue_config, quotas=_quotas(quotas))
    runs = [parse_run_label(label, base) for label in run]
    window = _parse_window(measure_jobs)
    seed_list = [int(x) for x in _parse_list(seeds, "seeds", int)] if seeds else [seed]
    if loads and trace is not None:
        raise InputError("--loads applies to the generated workload, not to a trace", field="loads")
    load_list: list[float | None] = ([float(x) for x in _parse_list(loads, "loads", float)] if loads
                                     else [None if trace is not None else load])
    if any(v is not None and v <= 0 for v in load_list):
        raise InputError(f"loads must be positive: '{loads}'", field="loads")
    cl, model = _load_setup(cluster, profile)
    for r in runs:
        build_scheduler(cl, model, r)  # a policy and placement that do not fit are refused before any work
    wl = WorkloadSpec(trace, format, jobs, load, gpu_mix, seed)
    points = [SweepPoint(r, s, ld) for ld in load_list for s in seed_list for r in runs]
    sweep = len(seed_list) > 1 or len(load_list) > 1
    prog = None if quiet else Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                       TimeElapsedColumn(), console=err)
    if prog:
        with prog:
            task = prog.add_task(f"{len(points)} runs{' on Ray' if ray else ''}", total=len(points))
            results = run_sweep(points, wl, cl, model, window=window, ray_address=ray,
                                on_done=lambda _: prog.advance(task))
    else:
        results = run_sweep(points, wl, cl, model, window=window, ray_address=ray)

    def point_dir(res: Any) -> Path:
        d = out / _run_dir_name(res.point.run.label)
        if sweep:
            d = d / f"seed{res.point.seed}_load{res.point.load if res.point.load is not None else 'trace'}"
        return d

    firsts = {(r.point.seed, r.point.load): r.summary for r in results if r.point.run == runs[0]}
    keys = ["label", "policy", "placement", "seed", "load", "completed", "rejected", "unfinished", "avg_jct",
            "median_jct", "p95_jct", "p99_jct", "makespan", "utilization", "avg_queueing_delay", "preemptions",
            "migrations", "scheduler_seconds"]
    out.mkdir(parents=True, exist_ok=True)
    with (out / "compare.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*keys, "avg_jct_ratio", "makespan_ratio"])
        for res in results:
            s = res.summary
            s["workload"] = wl.describe() if res.point.load is None else (
                f"synthetic: {jobs} jobs, load {res.point.load}, {gpu_mix} GPU mix, seed {res.point.seed}")
            s["load"] = res.point.load
            write_run_files(point_dir(res), res.jobs, res.timeline, s)
            first = firsts[(res.point.seed, res.point.load)]
            ratio = s["avg_jct"] / first["avg_jct"] if s["avg_jct"] and first["avg_jct"] else ""
            mk = s["makespan"] / first["makespan"] if first["makespan"] else ""
            w.writerow([s.get(k) for k in keys] + [ratio, mk])
    first_point = (seed_list[0], load_list[0])
    shown = [r for r in results if (r.point.seed, r.point.load) == first_point]
    plot_title = f"{shown[0].summary['workload']} on {cl.describe()} ({model.name})"
    plot_jct_cdf({r.point.run.label: r.jct for r in shown}, out / "jct_cdf.png", title=plot_title)
    plot_timeline({r.point.run.label: r.timeline for r in shown}, out / "timeline.png", cl.num_gpus, title=plot_title)
    write_report(out)
    _print_warnings([r.summary for r in results])
    title = f"{wl.describe() if not sweep else 'seed ' + str(first_point[0]) + ', load ' + str(first_point[1])}"
    console.print(_summary_table(f"{title} on {cl.describe()} ({model.name}{'' if model.measured else ', a model'})",
                                 [r.summary for r in shown]))
    if sweep:
        console.print(_sweep_table(runs, results, seed_list, load_list))
    console.print(f"wrote {out}/compare.csv, jct_cdf.png, timeline.png, report.html and one folder per run "
                  f"(tesserae view {out})")


def _parse_list(text: str, field: str, kind: type) -> list[Any]:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"'{text}' is not a comma-separated list of {kind.__name__}s", field=field) from None
    if not values:
        raise InputError("the list is empty", field=field)
    return values


def _sweep_table(runs: list[Any], results: list[Any], seeds: list[int], loads: list[float | None]) -> Table:
    """Average JCT per configuration and load, mean over seeds, with its ratio to the first configuration."""
    table = Table(title=f"average JCT (h), mean over {len(seeds)} seed(s)")
    table.add_column("configuration")
    for ld in loads:
        table.add_column(f"load {ld}" if ld is not None else "trace", justify="right")
    base: dict[float | None, float] = {}
    for r in runs:
        cells = []
        for ld in loads:
            vals = [x.summary["avg_jct"] for x in results if x.point.run == r and x.point.load == ld
                    and x.summary["avg_jct"] is not None]
            mean = sum(vals) / len(vals) if vals else None
            if r == runs[0] and mean:
                base[ld] = mean
            cells.append("-" if mean is None else f"{mean / 3600:.2f}" + (
                f" ({mean / base[ld]:.2f}x)" if r != runs[0] and base.get(ld) else ""))
        table.add_row(r.label, *cells)
    return table


# ----------------------------------------------------------------------------- trace tools
@trace_app.command("info", cls=TesseraeCommand)
def trace_info_cmd(
    path: Annotated[Path, typer.Argument(help="Trace file.")],
    format: FormatOpt = "canonical",
    cluster: Annotated[str | None, typer.Option("--cluster", help="Report the offered load on this cluster.")]
    = None,
    profile: ProfileOpt = None, seed: SeedOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Job count, GPU-count mix, duration quantiles and offered load of a trace."""
    from tesserae.profiles.loader import load_profile
    from tesserae.traces import read_trace
    from tesserae.traces.cluster_file import load_cluster
    from tesserae.traces.info import trace_info

    model = load_profile(profile)
    specs = read_trace(path, format, model, seed=seed)
    info = trace_info(specs, load_cluster(cluster) if cluster else None, model=model)
    if as_json:
        console.print_json(json.dumps(info))
        return
    from tesserae.cli_render import render

    table = Table(title=escape(f"{path} ({format})"), show_header=False, show_lines=True)
    for k, v in info.items():
        table.add_row(_INFO_LABELS.get(k, k), render(v, k, index_label="GPUs" if k == "gpu_mix" else ""))
    console.print(table)


_INFO_LABELS = {"gpu_mix": "GPU-count mix", "duration": "duration (s)", "gpu_seconds": "GPU-seconds",
                "first_submit": "first submit (s)", "last_submit": "last submit (s)", "span": "span (s)",
                "job_types": "job types"}


@trace_app.command("convert", cls=TesseraeCommand)
def trace_convert_cmd(
    path: Annotated[Path, typer.Argument(help="Input trace.")],
    out: Annotated[Path, typer.Option("--out", help="Canonical output: .csv or .parquet.")],
    format: FormatOpt = "canonical", profile: ProfileOpt = None, seed: SeedOpt = 0,
) -> None:
    """Convert a trace into the canonical format (CSV or Parquet, by the output suffix)."""
    from tesserae.profiles.loader import load_profile
    from tesserae.traces import read_trace
    from tesserae.traces.canonical import write_canonical

    specs = read_trace(path, format, load_profile(profile), seed=seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_canonical(specs, out)
    console.print(f"wrote {len(specs)} jobs to {out}")


register_runtime_commands(app)  # server, token, submit, jobs, show, cancel, logs, cluster
register_profile_command(app)  # profile
register_view_command(app)  # view


def main() -> None:
    try:
        app(prog_name="tesserae")
    except InputError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
        err.print(f"[red]error:[/red] {escape(f'{e.strerror}: {e.filename}')}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
