"""How to run one configuration (``tesserae.config.RunSpec``) on a workload in the simulator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tesserae.config import RunSpec, build_scheduler, queue_tree
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.throughput import ThroughputModel
from tesserae.sim.engine import ProgressCallback, SimConfig, SimResult, Simulator
from tesserae.sim.learning import prepare as prepare_learning
from tesserae.sim.metrics import queue_summary, summarize


def simulate(specs: Sequence[JobSpec], cluster: Cluster, model: ThroughputModel, run: RunSpec, *,
             seed: int | None = None, window: tuple[int, int] | None = None,
             progress: ProgressCallback | None = None, until: float | None = None
             ) -> tuple[SimResult, dict[str, Any]]:
    """Run one configuration (up to simulated time ``until`` if given); returns the raw result and its summary."""
    tree = queue_tree(run, specs, cluster)
    learning = prepare_learning(run.throughputs, specs, cluster, model, rate_noise=run.rate_noise,
                                rate_variation=run.rate_variation, hints=run.learned_hints,
                                explore_budget=run.explore_budget, round_seconds=run.round_seconds, seed=seed,
                                given_alone=run.learned_alone == "given")
    scheduler = learning.wrap(build_scheduler(cluster, learning.scheduler_model, run, tree))
    gavel_rounds = scheduler.policy.gavel_rounds if run.gavel_rounds is None else run.gavel_rounds
    if gavel_rounds and run.event_driven:
        if run.gavel_rounds:
            raise InputError("--gavel-rounds and --event-driven exclude each other", field="event-driven")
        gavel_rounds = False  # an explicit --event-driven wins over the policy's default
    if gavel_rounds and run.stop_latency > 0:
        raise InputError(f"'{run.policy}' runs Gavel's rounds, which do not model a stop latency; add --fixed-rounds "
                         "or leave --stop-latency at 0", field="stop-latency")
    sim = Simulator(specs, cluster, scheduler,
                    SimConfig(round_seconds=run.round_seconds, restart_overhead=run.restart_overhead,
                              event_driven=run.event_driven, gavel_rounds=gavel_rounds,
                              restart_cost=run.restart_cost, storage_gbps=run.storage_gbps,
                              min_run_quantum=run.min_run_quantum, allow_thrashing=run.allow_thrashing,
                              stop_latency=run.stop_latency, stop_signal_delay=run.stop_signal_delay),
                    **learning.engine_options())
    if scheduler.queues is not None and scheduler.queues.enforce:
        sim.reject(scheduler.queues.never_runs(sim.table), "over_queue_limit")
    result = sim.run(progress, until=until)
    summary = summarize(result, policy=run.policy, placement=run.placement, profile=model.name,
                        profile_measured=model.measured, seed=seed, window=window,
                        extra={"packing": run.packing, "policy_packing": run.policy_packs,
                               "no_backfill": run.no_backfill, "label": run.label})
    if scheduler.queues is not None:
        summary.update(queue_summary(result, scheduler.queues, window=window))
    summary.update(learning.summary(sim))
    return result, summary
