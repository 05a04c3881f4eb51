"""What one simulated configuration is (``RunSpec``) and how to run it on a workload."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tesserae.core.advice import AdviceKind
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.queues import QueueTree, class_rank
from tesserae.core.restart import DEFAULT_STORAGE_GBPS
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import make_placement
from tesserae.queue_file import derive_queue_tree, load_queue_tree
from tesserae.scheduler import Scheduler, SchedulerConfig
from tesserae.scheduler_queues import QueueStep
from tesserae.scheduling._per_queue import QUEUE_POLICIES, PerQueuePolicy, check_queue_policy
from tesserae.scheduling.base import make_policy
from tesserae.sim.engine import ProgressCallback, SimConfig, SimResult, Simulator
from tesserae.sim.metrics import queue_summary, summarize


class RunSpec(BaseModel):
    """One configuration: policy, placement and their knobs. Serializable, so sweeps can ship it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = "fifo"
    placement: str = "consolidated"
    round_seconds: float = Field(300.0, gt=0)
    restart_overhead: float = Field(30.0, ge=0)
    #: "fixed": every (re)start costs ``restart_overhead``; "job": the profile's cost of the job type.
    restart_cost: Literal["fixed", "job"] = "fixed"
    storage_gbps: float = Field(DEFAULT_STORAGE_GBPS, gt=0, allow_inf_nan=False)
    #: A (re)started job runs this many times its restart cost before it may be preempted (0 = off).
    min_run_quantum: float = Field(0.0, ge=0, allow_inf_nan=False)
    allow_thrashing: bool = False
    no_backfill: bool = False
    event_driven: bool = False
    packing: bool = False
    queues: tuple[float, ...] | None = None
    promote_knob: float | None = None
    gittins_prior: str | None = None
    gittins_index: str | None = None
    skew_threshold: float | None = None
    #: Gavel baselines: minimum seconds between allocation resets (Gavel's 1920; 0 = at every change).
    gavel_reset_interval: float = Field(1920.0, ge=0)
    #: Gavel's max-min LP: the central optimum Gavel's interior-point solver returns, or a vertex
    #: with the largest total throughput at the max-min optimum.
    gavel_lp: Literal["center", "max-total"] = "center"
    #: Gavel's round ending and idle jump in the simulator; None = the policy's default (on for
    #: the Gavel baselines, off for every other policy).
    gavel_rounds: bool | None = None
    #: Tenant queues (DESIGN §8): a queue file, or 'derived' (one queue per user, guarantees from
    #: each user's share of the workload's GPU time); None = one global queue, no per-queue report.
    queue_config: str | None = None
    #: With queues: 'borrow' (quotas, idle quota lent), 'strict' (quotas, no borrowing) or 'global'
    #: (one global queue, measured per tenant queue).
    quotas: Literal["borrow", "strict", "global"] = "borrow"
    #: Whether the policy itself packs (Gavel's LP with pair variables); None = as ``packing``.
    #: ``gavel-maxmin(plain):tesserae+packing`` is the plain LP with the placement's packing.
    policy_packing: bool | None = None
    #: ``tesserae`` placement: the allocation-preserving type assignment under per-type shares,
    #: and the type-slot matching otherwise (off: the policy's types, or the fastest with room).
    type_matching: bool = True
    #: ``tesserae`` placement: pick each pair's parallelism strategy (off: every job keeps its best
    #: strategy alone, also when sharing).
    strategy_choice: bool = True

    @property
    def policy_packs(self) -> bool:
        return self.packing if self.policy_packing is None else self.policy_packing

    @property
    def label(self) -> str:
        extra = "+packing" if self.packing else ""
        if self.queue_config is not None and self.quotas != "borrow":
            extra += f"+{self.quotas}"
        mods = [m for m, on in (("no-backfill", self.no_backfill), ("plain", self.packing and not self.policy_packs))
                if on]
        nb = "".join(f"({m})" for m in mods)
        ablate = [m for m, on in (("no-type-matching", not self.type_matching),
                                  ("fixed-strategy", not self.strategy_choice)) if on]
        return f"{self.policy}{nb}:{self.placement}{extra}" + "".join(f"[{m}]" for m in ablate)

    def options(self) -> dict[str, Any]:
        """Options handed to the policy and placement factories (each takes what it knows)."""
        names = ("queues", "promote_knob", "gittins_prior", "gittins_index", "skew_threshold", "packing")
        out = {k: getattr(self, k) for k in names if getattr(self, k) not in (None, False)}
        return {**out, "gavel_reset_interval": self.gavel_reset_interval, "gavel_lp": self.gavel_lp,
                "round_seconds": self.round_seconds, "restart_overhead": self.restart_overhead,
                "type_matching": self.type_matching, "strategy_choice": self.strategy_choice,
                "hetero": self.type_matching}


def parse_run_label(label: str, base: RunSpec) -> RunSpec:
    """``POLICY[:PLACEMENT][+packing]`` on top of shared options, as ``compare --run`` takes it."""
    text = label.strip()
    packing, quotas = base.packing, base.quotas
    while True:
        head, plus, suffix = text.rpartition("+")
        if not plus or suffix not in ("packing", "strict", "global", "borrow"):
            break
        text = head
        if suffix == "packing":
            packing = True
        else:
            quotas = suffix  # type: ignore[assignment]
    policy, _, placement = text.partition(":")
    no_backfill = base.no_backfill
    policy_packing = base.policy_packing
    while policy.endswith(")") and "(" in policy:
        policy, _, mod = policy[:-1].rpartition("(")
        if mod == "no-backfill":
            no_backfill = True
        elif mod == "plain":
            policy_packing = False
        else:
            raise InputError(f"run '{label}': unknown modifier '({mod})'; expected (no-backfill) or (plain)",
                             field="run")
    if not policy:
        raise InputError(f"run '{label}' names no policy; expected POLICY[:PLACEMENT]", field="run")
    return base.model_copy(update={"policy": policy, "placement": placement or base.placement,
                                   "packing": packing, "no_backfill": no_backfill, "quotas": quotas,
                                   "policy_packing": policy_packing})


def build_scheduler(cluster: Cluster, model: ThroughputModel, run: RunSpec, tree: QueueTree | None = None
                    ) -> Scheduler:
    """The scheduler of one configuration; with a queue tree, the queue level too (quotas or report
    only). InputError when its policy and placement do not fit."""
    policy = make_policy(run.policy, **{**run.options(), "packing": run.policy_packs})
    if run.policy_packing is False and run.packing:
        packed = make_policy(run.policy, **{**run.options(), "packing": True})
        if AdviceKind.PAIRS not in packed.advises:
            raise InputError(f"policy '{run.policy}' has no packed variant: '(plain)' does not apply to it",
                             field="run")
    placement = make_placement(run.placement, **run.options())
    step = None
    if tree is not None:
        if run.quotas == "strict":
            tree = tree.with_borrow_limit(0)
        if run.quotas != "global":
            check_queue_policy(run.policy)
            if any(p is not None and p != run.policy for p in tree.policy):
                policy = PerQueuePolicy(tree, policy, **run.options())
        step = QueueStep(tree, enforce=run.quotas != "global")
    return Scheduler(cluster, policy, placement, model, SchedulerConfig(no_backfill=run.no_backfill), queues=step)


def queue_tree(run: RunSpec, specs: Sequence[JobSpec], cluster: Cluster) -> QueueTree | None:
    """The run's queue tree: read from its file, or derived from the workload's users; checks every job."""
    if run.queue_config is None:
        return None
    if run.queue_config == "derived":
        gpu_time: dict[str, float] = {}
        for s in specs:
            if s.num_gpus <= cluster.num_gpus:
                gpu_time[s.user] = gpu_time.get(s.user, 0.0) + s.num_gpus * (s.duration or s.work)
        tree = derive_queue_tree(gpu_time, cluster.gpus_by_type)
    else:
        tree = load_queue_tree(run.queue_config, cluster.gpus_by_type, policy_names=QUEUE_POLICIES)
    seen: set[tuple[str, str]] = set()
    for s in specs:  # every job must land in a queue: a clear error now, not mid-run
        if (s.queue, s.user) not in seen:
            seen.add((s.queue, s.user))
            try:
                tree.leaf_of(s.queue, s.user)
            except InputError as e:
                raise InputError(f"job {s.job_id}: {e.message}", path=tree.source, field="queue") from None
        if s.priority_class != "normal":
            class_rank(s.priority_class)
    return tree


def simulate(specs: Sequence[JobSpec], cluster: Cluster, model: ThroughputModel, run: RunSpec, *,
             seed: int | None = None, window: tuple[int, int] | None = None,
             progress: ProgressCallback | None = None, until: float | None = None
             ) -> tuple[SimResult, dict[str, Any]]:
    """Run one configuration (up to simulated time ``until`` if given); returns the raw result and its summary."""
    tree = queue_tree(run, specs, cluster)
    scheduler = build_scheduler(cluster, model, run, tree)
    gavel_rounds = scheduler.policy.gavel_rounds if run.gavel_rounds is None else run.gavel_rounds
    if gavel_rounds and run.event_driven:
        if run.gavel_rounds:
            raise InputError("--gavel-rounds and --event-driven exclude each other", field="event-driven")
        gavel_rounds = False  # an explicit --event-driven wins over the policy's default
    sim = Simulator(specs, cluster, scheduler,
                    SimConfig(round_seconds=run.round_seconds, restart_overhead=run.restart_overhead,
                              event_driven=run.event_driven, gavel_rounds=gavel_rounds,
                              restart_cost=run.restart_cost, storage_gbps=run.storage_gbps,
                              min_run_quantum=run.min_run_quantum, allow_thrashing=run.allow_thrashing))
    if scheduler.queues is not None and scheduler.queues.enforce:
        sim.reject(scheduler.queues.never_runs(sim.table), "over_queue_limit")
    result = sim.run(progress, until=until)
    summary = summarize(result, policy=run.policy, placement=run.placement, profile=model.name,
                        profile_measured=model.measured, seed=seed, window=window,
                        extra={"packing": run.packing, "policy_packing": run.policy_packs,
                               "no_backfill": run.no_backfill, "label": run.label})
    if scheduler.queues is not None:
        summary.update(queue_summary(result, scheduler.queues, window=window))
    return result, summary
