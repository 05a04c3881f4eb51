"""Composition: what one configuration is (``RunSpec``) and the scheduler it builds.

The simulator (``sim.runner``), the runtime (``runtime.server``, its what-if predictions and
tenant queues) and the CLI all build their scheduler here, from the same spec:

- the run's own settings (round length, restart costs, backfill, packing, tenant queues);
- the policy and the placement by name, each with its own options (``policy_options``,
  ``placement_options``), validated against the plug-in's declared ``Options``: a key it does not
  declare is an error naming the plug-in and the key.

Options come three ways (``with_options``): ``--policy-opt KEY=VALUE`` gives KEY to the run's
policy (an error if it does not take it), ``NAME.KEY=VALUE`` only to runs whose policy is NAME,
and the dedicated flags (``--queues``, ``--gittins-prior``, ``--skew-threshold``, ...) are sugar for
the option of the same name (dashes as underscores), given to each plug-in that declares it, so
that one ``compare`` can mix policies that take it with policies that do not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tesserae.core.advice import AdviceKind
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.plugins import Registry, RunContext, declared, parse_options
from tesserae.core.queues import QueueTree, class_rank
from tesserae.core.restart import DEFAULT_STORAGE_GBPS
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import PLACEMENTS, PlacementPolicy, make_placement
from tesserae.queue_file import derive_queue_tree, load_queue_tree
from tesserae.scheduler import Scheduler, SchedulerConfig
from tesserae.scheduler_queues import QueueStep
from tesserae.scheduling.base import POLICIES, SchedulingPolicy, make_policy, queue_policy_names
from tesserae.scheduling.per_queue import PerQueuePolicy, check_queue_policy

Options = dict[str, Any]


class RunSpec(BaseModel):
    """One configuration: policy, placement, their options and the run's knobs. Serializable, so sweeps
    can ship it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = "fifo"
    placement: str = "consolidated"
    #: Options of the policy, by the names its ``Options`` declares (values as given; validated on build).
    policy_options: Options = Field(default_factory=dict)
    #: Options of the placement, likewise.
    placement_options: Options = Field(default_factory=dict)
    #: The dedicated flags' options (``--queues``, ``--skew-threshold``, ...), kept for the plug-ins built
    #: besides the run's own (a policy a tenant queue names, a what-if's): each takes those it declares.
    shared_options: Options = Field(default_factory=dict)
    round_seconds: float = Field(300.0, gt=0)
    restart_overhead: float = Field(30.0, ge=0)
    #: "fixed": every (re)start costs ``restart_overhead``; "job": the profile's cost of the job type.
    restart_cost: Literal["fixed", "job"] = "fixed"
    storage_gbps: float = Field(DEFAULT_STORAGE_GBPS, gt=0, allow_inf_nan=False)
    #: A (re)started job runs this many times its restart cost before it may be preempted (0 = off).
    min_run_quantum: float = Field(0.0, ge=0, allow_inf_nan=False)
    allow_thrashing: bool = False
    #: Seconds a preempted or migrating job takes to stop, holding its GPUs without progress (0 = at once;
    #: below the round length): ``tesserae.sim.running``.
    stop_latency: float = Field(0.0, ge=0, allow_inf_nan=False)
    #: Of the stop latency, the first seconds before the stop reaches the job: it still makes progress then.
    stop_signal_delay: float = Field(0.0, ge=0, allow_inf_nan=False)
    no_backfill: bool = False
    event_driven: bool = False
    packing: bool = False
    #: Gavel's round ending and idle jump in the simulator; None = the policy's default (on for
    #: the Gavel baselines, off for every other policy).
    gavel_rounds: bool | None = None
    #: Tenant queues (DESIGN §8): a queue file, or 'derived' (one queue per queue the jobs name, e.g. a
    #: Slurm account, and per user for jobs that name none, e.g. Philly's VCs; guarantees from each
    #: one's share of the workload's GPU time); None = one global queue, no per-queue report.
    queue_config: str | None = None
    #: With queues: 'borrow' (quotas, idle quota lent), 'strict' (quotas, no borrowing) or 'global'
    #: (one global queue, measured per tenant queue).
    quotas: Literal["borrow", "strict", "global"] = "borrow"
    #: Whether the policy itself packs (Gavel's LP with pair variables); None = as ``packing``.
    #: ``gavel-maxmin(plain):tesserae+packing`` is the plain LP with the placement's packing.
    policy_packing: bool | None = None
    #: What the scheduler knows of the true rates: the profile (oracle), an estimator learning from the
    #: jobs' progress (learned), or nothing (generic); see ``tesserae.sim.learning``.
    throughputs: Literal["oracle", "learned", "generic"] = "oracle"
    #: Relative noise of one observed rate (learned), and the spread of the per-job true-rate factors.
    rate_noise: float = Field(0.0, ge=0, le=1, allow_inf_nan=False)
    rate_variation: float = Field(0.0, ge=0, le=2, allow_inf_nan=False)
    #: learned: pool jobs of one declared type (a hint, not a profile row), and the exploration budget
    #: (GPU-seconds exploring per GPU-second run).
    learned_hints: bool = True
    explore_budget: float = Field(0.1, ge=0, le=1, allow_inf_nan=False)
    #: learned: 'given' tells the estimator each job's true alone rate on every GPU type at arrival (what
    #: Gavel's estimator assumes), so that a study can tell what learning alone rates costs from the rest.
    learned_alone: Literal["learned", "given"] = "learned"

    @model_validator(mode="after")
    def _stop_within_round(self) -> RunSpec:
        if self.stop_latency >= self.round_seconds:
            raise InputError(f"the stop latency ({self.stop_latency:g} s) must be below the round length "
                             f"({self.round_seconds:g} s): a decision waits for its stops", field="stop-latency")
        if self.stop_signal_delay > self.stop_latency:
            raise InputError(f"the stop signal delay ({self.stop_signal_delay:g} s) is part of the stop latency "
                             f"({self.stop_latency:g} s) and cannot exceed it", field="stop-signal-delay")
        return self

    @classmethod
    def flat(cls, **settings: Any) -> RunSpec:
        """A spec from flat settings, as scripts write them: the spec's own fields, and any other key an
        option of the policy or the placement (each gets the keys it declares; None: not given). A key
        that neither declares is an error naming both."""
        own = {k: v for k, v in settings.items() if k in cls.model_fields}
        rest = {k: v for k, v in settings.items() if k not in cls.model_fields}
        run = cls(**own)
        takes = {*POLICIES.get(run.policy).Options.model_fields, *PLACEMENTS.get(run.placement).Options.model_fields}
        for key in rest:
            if key not in takes:
                raise InputError(f"neither policy '{run.policy}' nor placement '{run.placement}' has an option "
                                 f"'{key}'", field=key)
        return with_options(run, shared_policy=rest, shared_placement=rest)

    @property
    def policy_packs(self) -> bool:
        return self.packing if self.policy_packing is None else self.policy_packing

    def options_for(self, kind: Literal["policy", "placement"], name: str) -> Options:
        """The options another plug-in than the run's own gets: the shared ones and the run's own
        plug-in's, as far as it declares them."""
        registry, own = (POLICIES, self.policy_options) if kind == "policy" else (PLACEMENTS, self.placement_options)
        return declared(registry.get(name).Options, {**self.shared_options, **own})

    def policy_context(self, packing: bool | None = None) -> RunContext:
        return RunContext(self.round_seconds, self.restart_overhead, self.policy_packs if packing is None else packing)

    def placement_context(self) -> RunContext:
        return RunContext(self.round_seconds, self.restart_overhead, self.packing)

    @property
    def label(self) -> str:
        """``POLICY[(mods)]:PLACEMENT[+packing][+quotas][marks][{throughputs}]``: what reports and folders are
        named by."""
        extra = "+packing" if self.packing else ""
        if self.queue_config is not None and self.quotas != "borrow":
            extra += f"+{self.quotas}"
        mods = [m for m, on in (("no-backfill", self.no_backfill), ("plain", self.packing and not self.policy_packs))
                if on]
        nb = "".join(f"({m})" for m in mods)
        info = "" if self.throughputs == "oracle" else "{" + self.throughputs + \
            ("" if self.learned_hints or self.throughputs != "learned" else ",no-hints") + "}"
        return f"{self.policy}{nb}:{self.placement}{extra}" + "".join(f"[{m}]" for m in self._marks()) + info

    def _marks(self) -> list[str]:
        """The placement's label marks (ablations) for its options; none while they do not validate."""
        try:
            cls = PLACEMENTS.get(self.placement)
            return parse_options("placement", self.placement, cls.Options, self.placement_options).label_marks()
        except InputError:
            return []  # building the scheduler says what is wrong


def parse_run_label(label: str, base: RunSpec) -> RunSpec:
    """``POLICY[:PLACEMENT][+packing][{learned|generic|oracle}]`` on top of shared options, as
    ``compare --run`` takes it; ``{learned,no-hints}`` hides the declared types from the estimator too."""
    text = label.strip()
    info: dict[str, Any] = {}
    if text.endswith("}") and "{" in text:
        text, _, mode = text[:-1].rpartition("{")
        name, _, flag = mode.partition(",")
        if name not in ("oracle", "learned", "generic") or flag not in ("", "no-hints") or \
                (flag and name != "learned"):
            raise InputError(f"run '{label}': unknown throughputs '{{{mode}}}'; expected {{oracle}}, {{learned}}, "
                             "{learned,no-hints} or {generic}", field="run")
        info = {"throughputs": name, "learned_hints": flag != "no-hints"}
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
                                   "policy_packing": policy_packing, **info})


def with_options(run: RunSpec, *, policy: Mapping[str, Any] | None = None, placement: Mapping[str, Any] | None = None,
                 shared_policy: Mapping[str, Any] | None = None, shared_placement: Mapping[str, Any] | None = None
                 ) -> RunSpec:
    """``run`` with options added (see the module docstring): ``policy``/``placement`` keys go to the
    run's plug-in (``NAME.KEY`` only when its name is NAME), ``shared_*`` ones only where declared.
    Explicit options win over shared ones; a shared value of None is not given."""
    pol = _merge(POLICIES, run.policy, run.policy_options, policy, shared_policy)
    pla = _merge(PLACEMENTS, run.placement, run.placement_options, placement, shared_placement)
    shared = {k: v for k, v in {**(shared_policy or {}), **(shared_placement or {})}.items() if v is not None}
    return run.model_copy(update={"policy_options": pol, "placement_options": pla,
                                  "shared_options": {**run.shared_options, **shared}})


def _merge(registry: Registry[Any], name: str, have: Mapping[str, Any], given: Mapping[str, Any] | None,
           shared: Mapping[str, Any] | None) -> Options:
    kind = registry.kind
    names = set(registry.names())
    # An unknown plug-in takes no shared option; building it then says that it is unknown.
    out = declared(registry.get(name).Options, {k: v for k, v in (shared or {}).items() if v is not None}) \
        if name in names else {}
    out.update(have)
    for key, value in (given or {}).items():
        plugin, dot, bare = key.rpartition(".")
        if dot and plugin not in names:
            raise InputError(f"'{key}': no {kind} is named '{plugin}'; write KEY or {kind.upper()}.KEY", field=key)
        if not dot or plugin == name:
            out[bare] = value
    return out


def build_policy(run: RunSpec) -> SchedulingPolicy:
    """The run's policy; InputError when it, or one of its options, is unknown or invalid."""
    policy = make_policy(run.policy, run.policy_options, run.policy_context())
    if run.policy_packing is False and run.packing:
        packed = make_policy(run.policy, run.policy_options, run.policy_context(packing=True))
        if AdviceKind.PAIRS not in packed.advises:
            raise InputError(f"policy '{run.policy}' has no packed variant: '(plain)' does not apply to it",
                             field="run")
    return policy


def build_placement(run: RunSpec) -> PlacementPolicy:
    return make_placement(run.placement, run.placement_options, run.placement_context())


def policy_maker(run: RunSpec) -> Callable[[str], SchedulingPolicy]:
    """Builds a policy a tenant queue names, with the run's options that it declares (``options_for``)."""

    def make(name: str) -> SchedulingPolicy:
        return make_policy(name, run.options_for("policy", name), run.policy_context())

    return make


def queue_policy(tree: QueueTree, policy: SchedulingPolicy, run: RunSpec) -> SchedulingPolicy:
    """``policy``, or, when a queue of ``tree`` names another, the per-queue dispatch over them."""
    check_queue_policy(policy.name)
    if any(p is not None and p != policy.name for p in tree.policy):
        return PerQueuePolicy(tree, policy, policy_maker(run))
    return policy


def build_scheduler(cluster: Cluster, model: ThroughputModel, run: RunSpec, tree: QueueTree | None = None
                    ) -> Scheduler:
    """The scheduler of one configuration; with a queue tree, the queue level too (quotas or report
    only). InputError when its policy and placement do not fit."""
    policy = build_policy(run)
    placement = build_placement(run)
    step = None
    if tree is not None:
        if run.quotas == "strict":
            tree = tree.with_borrow_limit(0)
        if run.quotas != "global":
            policy = queue_policy(tree, policy, run)
        step = QueueStep(tree, enforce=run.quotas != "global")
    return Scheduler(cluster, policy, placement, model, SchedulerConfig(no_backfill=run.no_backfill), queues=step)


def queue_tree(run: RunSpec, specs: Sequence[JobSpec], cluster: Cluster) -> QueueTree | None:
    """The run's queue tree: read from its file, or derived from the workload's queues and users; checks every job."""
    if run.queue_config is None:
        return None
    if run.queue_config == "derived":  # one queue per job queue named (a Slurm account, say), else per user
        gpu_time: dict[str, float] = {}
        for s in specs:
            if s.num_gpus <= cluster.num_gpus:
                key = s.queue or s.user
                gpu_time[key] = gpu_time.get(key, 0.0) + s.num_gpus * (s.duration or s.work)
        tree = derive_queue_tree(gpu_time, cluster.gpus_by_type)
    else:
        tree = load_queue_tree(run.queue_config, cluster.gpus_by_type, policy_names=queue_policy_names())
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
