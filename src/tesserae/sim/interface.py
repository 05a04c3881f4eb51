"""What the simulator takes and gives: its configuration, its result, the observer it reports
segments to, and the progress callback (the engine itself is :mod:`tesserae.sim.engine`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.restart import DEFAULT_STORAGE_GBPS

ProgressCallback = Callable[[float, int, int], None]
RESTART_COSTS = ("fixed", "job")
#: Iterations/s of a job placed where its true rate is 0 (out of memory next to its partner, say)
#: when the scheduler does not see the true rates: it holds its GPUs and makes no progress.
STALL_RATE = 1e-9


@dataclass(frozen=True, slots=True)
class SimConfig:
    round_seconds: float = 300.0
    restart_overhead: float = 30.0
    #: Restart overhead per job type, overriding ``restart_overhead``.
    overhead_by_type: dict[str, float] = field(default_factory=dict)
    #: Decide at every arrival, completion and policy event too, not only at round boundaries.
    event_driven: bool = False
    #: Gavel's rounds (only the Gavel baselines use them): each running job runs one micro-task of
    #: floor(rate x round) iterations (or what it has left), a pair until its slower member's ends,
    #: and the round ends when the last micro-task does; an idle cluster jumps to the next arrival.
    gavel_rounds: bool = False
    #: "fixed": every start, resume and migration costs ``restart_overhead`` (or ``overhead_by_type``);
    #: "job": the throughput model's restart cost of the job type at ``storage_gbps``.
    restart_cost: str = "fixed"
    #: Storage bandwidth a restarting job reads its checkpoint at (Gbit/s), for ``restart_cost="job"``.
    storage_gbps: float = DEFAULT_STORAGE_GBPS
    #: A (re)started job is not preempted before it has run this many times its restart cost after
    #: paying it (0 = no quantum).
    min_run_quantum: float = 0.0
    #: Run a time-slicing policy even when restart costs reach the round length.
    allow_thrashing: bool = False
    #: Seconds a preempted or migrating job takes to stop (0 = at once): it keeps its GPUs without
    #: progress meanwhile (but for ``stop_signal_delay``), and the decision's starts wait for it
    #: (:mod:`tesserae.sim.running`).
    #: Apart from the restart overhead, which the starting job pays. Below the round length.
    stop_latency: float = 0.0
    #: Of the stop latency, the first seconds before the stop reaches the job (a signal on its way): it
    #: still runs and makes progress then, holding its GPUs as for the rest. At most ``stop_latency``.
    stop_signal_delay: float = 0.0

    def __post_init__(self) -> None:
        if self.event_driven and self.gavel_rounds:
            raise ValueError("event-driven decisions and Gavel's rounds exclude each other")
        if self.restart_cost not in RESTART_COSTS:
            raise ValueError(f"restart_cost must be one of {', '.join(RESTART_COSTS)}, got {self.restart_cost!r}")
        if not (math.isfinite(self.storage_gbps) and self.storage_gbps > 0):
            raise ValueError(f"storage_gbps must be positive, got {self.storage_gbps!r}")
        if not (math.isfinite(self.min_run_quantum) and self.min_run_quantum >= 0):
            raise ValueError(f"min_run_quantum must be >= 0, got {self.min_run_quantum!r}")
        check_stop_latency(self.stop_latency, self.round_seconds, self.gavel_rounds)
        if not (math.isfinite(self.stop_signal_delay) and 0 <= self.stop_signal_delay <= self.stop_latency):
            raise ValueError(f"stop_signal_delay must be >= 0 and at most the stop latency ({self.stop_latency:g} s), "
                             f"got {self.stop_signal_delay!r}")


def check_stop_latency(seconds: float, round_seconds: float, gavel_rounds: bool = False) -> None:
    """A stop latency is non-negative and below the round length (a round's decision waits for its stops;
    a longer stop would outlast the round); Gavel's rounds do not model it. ValueError otherwise."""
    if not (math.isfinite(seconds) and 0 <= seconds < round_seconds):
        raise ValueError(f"stop_latency must be >= 0 and below the round length ({round_seconds:g} s), got {seconds!r}")
    if seconds > 0 and gavel_rounds:
        raise ValueError("stop_latency is not modelled in Gavel's rounds; use --fixed-rounds or no stop latency")


@dataclass
class SimResult:
    table: JobTable
    cluster: Cluster
    config: SimConfig
    decision_seconds: list[float]
    timeline: dict[str, np.ndarray]
    busy_gpu_seconds: float
    wall_seconds: float
    events: int
    scheduler_summary: dict[str, Any]
    rejections: dict[str, int] = field(default_factory=dict)
    #: Which restart cost was charged, its figures and provenance (see :func:`tesserae.sim.restart_costs.summary`).
    restart: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
