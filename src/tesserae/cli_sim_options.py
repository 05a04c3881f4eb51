"""The options ``simulate`` and ``compare`` share, and their parsing (one place, one message).

The dedicated plug-in flags (``--tiresias-thresholds``, formerly ``--queues``; ``--promote-knob``,
``--gittins-prior``, ``--gittins-index``, ``--gavel-reset-interval``, ``--gavel-lp``,
``--skew-threshold``, ``--type-matching``, ``--strategy-choice``; the Tiresias ones live in
:mod:`tesserae.cli_options`, shared with the server) are sugar for the plug-in option of the same
name: ``shared_options`` hands them to ``tesserae.config.with_options``, which gives each to the
plug-ins that declare it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from tesserae.core.errors import InputError

TraceOpt = Annotated[Path | None, typer.Option("--trace", help="Trace file; without it, a generated workload.")]
FormatOpt = Annotated[str, typer.Option("--format", help="tiresias, philly, gavel, slurm (a sacct --parsable2 "
                                       "dump) or canonical (CSV/Parquet).")]
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
StopLatencyOpt = Annotated[float, typer.Option("--stop-latency", min=0.0, help="Seconds a preempted or migrating "
                                               "job takes to stop (SIGTERM, checkpoint, exit): it keeps its GPUs "
                                               "without progress, and the decision's starts wait for it; below "
                                               "--round-seconds (0 = at once).")]
StopSignalOpt = Annotated[float, typer.Option("--stop-signal-delay", min=0.0, help="Of --stop-latency, the first "
                                              "seconds before the stop reaches the job (it still makes progress "
                                              "then; 0 = none).")]
ThrashOpt = Annotated[bool, typer.Option("--allow-thrashing", help="Run a time-slicing policy even though some "
                                         "restart cost reaches the round length (and no --min-run-quantum).")]
NoBackfillOpt = Annotated[bool, typer.Option("--no-backfill", help="Stop at the first job that does not fit.")]
EventOpt = Annotated[bool, typer.Option("--event-driven", help="Also decide at arrivals, completions, "
                                        "demotions and promotions.")]
PackingOpt = Annotated[bool, typer.Option("--packing", help="Let pairs of jobs share GPUs.")]
PriorOpt = Annotated[str | None, typer.Option("--gittins-prior", help="File of job GPU-times for Gittins.")]
GittinsIndexOpt = Annotated[str | None, typer.Option("--gittins-index", help="tiresias (Tiresias' simulator's "
                                                     "index, the default) or paper (the definition).")]
UnprofiledOpt = Annotated[str, typer.Option("--unprofiled-jobs", help="A trace's job that the profile cannot "
                                            "simulate (an unknown job type, an unmeasured GPU count): 'refuse' (an "
                                            "error naming the file, line and field), 'generic' (a type the "
                                            "built-in model does not know runs at reference speed, no skew) or "
                                            "'reject' (left out and counted); the summary warns.")]
WindowOpt = Annotated[str | None, typer.Option("--measure-jobs", help="Measurement window of job ids, "
                                               "LO:HI (half-open).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
ResetOpt = Annotated[float | None, typer.Option("--gavel-reset-interval", min=0.0, help="Gavel baselines: "
                                                "minimum seconds between allocation re-solves (0 = at every "
                                                "job-set change; default 1920).")]
GavelLpOpt = Annotated[str | None, typer.Option("--gavel-lp", help="gavel-maxmin's optimum: 'center' (Gavel's "
                                         "interior-point solution, the default) or 'max-total' (a vertex with "
                                         "the largest total throughput at the max-min optimum).")]
QueueConfigOpt = Annotated[str | None, typer.Option("--queue-config", help="Tenant queues: a queue file "
                                                    "(YAML), or 'derived' (one queue per queue the trace names, e.g. "
                                                    "a Slurm account, else per user, e.g. Philly's VCs; guarantees "
                                                    "from each one's share of GPU time).")]
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
TypeMatchingOpt = Annotated[bool | None, typer.Option("--type-matching/--no-type-matching", help="tesserae placement: "
                                               "match jobs to GPU types (off: the policy's advised types, or the "
                                               "previous type else the fastest with room; default on).")]
StrategyChoiceOpt = Annotated[bool | None, typer.Option("--strategy-choice/--no-strategy-choice", help="tesserae "
                                                 "placement: pick each pair's parallelism strategy (off: every "
                                                 "job keeps its best strategy alone; default on).")]
ThroughputsOpt = Annotated[str, typer.Option("--throughputs", help="What the scheduler knows of the jobs' rates: "
                                             "'oracle' (the profile), 'learned' (estimated from their progress) "
                                             "or 'generic' (nothing); jobs always run at the profile's rates.")]
NoiseOpt = Annotated[float, typer.Option("--rate-noise", min=0.0, max=1.0, help="learned: relative noise of each "
                                         "observed rate (0.05 = 5%).")]
VariationOpt = Annotated[float, typer.Option("--rate-variation", min=0.0, max=2.0, help="Scale each job's true "
                                             "rates (and work) by its own seeded factor exp(F z), z ~ N(0,1).")]
HintsOpt = Annotated[bool, typer.Option("--learned-hints/--no-learned-hints", help="learned: pool jobs of one "
                                        "declared type (a hint, never a profile row).")]


def check_throughputs(text: str) -> Any:
    if text not in ("oracle", "learned", "generic"):
        raise InputError(f"'{text}' is not oracle, learned or generic", field="throughputs")
    return text


def parse_window(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m or int(m.group(1)) >= int(m.group(2)):
        raise InputError(f"'{text}' is not LO:HI with LO < HI", field="measure-jobs")
    return int(m.group(1)), int(m.group(2))


def check_restart_cost(text: str) -> Any:
    if text not in ("fixed", "job"):
        raise InputError(f"'{text}' is not fixed or job", field="restart-cost")
    return text


def check_quotas(text: str) -> Any:
    if text not in ("borrow", "strict", "global"):
        raise InputError(f"'{text}' is not borrow, strict or global", field="quotas")
    return text


def check_gavel_lp(text: str) -> Any:
    if text not in ("center", "max-total"):
        raise InputError(f"'{text}' is not center or max-total", field="gavel-lp")
    return text


def parse_list(text: str, field: str, kind: type) -> list[Any]:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"'{text}' is not a comma-separated list of {kind.__name__}s", field=field) from None
    if not values:
        raise InputError("the list is empty", field=field)
    return values


def shared_options(*, queues: tuple[float, ...] | None = None, promote_knob: float | None = None,
                   gittins_prior: str | None = None, gittins_index: str | None = None,
                   gavel_reset_interval: float | None = None, gavel_lp: str | None = None,
                   skew_threshold: float | None = None, type_matching: bool | None = None,
                   strategy_choice: bool | None = None) -> dict[str, dict[str, Any]]:
    """The dedicated flags as ``with_options``' shared policy and placement options (None: not given)."""
    return {"shared_policy": {"queues": queues, "promote_knob": promote_knob, "gittins_prior": gittins_prior,
                              "gittins_index": gittins_index, "gavel_reset_interval": gavel_reset_interval,
                              "gavel_lp": None if gavel_lp is None else check_gavel_lp(gavel_lp)},
            "shared_placement": {"skew_threshold": skew_threshold, "type_matching": type_matching,
                                 "strategy_choice": strategy_choice}}
