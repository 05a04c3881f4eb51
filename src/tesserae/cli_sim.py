"""``tesserae simulate`` and ``tesserae compare``: one configuration, or several side by side.

User mistakes surface as one line on stderr and exit code 2, never as a traceback (``tesserae.cli``).
"""

from __future__ import annotations

import csv
import os
import re
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tesserae.cli_help import PlacementOpt, PolicyOpt, TesseraeCommand, complete_placement
from tesserae.cli_options import (
    KnobOpt,
    OldQueuesOpt,
    PlacementOptionsOpt,
    PolicyOptionsOpt,
    SkewOpt,
    ThresholdsOpt,
    parse_plugin_options,
    parse_queues,
)
from tesserae.cli_render import console, err
from tesserae.cli_sim_options import (
    ClusterOpt,
    EventOpt,
    FormatOpt,
    GavelLpOpt,
    GavelRoundsOpt,
    GittinsIndexOpt,
    HintsOpt,
    JobsOpt,
    LoadOpt,
    MixOpt,
    NoBackfillOpt,
    NoiseOpt,
    OverheadOpt,
    PackingOpt,
    PolicyPackingOpt,
    PriorOpt,
    ProfileOpt,
    QuantumOpt,
    QueueConfigOpt,
    QuietOpt,
    QuotasOpt,
    ResetOpt,
    RestartCostOpt,
    RoundOpt,
    SeedOpt,
    StopLatencyOpt,
    StopSignalOpt,
    StorageOpt,
    StrategyChoiceOpt,
    ThrashOpt,
    ThroughputsOpt,
    TraceOpt,
    TypeMatchingOpt,
    UnprofiledOpt,
    VariationOpt,
    WindowOpt,
    check_quotas,
    check_restart_cost,
    check_throughputs,
    parse_list,
    parse_window,
    shared_options,
)
from tesserae.cli_tables import print_fitted, print_warnings, queue_table, summary_tables, sweep_table
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.restart import DEFAULT_STORAGE_GBPS
from tesserae.core.throughput import ThroughputModel
from tesserae.extras import require


def register(app: typer.Typer) -> None:
    app.command(cls=TesseraeCommand)(simulate)
    app.command(cls=TesseraeCommand)(compare)


_IMPORTED = time.perf_counter()


def _wall_seconds() -> float:
    """Seconds since this process started (from /proc on Linux), else since this module was imported."""
    from tesserae.runtime.launch.procs import start_ticks

    ticks = start_ticks(os.getpid())
    if ticks is None or not hasattr(time, "CLOCK_BOOTTIME"):
        return time.perf_counter() - _IMPORTED
    return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")


def _load_setup(cluster_spec: str, profile: str | None) -> tuple[Cluster, ThroughputModel]:
    from tesserae.profiles.loader import load_profile
    from tesserae.sim.workload import check_cluster
    from tesserae.traces.cluster_file import load_cluster

    cl, model = load_cluster(cluster_spec), load_profile(profile)
    check_cluster(cl, model)
    return cl, model


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


def _run_dir_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")


def simulate(
    out: Annotated[Path, typer.Option("--out", help="Output folder: report.html (opens with no server), "
                                      "summary.json, jobs.csv, timeline.csv (and queues.csv with tenant queues).")],
    trace: TraceOpt = None, format: FormatOpt = "canonical", cluster: ClusterOpt = "16x4",
    jobs: JobsOpt = 500, load: LoadOpt = 0.8, gpu_mix: MixOpt = "gavel", seed: SeedOpt = 0,
    profile: ProfileOpt = None,
    policy: PolicyOpt = "fifo", placement: PlacementOpt = "consolidated",
    round_seconds: RoundOpt = 300.0, restart_overhead: OverheadOpt = 30.0, no_backfill: NoBackfillOpt = False,
    event_driven: EventOpt = False, packing: PackingOpt = False, tiresias_thresholds: ThresholdsOpt = None,
    queues: OldQueuesOpt = None, promote_knob: KnobOpt = None, gittins_prior: PriorOpt = None,
    gittins_index: GittinsIndexOpt = None,
    skew_threshold: SkewOpt = None, policy_opt: PolicyOptionsOpt = None, placement_opt: PlacementOptionsOpt = None,
    measure_jobs: WindowOpt = None, quiet: QuietOpt = False, gavel_reset_interval: ResetOpt = None,
    gavel_lp: GavelLpOpt = None, gavel_rounds: GavelRoundsOpt = None, restart_cost: RestartCostOpt = "fixed",
    storage_gbps: StorageOpt = DEFAULT_STORAGE_GBPS, min_run_quantum: QuantumOpt = 0.0,
    allow_thrashing: ThrashOpt = False, stop_latency: StopLatencyOpt = 0.0, stop_signal_delay: StopSignalOpt = 0.0,
    policy_packing: PolicyPackingOpt = None,
    type_matching: TypeMatchingOpt = None, strategy_choice: StrategyChoiceOpt = None,
    queue_config: QueueConfigOpt = None, quotas: QuotasOpt = "borrow", unprofiled_jobs: UnprofiledOpt = "refuse",
    throughputs: ThroughputsOpt = "oracle", rate_noise: NoiseOpt = 0.0, rate_variation: VariationOpt = 0.0,
    learned_hints: HintsOpt = True,
) -> None:
    """Replay a trace (or the generated default workload) under one policy and placement."""
    from tesserae.config import RunSpec, build_scheduler, with_options
    from tesserae.sim.report import write_run
    from tesserae.sim.runner import simulate as run_sim
    from tesserae.sim.workload import WorkloadSpec, build_workload
    from tesserae.web.report import write_report

    run = RunSpec(policy=policy, placement=placement, round_seconds=round_seconds,
                  restart_overhead=restart_overhead, no_backfill=no_backfill, event_driven=event_driven,
                  packing=packing, gavel_rounds=gavel_rounds, restart_cost=check_restart_cost(restart_cost),
                  storage_gbps=storage_gbps, min_run_quantum=min_run_quantum, allow_thrashing=allow_thrashing,
                  stop_latency=stop_latency, stop_signal_delay=stop_signal_delay, policy_packing=policy_packing,
                  queue_config=queue_config, quotas=check_quotas(quotas),
                  throughputs=check_throughputs(throughputs), rate_noise=rate_noise, rate_variation=rate_variation,
                  learned_hints=learned_hints)
    run = with_options(run, policy=parse_plugin_options(policy_opt, "policy-opt"),
                       placement=parse_plugin_options(placement_opt, "placement-opt"),
                       **shared_options(queues=parse_queues(tiresias_thresholds, queues), promote_knob=promote_knob,
                                        gittins_prior=gittins_prior, gittins_index=gittins_index,
                                        gavel_reset_interval=gavel_reset_interval, gavel_lp=gavel_lp,
                                        skew_threshold=skew_threshold, type_matching=type_matching,
                                        strategy_choice=strategy_choice))
    window = parse_window(measure_jobs)
    cl, model = _load_setup(cluster, profile)
    build_scheduler(cl, model, run)  # a policy and placement that do not fit are refused before any work
    wl = WorkloadSpec(trace, format, jobs, load, gpu_mix, seed, unprofiled_jobs)
    notes: list[str] = []
    specs = build_workload(wl, cl, model, notes)
    prog, update = _progress(quiet, run.label)
    if prog:
        with prog:
            result, summary = run_sim(specs, cl, model, run, seed=seed, window=window, progress=update)
    else:
        result, summary = run_sim(specs, cl, model, run, seed=seed, window=window)
    summary["workload"] = wl.describe()
    summary["warnings"] = [*summary.get("warnings", []), *notes]
    write_run(out, result, summary)
    write_report(out)
    print_warnings([summary])
    for table in summary_tables(f"{run.label} on {cl.describe()} ({model.name})", [summary], console.width):
        console.print(table)
    if "queues" in summary:
        print_fitted(console, queue_table(summary, console.width))
    queue_csv = " queues.csv," if "queues" in summary else ""
    console.print(f"wrote {out}/summary.json, jobs.csv, timeline.csv,{queue_csv} report.html  "
                  f"(wall {_wall_seconds():.1f} s, "
                  f"of which simulating {summary['wall_seconds']:.1f} s)", soft_wrap=True)


def compare(
    out: Annotated[Path, typer.Option("--out", help="Output folder: report.html (every run, opens with no "
                                      "server), compare.csv, jct_cdf.png, timeline.png, one subfolder per run.")],
    run: Annotated[list[str], typer.Option("--run", metavar="RUN", help="A configuration, "
                                           "POLICY[(no-backfill)|(plain)][:PLACEMENT] with an optional +packing, "
                                           "e.g. las:tesserae+packing; repeat. POLICY: {policies}. PLACEMENT: "
                                           "{placements}.")],
    trace: TraceOpt = None, format: FormatOpt = "canonical", cluster: ClusterOpt = "16x4",
    jobs: JobsOpt = 500, load: LoadOpt = 0.8, gpu_mix: MixOpt = "gavel", seed: SeedOpt = 0,
    profile: ProfileOpt = None,
    placement: Annotated[str, typer.Option("--placement", help="Placement of the runs that name none: "
                                           "{placements}.", autocompletion=complete_placement)] = "consolidated",
    round_seconds: RoundOpt = 300.0, restart_overhead: OverheadOpt = 30.0, no_backfill: NoBackfillOpt = False,
    event_driven: EventOpt = False, packing: PackingOpt = False, tiresias_thresholds: ThresholdsOpt = None,
    queues: OldQueuesOpt = None, promote_knob: KnobOpt = None, gittins_prior: PriorOpt = None,
    gittins_index: GittinsIndexOpt = None,
    skew_threshold: SkewOpt = None, policy_opt: PolicyOptionsOpt = None, placement_opt: PlacementOptionsOpt = None,
    measure_jobs: WindowOpt = None, quiet: QuietOpt = False,
    seeds: Annotated[str | None, typer.Option("--seeds", help="Sweep: comma-separated seeds (overrides --seed).")]
    = None,
    loads: Annotated[str | None, typer.Option("--loads", help="Sweep: comma-separated loads of the generated "
                                              "workload (overrides --load).")] = None,
    ray: Annotated[str | None, typer.Option("--ray", help="Spread the sweep over a Ray cluster: its address, "
                                            "or 'local' to start one here.")] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, max=1024, help="Processes that run the "
                                                "configurations here at once (default: this machine's cores; "
                                                "1: in this process). Results do not depend on it.")] = None,
    gavel_reset_interval: ResetOpt = None, gavel_lp: GavelLpOpt = None, gavel_rounds: GavelRoundsOpt = None,
    restart_cost: RestartCostOpt = "fixed", storage_gbps: StorageOpt = DEFAULT_STORAGE_GBPS,
    min_run_quantum: QuantumOpt = 0.0, allow_thrashing: ThrashOpt = False, stop_latency: StopLatencyOpt = 0.0,
    stop_signal_delay: StopSignalOpt = 0.0,
    type_matching: TypeMatchingOpt = None, strategy_choice: StrategyChoiceOpt = None,
    queue_config: QueueConfigOpt = None,
    quotas: Annotated[str, typer.Option("--quotas", help="With --queue-config, for runs that name none: borrow, "
                                        "strict or global (a run may add +strict, +global or +borrow).")] = "borrow",
    unprofiled_jobs: UnprofiledOpt = "refuse",
    throughputs: Annotated[str, typer.Option("--throughputs", help="For runs that name none: oracle, learned or "
                                             "generic (a run may add {learned}, {learned,no-hints}, {generic}).")]
    = "oracle",
    rate_noise: NoiseOpt = 0.0, rate_variation: VariationOpt = 0.0, learned_hints: HintsOpt = True,
) -> None:
    """Run several configurations on the same workload and cluster; ratios are to the first run.

    With --seeds/--loads it is a sweep (configurations x seeds x loads); ratios are then taken
    against the first configuration at the same seed and load.
    """
    from tesserae.config import RunSpec, build_scheduler, parse_run_label, with_options
    from tesserae.sim.plots import plot_jct_cdf, plot_timeline
    from tesserae.sim.report import write_run_files
    from tesserae.sim.seed_spread import sweep_rows, write_sweep_csv
    from tesserae.sim.sweep import SweepPoint, local_cores, run_sweep
    from tesserae.sim.workload import WorkloadSpec
    from tesserae.web.report import write_report

    base = RunSpec(placement=placement, round_seconds=round_seconds, restart_overhead=restart_overhead,
                   no_backfill=no_backfill, event_driven=event_driven, packing=packing, gavel_rounds=gavel_rounds,
                   restart_cost=check_restart_cost(restart_cost), storage_gbps=storage_gbps,
                   min_run_quantum=min_run_quantum, allow_thrashing=allow_thrashing, stop_latency=stop_latency,
                   stop_signal_delay=stop_signal_delay,
                   queue_config=queue_config, quotas=check_quotas(quotas), throughputs=check_throughputs(throughputs),
                   rate_noise=rate_noise, rate_variation=rate_variation, learned_hints=learned_hints)
    given = {"policy": parse_plugin_options(policy_opt, "policy-opt"),
             "placement": parse_plugin_options(placement_opt, "placement-opt"),
             **shared_options(queues=parse_queues(tiresias_thresholds, queues), promote_knob=promote_knob,
                              gittins_prior=gittins_prior,
                              gittins_index=gittins_index, gavel_reset_interval=gavel_reset_interval,
                              gavel_lp=gavel_lp, skew_threshold=skew_threshold, type_matching=type_matching,
                              strategy_choice=strategy_choice)}
    runs = [with_options(parse_run_label(label, base), **given) for label in run]
    if ray is not None:
        require("ray", "compare --ray")
    window = parse_window(measure_jobs)
    seed_list = [int(x) for x in parse_list(seeds, "seeds", int)] if seeds else [seed]
    if loads and trace is not None:
        raise InputError("--loads applies to the generated workload, not to a trace", field="loads")
    load_list: list[float | None] = ([float(x) for x in parse_list(loads, "loads", float)] if loads
                                     else [None if trace is not None else load])
    if any(v is not None and v <= 0 for v in load_list):
        raise InputError(f"loads must be positive: '{loads}'", field="loads")
    cl, model = _load_setup(cluster, profile)
    for r in runs:
        build_scheduler(cl, model, r)  # a policy and placement that do not fit are refused before any work
    wl = WorkloadSpec(trace, format, jobs, load, gpu_mix, seed, unprofiled_jobs)
    points = [SweepPoint(r, s, ld) for ld in load_list for s in seed_list for r in runs]
    n_workers = local_cores() if workers is None else workers
    sweep = len(seed_list) > 1 or len(load_list) > 1
    prog = None if quiet else Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                       TimeElapsedColumn(), console=err)
    if prog:
        with prog:
            task = prog.add_task(f"{len(points)} runs{' on Ray' if ray else ''}", total=len(points))
            results = run_sweep(points, wl, cl, model, window=window, ray_address=ray,
                                on_done=lambda _: prog.advance(task), workers=n_workers)
    else:
        results = run_sweep(points, wl, cl, model, window=window, ray_address=ray, workers=n_workers)

    def point_dir(res: Any) -> Path:
        d = out / _run_dir_name(res.point.run.label)
        if sweep:
            d = d / f"seed{res.point.seed}_load{res.point.load if res.point.load is not None else 'trace'}"
        return d

    firsts = {(r.point.seed, r.point.load): r.summary for r in results if r.point.run == runs[0]}
    keys = ["label", "policy", "placement", "seed", "load", "completed", "rejected", "unfinished", "avg_jct",
            "median_jct", "p95_jct", "p99_jct", "makespan", "utilization", "avg_queueing_delay",
            "avg_first_start_delay", "preemptions",
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
    print_warnings([r.summary for r in results])
    title = f"{wl.describe() if not sweep else 'seed ' + str(first_point[0]) + ', load ' + str(first_point[1])}"
    for table in summary_tables(f"{title} on {cl.describe()} ({model.name}{'' if model.measured else ', a model'})",
                                [r.summary for r in shown], console.width):
        console.print(table)
    if sweep:
        spread = sweep_rows(runs, results, load_list)
        write_sweep_csv(out / "sweep.csv", spread)
        print_fitted(console, sweep_table(spread, len(seed_list), console.width))
    console.print(f"wrote {out}/compare.csv,{' sweep.csv,' if sweep else ''} jct_cdf.png, timeline.png, report.html "
                  "and one folder per run "
                  f"(tesserae view {out})")
