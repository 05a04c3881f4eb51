"""Predicted start and finish of live jobs: the simulator core run forward from a snapshot.

The runtime hands over, at a decision, its job table (every job with its attained service,
progress and queue), the running jobs' GPUs and measured progress rates, and its scheduler (the
policy with its state, e.g. Tiresias' queue levels, the placement and the tenant queues). They
are deep-copied together, so the live objects are never touched, and simulated from ``now``
with no further arrivals, in the server's rounds, until every job has finished, the simulated
horizon is reached or the wall-clock budget is spent (jobs not started by then get no
prediction).

Speed: each job's remaining work is rescaled by how fast it (or, before it has run, the jobs of
its type and GPU count) was measured to run against the throughput model (``measured_speed``).

Remaining work: a job that gave its iterations has ``iterations - progress`` left. One that did
not is given the expected remaining GPU time of the jobs that completed on this server, given
what it has attained: E[S - a | S > a] over their GPU-seconds S (the empirical distribution
Gittins uses). Before ``MIN_SAMPLES`` completions, or past every sample, it is assumed to need as
much again as it has run, at least one round (a doubling guess, labelled so in the answer).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.scheduler import Scheduler
from tesserae.sim.engine import SimConfig, Simulator

MIN_SAMPLES = 5


class _OutOfTime(Exception):
    pass


@dataclass
class Prediction:
    """Per job id: predicted start and finish (seconds on the snapshot's clock; None = not within reach)."""

    now: float
    start: dict[int, float | None] = field(default_factory=dict)
    finish: dict[int, float | None] = field(default_factory=dict)
    complete: bool = True  # False: the wall-clock budget or the horizon cut the simulation short
    out_of_time: bool = False  # True: the wall-clock budget cut it short (a partial answer)
    estimated_work: list[int] = field(default_factory=list)  # job ids whose remaining work was guessed
    wall_seconds: float = 0.0
    policy: str = ""


@dataclass
class Snapshot:
    """A live state, deep-copied at a decision (see module docstring)."""

    now: float
    table: JobTable
    active: np.ndarray
    assignments: dict[int, Assignment]
    rates: dict[int, float]  # measured rates of running rows for the engine (empty: speeds are in the work)
    scheduler: Scheduler
    known_work: np.ndarray  # per row: True when the job gave its iterations

    @classmethod
    def take(cls, now: float, table: JobTable, active: np.ndarray, assignments: dict[int, Assignment],
             scheduler: Scheduler, known_work: np.ndarray,
             units: Callable[[JobTable], None] | None = None) -> Snapshot:
        """Copy everything a prediction mutates (table, policy, placement, queue step), not the model.
        ``units`` converts the copied table's work and rates into the model's units first (learned
        throughputs: ``runtime.controller.learning``)."""
        memo: dict[int, Any] = {id(scheduler.model): scheduler.model, id(scheduler.cluster): scheduler.cluster,
                                id(table.specs): table.specs}  # frozen specs, never changed: shared, not copied
        t, policy, placement, queues = copy.deepcopy((table, scheduler.policy, scheduler.placement,
                                                      scheduler.queues), memo)
        if units is not None:
            units(t)
        sched = Scheduler(scheduler.cluster, policy, placement, scheduler.model, scheduler.config, queues=queues)
        act = np.asarray(active, dtype=np.int64).copy()
        measured_speed(t, act)
        return cls(now, t, act, dict(assignments), {}, sched, np.asarray(known_work, dtype=bool).copy())


def measured_speed(t: JobTable, active: np.ndarray) -> np.ndarray:
    """Scale the active jobs' remaining work so the model's rates give the measured durations.

    A job that has progressed runs at ``progress / executed`` iterations per second (restart
    costs included); against its model rate that is a speed factor, and its remaining
    iterations are divided by it, so every simulated run of it, wherever the simulation places
    it, lasts what the measurement says. A job not measured yet gets the median factor of the
    jobs of its type and GPU count that were, else of its type, else 1. Returns the factors.
    """
    ran = np.flatnonzero((t.executed > 0) & (t.progress > 0) & (t.ref_rate > 0))
    own = np.full(t.n, np.nan)
    own[ran] = t.progress[ran] / t.executed[ran] / t.ref_rate[ran]
    # A job's own factor, else the median of its (type, GPU count), else of its type: worked out once per
    # group (not a scan of every job that ran per waiting job: with 30,000 waiting and 70,000 that ran,
    # that cost minutes a decision; issue 27).
    factor = own[active] if active.size else np.ones(0)
    missing = ~np.isfinite(factor)
    if missing.any():
        rows = active[missing]
        found = np.ones(rows.size)
        pairs = np.stack([t.type_idx[rows], t.num_gpus[rows]], axis=1)
        for kind, gpus in np.unique(pairs, axis=0).tolist():
            same = ran[(t.type_idx[ran] == kind) & (t.num_gpus[ran] == gpus)]
            if same.size == 0:
                same = ran[t.type_idx[ran] == kind]
            if same.size:
                found[(pairs[:, 0] == kind) & (pairs[:, 1] == gpus)] = float(np.median(own[same]))
        factor = factor.copy()
        factor[missing] = found
    factor = np.clip(factor, 1e-6, 1e6)
    t.work[active] = t.progress[active] + np.maximum(t.work[active] - t.progress[active], 0.0) / factor
    return factor


def expected_remaining(samples: np.ndarray, attained: np.ndarray) -> np.ndarray:
    """E[S - a | S > a] for each a over the sample S; NaN where no sample exceeds a."""
    s = np.sort(np.asarray(samples, dtype=np.float64))
    prefix = np.concatenate([[0.0], np.cumsum(s)])
    lo = np.searchsorted(s, attained, side="right")
    count = s.size - lo
    out = np.full(np.shape(attained), np.nan)
    ok = count > 0
    out[ok] = (prefix[-1] - prefix[lo[ok]]) / count[ok] - attained[ok]
    return out


def fill_unknown_work(snap: Snapshot, round_seconds: float) -> list[int]:
    """Give every active job without known iterations a remaining work estimate; returns their ids."""
    t = snap.table
    rows = snap.active[~snap.known_work[snap.active]]
    if rows.size == 0:
        return []
    done = np.flatnonzero((t.status == JobStatus.DONE) & (t.attained > 0))
    guess_gpu_s = np.full(rows.size, np.nan)
    if done.size >= MIN_SAMPLES:
        guess_gpu_s = expected_remaining(t.attained[done], t.attained[rows])
    fallback = np.maximum(t.attained[rows], round_seconds * t.num_gpus[rows])  # as much again, >= a round
    gpu_s = np.where(np.isfinite(guess_gpu_s) & (guess_gpu_s > 0), guess_gpu_s, fallback)
    # In the model's iterations: the simulation runs them at the model's rate, i.e. in real seconds.
    t.work[rows] = t.progress[rows] + gpu_s / t.num_gpus[rows] * t.ref_rate[rows]
    return [int(j) for j in t.job_id[rows].tolist()]


def predict(snap: Snapshot, cluster: Cluster, config: SimConfig, *, horizon: float = 30 * 86400.0,
            budget_seconds: float = 2.0) -> Prediction:
    """Simulate the snapshot forward; the predicted first start and finish of every active job."""
    wall0 = time.perf_counter()
    deadline = wall0 + budget_seconds
    t = snap.table
    guessed = fill_unknown_work(snap, config.round_seconds)
    inner = snap.scheduler

    class Bounded(Scheduler):
        def decide(self, now: float, table: JobTable, active: np.ndarray, previous: Any) -> Plan:
            if time.perf_counter() > deadline:
                raise _OutOfTime
            return super().decide(now, table, active, previous)

    sched = Bounded(cluster, inner.policy, inner.placement, inner.model, inner.config, queues=inner.queues)
    cfg = SimConfig(round_seconds=config.round_seconds, restart_overhead=config.restart_overhead,
                    event_driven=config.event_driven, allow_thrashing=True)
    waiting = snap.active[t.status[snap.active] != JobStatus.RUNNING]
    waiting = waiting[~np.isin(waiting, np.fromiter(snap.assignments, dtype=np.int64))]
    sim = Simulator.from_state(t, cluster, sched, cfg, snap.now, snap.active, snap.assignments, snap.rates)
    t.first_start[waiting] = math.nan  # the start to predict is the next one, not an earlier run's
    complete = True
    try:
        sim.run(until=snap.now + horizon)
    except _OutOfTime:
        complete = False
    out = Prediction(snap.now, complete=complete, out_of_time=not complete, estimated_work=guessed,
                     policy=inner.policy.name)
    for r in snap.active.tolist():
        job = int(t.job_id[r])
        if r in snap.assignments:
            out.start[job] = None
        else:
            s = float(t.first_start[r])
            out.start[job] = s if math.isfinite(s) else None
        f = float(t.finish[r])
        out.finish[job] = f if math.isfinite(f) and t.status[r] == JobStatus.DONE else None
    if np.isnan(t.finish[snap.active]).any():
        out.complete = False
    out.wall_seconds = time.perf_counter() - wall0
    return out
