"""What one simulated configuration is (``RunSpec``) and how to run it on a workload."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import make_placement
from tesserae.scheduler import Scheduler, SchedulerConfig
from tesserae.scheduling.base import make_policy
from tesserae.sim.engine import ProgressCallback, SimConfig, SimResult, Simulator
from tesserae.sim.metrics import summarize


class RunSpec(BaseModel):
    """One configuration: policy, placement and their knobs. Serializable, so sweeps can ship it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = "fifo"
    placement: str = "consolidated"
    round_seconds: float = Field(300.0, gt=0)
    restart_overhead: float = Field(30.0, ge=0)
    no_backfill: bool = False
    event_driven: bool = False
    packing: bool = False
    queues: tuple[float, ...] | None = None
    promote_knob: float | None = None
    gittins_prior: str | None = None
    gittins_index: str | None = None
    skew_threshold: float | None = None

    @property
    def label(self) -> str:
        extra = "+packing" if self.packing else ""
        nb = "(no-backfill)" if self.no_backfill else ""
        return f"{self.policy}{nb}:{self.placement}{extra}"

    def options(self) -> dict[str, Any]:
        """Options handed to the policy and placement factories (each takes what it knows)."""
        names = ("queues", "promote_knob", "gittins_prior", "gittins_index", "skew_threshold", "packing")
        return {k: getattr(self, k) for k in names if getattr(self, k) not in (None, False)}


def parse_run_label(label: str, base: RunSpec) -> RunSpec:
    """``POLICY[:PLACEMENT][+packing]`` on top of shared options, as ``compare --run`` takes it."""
    text = label.strip()
    packing = base.packing
    if text.endswith("+packing"):
        text, packing = text[: -len("+packing")], True
    policy, _, placement = text.partition(":")
    no_backfill = base.no_backfill
    if policy.endswith("(no-backfill)"):
        policy, no_backfill = policy[: -len("(no-backfill)")], True
    if not policy:
        raise InputError(f"run '{label}' names no policy; expected POLICY[:PLACEMENT]", field="run")
    return base.model_copy(update={"policy": policy, "placement": placement or base.placement,
                                   "packing": packing, "no_backfill": no_backfill})


def build_scheduler(cluster: Cluster, model: ThroughputModel, run: RunSpec) -> Scheduler:
    policy = make_policy(run.policy, **run.options())
    placement = make_placement(run.placement, **run.options())
    return Scheduler(cluster, policy, placement, model, SchedulerConfig(no_backfill=run.no_backfill))


def simulate(specs: Sequence[JobSpec], cluster: Cluster, model: ThroughputModel, run: RunSpec, *,
             seed: int | None = None, window: tuple[int, int] | None = None,
             progress: ProgressCallback | None = None) -> tuple[SimResult, dict[str, Any]]:
    """Run one configuration; returns the raw result and its summary."""
    scheduler = build_scheduler(cluster, model, run)
    sim = Simulator(specs, cluster, scheduler,
                    SimConfig(round_seconds=run.round_seconds, restart_overhead=run.restart_overhead,
                              event_driven=run.event_driven))
    result = sim.run(progress)
    summary = summarize(result, policy=run.policy, placement=run.placement, profile=model.name,
                        profile_measured=model.measured, seed=seed, window=window,
                        extra={"packing": run.packing, "no_backfill": run.no_backfill, "label": run.label})
    return result, summary
