"""The learned estimator's knobs, its answer type and its constants (``learned``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

STATE_FORMAT = "tesserae-learned-1"
#: Veto tags a job carries at most (its most recent vetoed pairs).
MAX_TAGS = 4
GENERIC = "generic"
#: Reasons an observation is refused (counted per reason, never applied).
REJECTIONS = ("unknown job", "unknown partner", "unknown GPU type", "not a number", "negative", "too short",
              "absurd", "stale run", "inconsistent")


@dataclass(frozen=True, slots=True)
class LearnedConfig:
    """Knobs of the estimator; the defaults are the ones the simulator's ``learned`` mode uses."""

    #: Pool jobs of one declared type and GPU count into a family (the type is a hint, never a table).
    hints: bool = True
    #: Exploration GPU-seconds a job may spend per GPU-second it has run.
    explore_budget: float = 0.1
    #: Exploration GPU-seconds of all known jobs together per GPU-second they have run. A pair's GPU-seconds
    #: count for both of its jobs, so 1.5% of the jobs' GPU-seconds is at most 3% of the cluster's busy
    #: GPU-time (issue 25's bound) however many jobs share.
    explore_share: float = 0.015
    #: Optimism on a never-measured GPU type, in standard deviations of its estimate.
    explore_bonus: float = 2.0
    #: Seconds one exploration run lasts (the round length): a job explores only if its budget holds one.
    probe_seconds: float = 300.0
    #: Finished jobs kept for the shared fits (the oldest go first).
    max_finished: int = 4096
    #: Partner entries kept per job (the least recently observed go first).
    max_partners: int = 16
    #: Relative observation noise assumed before any is measured (then pooled from repeats).
    noise: float = 0.05
    #: A job's rate on one GPU type stays within this factor of its prior's shape around its own scale.
    ratio_bound: float = 4.0
    #: Lowest pair factor (rate next to a partner / rate alone); the highest is 1.
    pair_floor: float = 0.02
    #: Observations over fewer computed seconds than this are too short to mean anything.
    min_seconds: float = 5.0
    #: No job runs faster than this (iterations/s): above it an observation is absurd.
    max_rate: float = 1e9
    #: A rate this many times off the job's current estimate (once it has one) is absurd.
    absurd_factor: float = 1000.0
    #: A rate this many times off what the job showed before on the same placement is inconsistent.
    inconsistent_factor: float = 100.0

    def __post_init__(self) -> None:
        checks = (("explore_budget", self.explore_budget >= 0), ("explore_bonus", self.explore_bonus >= 0),
                  ("explore_share", 0 <= self.explore_share <= 1),
                  ("probe_seconds", self.probe_seconds > 0), ("max_finished", self.max_finished >= 0),
                  ("max_partners", self.max_partners >= 1), ("noise", 0 < self.noise < 1),
                  ("ratio_bound", self.ratio_bound >= 1), ("pair_floor", 0 < self.pair_floor < 1),
                  ("min_seconds", self.min_seconds >= 0), ("max_rate", self.max_rate > 0),
                  ("absurd_factor", self.absurd_factor > 1), ("inconsistent_factor", self.inconsistent_factor > 1))
        for name, ok in checks:
            value = getattr(self, name)
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise ValueError(f"learned estimator: {name} = {value!r} is out of range")


@dataclass(frozen=True, slots=True)
class Estimate:
    """One rate estimate: iterations/s, its log-space sd, measured or a prior, and where the prior came from."""

    rate: float
    sd: float
    measured: bool
    source: str
