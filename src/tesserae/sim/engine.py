"""Discrete-event simulator: rounds plus arrival and completion events, restart overheads.

Between decisions every running job progresses at the rate the throughput model gives for its
placement (GPU type, consolidated or spread, alone or sharing, and the parallelism strategy it
and its partner were launched with). All running rows advance in one vectorised step; completions
inside a round are processed in time order, and a job whose partner finished speeds up at that
instant (keeping its strategy until the next decision). Starting, resuming or migrating a job, or
relaunching it with another parallelism strategy, costs the restart overhead, during which it
holds its GPUs and makes no progress: a fixed number of seconds (``restart_cost="fixed"``), or
each job type's start-up plus checkpoint bytes over the storage bandwidth, from the profile
(``restart_cost="job"``, see :mod:`tesserae.core.restart`).

A policy that preempts running jobs by priority, with restart costs at or above the round length,
can restart a job every round before it makes progress. The simulator warns when any job's cost
reaches the round length and refuses to run such a policy then (:class:`InputError`) unless a
minimum run quantum is set (a (re)started job is kept running until it has run ``min_run_quantum``
times its restart cost after paying it) or ``allow_thrashing`` says to run it anyway.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec, JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.core.restart import DEFAULT_STORAGE_GBPS
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import runnable
from tesserae.scheduler import Scheduler
from tesserae.sim.lifecycle import SimLifecycle

ProgressCallback = Callable[[float, int, int], None]
RESTART_COSTS = ("fixed", "job")
#: Iterations/s of a job placed where its true rate is 0 (out of memory next to its partner, say)
#: when the scheduler does not see the true rates: it holds its GPUs and makes no progress.
STALL_RATE = 1e-9


class SegmentObserver(Protocol):
    """Watches jobs run, segment by segment (a segment: one job on one placement, between changes).

    ``begin`` is called for rows whose segment starts (after a decision, ``decision`` True; or when
    a partner left), ``end`` for rows whose segment ends (before a decision, ``decision`` True; a
    completion, a failed run, or a partner leaving); the observer reads the rest from the simulator.
    """

    def attach(self, sim: Simulator) -> None: ...

    def begin(self, now: float, rows: np.ndarray, decision: bool) -> None: ...

    def end(self, now: float, rows: np.ndarray, decision: bool) -> None: ...


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

    def __post_init__(self) -> None:
        if self.event_driven and self.gavel_rounds:
            raise ValueError("event-driven decisions and Gavel's rounds exclude each other")
        if self.restart_cost not in RESTART_COSTS:
            raise ValueError(f"restart_cost must be one of {', '.join(RESTART_COSTS)}, got {self.restart_cost!r}")
        if not (math.isfinite(self.storage_gbps) and self.storage_gbps > 0):
            raise ValueError(f"storage_gbps must be positive, got {self.storage_gbps!r}")
        if not (math.isfinite(self.min_run_quantum) and self.min_run_quantum >= 0):
            raise ValueError(f"min_run_quantum must be >= 0, got {self.min_run_quantum!r}")


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
    #: Which restart cost was charged, its figures and provenance (see ``Simulator.restart_summary``).
    restart: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class Simulator:
    """Replays ``specs`` on ``cluster`` under ``scheduler``. One instance, one run.

    By default jobs progress at the rates of the scheduler's own model (it sees the truth: the
    oracle). With ``truth`` they progress at that model's rates while the scheduler decides on its
    own (learned or no information); a placement the truth gives no rate then stalls the job
    instead of stopping the run. ``rate_factor`` scales each job's true rates and its work alike
    (jobs of one type differ; the trace's durations stay). ``observer`` watches every segment run.
    """

    def __init__(self, specs: Sequence[JobSpec], cluster: Cluster, scheduler: Scheduler,
                 config: SimConfig | None = None, *, truth: ThroughputModel | None = None,
                 rate_factor: np.ndarray | None = None, observer: SegmentObserver | None = None) -> None:
        self._setup(JobTable(specs), cluster, scheduler, config, truth)
        self.table.set_reference_rates(self.model)
        if rate_factor is not None:
            factor = np.asarray(rate_factor, dtype=np.float64)
            if factor.shape != (self.table.n,) or not (np.isfinite(factor) & (factor > 0)).all():
                raise ValueError("rate_factor must hold one finite positive factor per job")
            self.rate_factor = factor
            self.table.work *= factor
            self.table.ref_rate *= factor
        self.observer = observer
        if observer is not None:
            observer.attach(self)

    def _setup(self, table: JobTable, cluster: Cluster, scheduler: Scheduler, config: SimConfig | None,
               truth: ThroughputModel | None = None) -> None:
        self.cluster, self.scheduler = cluster, scheduler
        #: The rates jobs really run at (the scheduler's own model unless it is kept from the truth).
        self.model = truth if truth is not None else scheduler.model
        self.truth_hidden = truth is not None
        self.rate_factor = np.ones(table.n)
        self.observer: SegmentObserver | None = None
        #: Runs placed where the truth gives no rate (only when the truth is hidden from the scheduler).
        self.stalled_runs = 0
        self.config = config or SimConfig()
        self.table = table
        self._start: float | None = None
        t = self.table
        self.arrival_order = np.argsort(t.submit, kind="stable")
        too_big = t.num_gpus > cluster.num_gpus
        t.status[too_big] = JobStatus.REJECTED
        # A job the profile gives no rate on any GPU type of this cluster could never progress.
        unrunnable = np.zeros(t.n, dtype=bool)
        for ti, k in set(zip(t.type_idx.tolist(), t.num_gpus.tolist(), strict=True)):
            if k <= cluster.num_gpus and not any(runnable(self.model, t.types[ti], k, g) for g in cluster.gpu_types):
                unrunnable |= (t.type_idx == ti) & (t.num_gpus == k)
        t.status[unrunnable] = JobStatus.REJECTED
        self.rejections = {"too_large": int(too_big.sum()), "no_throughput_data": int(unrunnable.sum())}
        self.overhead = self._restart_costs()
        if not scheduler.placement.honours_gpu_type and any(s.gpu_type for s in t.specs):
            raise InputError(f"placement '{scheduler.placement.name}' chooses GPU types by throughput and does not "
                             "honour a job's GPU type; use a type-blind placement (consolidated, first-fit, "
                             "tiresias, yarn)", field="gpu_type")
        #: Time limits, failures and retries, dependencies (None: no job of the trace has controls).
        self.lifecycle = SimLifecycle.build(t)
        if self.lifecycle is not None and self.config.gavel_rounds:
            raise InputError("the trace has lifecycle controls (time limits, retries, dependencies), which Gavel's "
                             "rounds do not model; use another policy or a trace without them", field="time_limit")
        self.warnings: list[str] = []
        self._check_restart_costs()
        self.assignments: dict[int, Assignment] = {}
        #: Rows whose assignment names a given row as its partner (``_unpair`` reads it).
        self.named_by: dict[int, list[int]] = {}
        self.active: dict[int, None] = {}  # insertion-ordered set of QUEUED or RUNNING rows
        self.run_rows = np.empty(0, dtype=np.int64)
        self.in_use = 0
        self.shared_gpus = 0
        self.busy_gpu_seconds = 0.0
        self.events = 0
        self.decision_seconds: list[float] = []
        self._timeline: list[tuple[float, int, int, int]] = []
        self._next_arrival = 0
        self._rate_cache: dict[tuple[Any, ...], float] = {}
        # The strategy each running job was launched with (the plan's, else the model's choice);
        # tracked only when some job of the run has strategies in the profile.
        self.strategy: dict[int, str | None] = {}
        self._strategy_cache: dict[tuple[Any, ...], str | None] = {}
        classes = set(zip(t.type_idx.tolist(), t.num_gpus.tolist(), strict=True))
        self._strategies = any(self.model.strategy_for(t.types[ti], k) is not None for ti, k in classes)
        self._gpu_node: list[int] = cluster.gpu_node.tolist()
        self._type_node_size = {ti: int(cluster.node_num_gpus[cluster.node_type == ti].max())
                                for ti in range(len(cluster.gpu_types))}

    @classmethod
    def from_state(cls, table: JobTable, cluster: Cluster, scheduler: Scheduler, config: SimConfig | None,
                   now: float, active: np.ndarray, assignments: dict[int, Assignment],
                   rates: dict[int, float]) -> Simulator:
        """A simulation that goes on from a live state at ``now`` (the runtime's predictions).

        ``table`` holds every job with its attained service and progress; ``active`` rows are
        submitted and unfinished; ``assignments`` say where the running ones are, ``rates`` how
        fast they progress (measured; the model's rate for a row not given). Running jobs keep
        their GPUs without a restart cost unless the scheduler moves or stops them.
        """
        sim = cls.__new__(cls)
        sim._setup(table, cluster, scheduler, config)
        t = table
        act = np.asarray(active, dtype=np.int64)
        t.status[act] = JobStatus.QUEUED
        sim._next_arrival = int(sim.arrival_order.size)  # nothing arrives later: the snapshot is all
        for r in act.tolist():
            sim.active[r] = None
        for r, a in assignments.items():
            t.status[r] = JobStatus.RUNNING
            t.overhead_left[r] = 0.0
            t.rate[r] = rates.get(r) or sim._job_rate(a)
        sim.assignments = dict(assignments)
        sim.shared_gpus = sum(min(int(t.num_gpus[r]), int(t.num_gpus[a.partner])) for r, a in assignments.items()
                              if a.partner is not None and r < a.partner)
        sim._index_partners()
        sim._refresh_running()
        sim._start = now
        return sim

    def reject(self, mask: np.ndarray, reason: str) -> None:
        """Jobs that can never run here for a reason the engine cannot see (a queue rule): counted."""
        t = self.table
        new = mask & (t.status == JobStatus.PENDING)
        t.status[new] = JobStatus.REJECTED
        self.rejections[reason] = self.rejections.get(reason, 0) + int(new.sum())

    # ----------------------------------------------------------------------------- restart costs
    def _restart_costs(self) -> np.ndarray:
        """Seconds each row's (re)start costs; 0 for rejected rows, which never start."""
        t, cfg = self.table, self.config
        live = t.status != JobStatus.REJECTED
        if cfg.restart_cost == "fixed":
            by_type = cfg.overhead_by_type
            cost = np.array([by_type.get(t.job_type(r), cfg.restart_overhead) for r in range(t.n)]) \
                if by_type else np.full(t.n, cfg.restart_overhead)
            return np.where(live, cost, 0.0)
        cost = np.zeros(t.n)
        seconds: dict[tuple[int, int], float] = {}
        for r in np.flatnonzero(live).tolist():
            key = (int(t.type_idx[r]), int(t.num_gpus[r]))
            if key not in seconds:
                seconds[key] = self.model.restart_seconds(t.types[key[0]], key[1], cfg.storage_gbps)
            cost[r] = seconds[key]
        return cost

    def restart_summary(self) -> dict[str, Any]:
        """Which restart cost this run charges, its range, and whether it was measured or modelled."""
        t, cfg = self.table, self.config
        live = np.flatnonzero(t.status != JobStatus.REJECTED)
        costs = self.overhead[live]
        out: dict[str, Any] = {
            "restart_cost": cfg.restart_cost,
            "restart_seconds_mean": float(costs.mean()) if costs.size else None,
            "restart_seconds_max": float(costs.max()) if costs.size else None,
            "min_run_quantum": cfg.min_run_quantum,
        }
        if cfg.restart_cost == "fixed":
            return {**out, "restart_cost_kind": "fixed (configured)"}
        types = sorted({t.job_type(r) for r in live.tolist()})
        cost_of = {jt: self.model.restart_cost(jt) for jt in types}
        measured = [jt for jt in types if (c := cost_of[jt]) is not None and c.measured]
        modelled = [jt for jt in types if jt not in measured]
        if not modelled:
            kind = "measured"
        elif not measured:
            kind = "model (not a measurement)"
        else:
            kind = f"mixed: measured for {len(measured)} job type(s), model (not a measurement) for {len(modelled)}"
        by_type = {jt: float(c.seconds(cfg.storage_gbps)) for jt, c in cost_of.items() if c is not None}
        return {**out, "restart_cost_kind": kind, "storage_gbps": cfg.storage_gbps,
                "restart_seconds_by_type": by_type}

    def _check_restart_costs(self) -> None:
        """Warn when a restart cost reaches the round length; refuse time-slicing policies then."""
        t, cfg = self.table, self.config
        R = cfg.round_seconds
        live = t.status != JobStatus.REJECTED
        reach = np.flatnonzero(live & (self.overhead >= R))
        if reach.size == 0:
            return
        types = sorted({t.job_type(r) for r in reach.tolist()})
        shown = ", ".join(types[:5]) + (f" and {len(types) - 5} more" if len(types) > 5 else "")
        message = (f"{reach.size} of {int(live.sum())} jobs have a restart cost at or above the round length "
                   f"({R:g} s; up to {float(self.overhead[reach].max()):g} s, job types {shown})")
        policy = self.scheduler.policy
        if policy.time_slicing and cfg.min_run_quantum <= 0 and not cfg.allow_thrashing:
            raise InputError(f"{message}: '{policy.name}' preempts running jobs by priority and would restart "
                             "them round after round without progress; set --min-run-quantum K (a restarted job "
                             "runs K times its restart cost before it may be preempted), a longer "
                             "--round-seconds, or --allow-thrashing to run it anyway")
        self.warnings.append(message + ("; time-slicing policies can thrash at such costs"
                                        if cfg.min_run_quantum <= 0 else ""))

    # ----------------------------------------------------------------------------- main loop
    def run(self, progress: ProgressCallback | None = None, until: float | None = None) -> SimResult:
        """Simulate until every job is done (or cannot run), or until simulated time ``until``."""
        wall0 = time.perf_counter()
        t = self.table
        if t.n == 0:
            return self._result(wall0)
        t0 = float(t.submit.min()) if self._start is None else self._start
        now = t0
        R = self.config.round_seconds
        done_count = 0
        total = int((t.status != JobStatus.REJECTED).sum())
        round_ended = False  # Gavel's rounds: a round just ended, so Gavel decides even with no jobs
        while until is None or now < until:
            self._admit_arrivals(now)
            if not self.active and not round_ended:
                nxt = self._peek_arrival()
                if nxt is None:
                    break
                exact = self.config.event_driven or self.config.gavel_rounds
                now = nxt if exact else t0 + math.ceil((nxt - t0) / R - 1e-12) * R
                continue
            self._decide(now)
            if not self.assignments and self._peek_arrival() is None:
                # Nothing runs and nothing will arrive: a policy that holds jobs back (Gavel's
                # re-solve interval) may let them go now; otherwise they can never run here.
                if self.scheduler.policy.on_idle(now):
                    self._decide(now)
                if not self.assignments:
                    break
            if self.config.gavel_rounds:
                round_ended = bool(self.assignments)
                if self.assignments:
                    now, finished = self._gavel_round(now)
                    done_count += finished
                else:
                    nxt = self._peek_arrival()
                    assert nxt is not None
                    now = max(now, nxt)
                if progress is not None:
                    progress(now - t0, done_count, total)
                continue
            stop = now + R
            if self.config.event_driven:
                nxt = self._peek_arrival()
                if nxt is not None:
                    stop = min(stop, max(nxt, now))
                active = np.fromiter(self.active, dtype=np.int64, count=len(self.active))
                ev = self.scheduler.policy.next_event(t, active, self.run_rows, now)
                if ev > now:
                    stop = min(stop, ev)
            elif not self.assignments:
                # Idle cluster with a queue that cannot start yet: jump to the round of the next arrival.
                nxt = self._peek_arrival()
                assert nxt is not None
                stop = max(stop, t0 + math.ceil((nxt - t0) / R - 1e-12) * R)
            now, finished = self._run_until(now, stop, stop_at_completion=self.config.event_driven)
            done_count += finished
            if progress is not None:
                progress(now - t0, done_count, total)
        return self._result(wall0)

    # ----------------------------------------------------------------------------- steps
    def _peek_arrival(self) -> float | None:
        """The next arrival: a submission, or a retry whose backoff ends."""
        i = self._next_arrival
        order = self.arrival_order
        while i < order.size and self.table.status[order[i]] == JobStatus.REJECTED:
            i += 1
        self._next_arrival = i
        nxt = float(self.table.submit[order[i]]) if i < order.size else None
        retry = None if self.lifecycle is None else self.lifecycle.next_release()
        return retry if nxt is None else nxt if retry is None else min(nxt, retry)

    def _admit_arrivals(self, now: float) -> None:
        t, order = self.table, self.arrival_order
        i = self._next_arrival
        while i < order.size and t.submit[order[i]] <= now + 1e-9:
            row = int(order[i])
            if t.status[row] == JobStatus.PENDING:
                t.status[row] = JobStatus.QUEUED
                if self.lifecycle is None or self.lifecycle.arrive(row, now)[0]:
                    self.active[row] = None
            i += 1
        self._next_arrival = i
        if self.lifecycle is not None:
            for row in self.lifecycle.releases(now):  # retries whose backoff is over
                self.active[row] = None

    def _decide(self, now: float) -> None:
        active = np.fromiter(self.active, dtype=np.int64, count=len(self.active))
        if self.observer is not None:
            self.observer.end(now, self.run_rows, True)
        c0 = time.perf_counter()
        plan = self.scheduler.decide(now, self.table, active, self.assignments)
        self.decision_seconds.append(time.perf_counter() - c0)
        self.events += 1
        self._apply(plan, now)
        if self.observer is not None:
            self.observer.begin(now, self.run_rows, True)
        queued = len(self.active) - len(self.assignments)
        self._timeline.append((now, self.in_use, queued, len(self.assignments)))

    def _apply(self, plan: Plan, now: float) -> None:
        t, c = self.table, self.cluster
        previous = self.assignments
        for r in plan.stopped:
            t.status[r] = JobStatus.QUEUED
            t.preemptions[r] += 1
            t.last_stop[r] = now
            t.rate[r] = 0.0
            t.overhead_left[r] = 0.0
            self.strategy.pop(r, None)
        for r in plan.started:
            t.status[r] = JobStatus.RUNNING
            if math.isnan(t.first_start[r]):
                t.first_start[r] = now
            t.last_start[r] = now
            self._charge_restart(r, now)
        for r in plan.migrated:
            t.migrations[r] += 1
            self._charge_restart(r, now)
            if c.gpu_type[previous[r].gpus[0]] != c.gpu_type[plan.assignments[r].gpus[0]]:
                t.type_switches[r] += 1
        strategy: dict[int, str | None] = {}
        changed: set[int] = set()
        if self._strategies:
            strategy = {r: self._strategy_of(a) for r, a in plan.assignments.items()}
            changed = {r for r, s in strategy.items() if self.strategy.get(r, s) != s}
            for r in changed:
                # Still running on the same GPUs, relaunched with another strategy: a restart.
                if r in previous and t.overhead_left[r] < self.overhead[r]:
                    self._charge_restart(r, now)
                    t.strategy_changes[r] += 1
        shared = 0
        for r, a in plan.assignments.items():
            p = previous.get(r)
            if (p is not a and p != a) or r in changed or a.partner in changed:
                t.rate[r] = self._job_rate(a, strategy.get(r), None if a.partner is None else strategy.get(a.partner))
            if a.partner is not None and r < a.partner:
                shared += min(int(t.num_gpus[r]), int(t.num_gpus[a.partner]))
        self.assignments = dict(plan.assignments)
        self.strategy = strategy
        self.shared_gpus = shared
        self._index_partners()
        self._refresh_running()

    def _charge_restart(self, row: int, now: float) -> None:
        """A (re)start of ``row`` at ``now`` (start, resume, migration, strategy change): its restart
        cost, and the minimum run quantum that protects it from preemption until it has paid off."""
        t = self.table
        t.overhead_left[row] = self.overhead[row]
        if self.config.min_run_quantum > 0:
            t.hold_until[row] = now + self.overhead[row] * (1.0 + self.config.min_run_quantum)

    def _strategy_of(self, a: Assignment) -> str | None:
        """The strategy the job runs with: the plan's, else the one the model assumes for its context."""
        if a.strategy is not None:
            return a.strategy
        t = self.table
        partner = None if a.partner is None else (int(t.type_idx[a.partner]), int(t.num_gpus[a.partner]))
        key = (int(t.type_idx[a.row]), int(t.num_gpus[a.row]), partner)
        if key not in self._strategy_cache:
            p = None if partner is None else (t.types[partner[0]], partner[1])
            self._strategy_cache[key] = self.model.strategy_for(t.types[key[0]], key[1], p)
        return self._strategy_cache[key]

    def _refresh_running(self, ended: np.ndarray | None = None) -> None:
        """Running rows and GPUs in use; a pair shares the smaller job's GPUs (a subset of the larger's).

        After a decision they are read from the assignments; after ``ended`` rows left them, those
        are dropped from the array (the same rows in the same order, without a pass over the dict:
        on a large cluster jobs end thousands of times a round).
        """
        if ended is None:
            self.run_rows = np.fromiter(self.assignments, dtype=np.int64, count=len(self.assignments))
        else:
            rows = self.run_rows
            self.run_rows = rows[rows != ended[0]] if ended.size == 1 else rows[~np.isin(rows, ended)]
        self.in_use = int(self.table.num_gpus[self.run_rows].sum()) - self.shared_gpus

    def _rate(self, a: Assignment, strategy: str | None = None, partner_strategy: str | None = None) -> float:
        t, c = self.table, self.cluster
        k = len(a.gpus)
        ti = int(c.gpu_type[a.gpus[0]])
        node_of = self._gpu_node
        nodes = len({node_of[g] for g in a.gpus})
        consolidated = nodes <= math.ceil(k / self._type_node_size[ti])
        partner = None if a.partner is None else (int(t.type_idx[a.partner]), int(t.num_gpus[a.partner]))
        key = (int(t.type_idx[a.row]), k, ti, consolidated, partner, strategy, partner_strategy)
        rate = self._rate_cache.get(key)
        if rate is None:
            p = None if partner is None else (t.types[partner[0]], partner[1])
            rate = self.model.rate(t.types[key[0]], k, c.gpu_types[ti], consolidated, p, strategy, partner_strategy)
            if not rate > 0:
                if not self.truth_hidden:
                    raise RuntimeError(f"placement gave job {t.job_id[a.row]} a placement with rate {rate}")
                rate = 0.0
            self._rate_cache[key] = rate
        return rate

    def _job_rate(self, a: Assignment, strategy: str | None = None, partner_strategy: str | None = None) -> float:
        """The job's own rate on ``a``: its class's true rate times its factor (a stall where that is 0)."""
        rate = self._rate(a, strategy, partner_strategy) * self.rate_factor[a.row]
        if rate > 0:
            return float(rate)
        self.stalled_runs += 1
        return STALL_RATE

    def _advance(self, dt: float) -> None:
        if dt <= 0:
            return
        self.busy_gpu_seconds += self.in_use * dt
        rows = self.run_rows
        if rows.size == 0:
            return
        t = self.table
        ov = t.overhead_left[rows]
        paid = np.minimum(ov, dt)
        t.progress[rows] += t.rate[rows] * (dt - paid)
        t.overhead_left[rows] = ov - paid
        t.attained[rows] += t.num_gpus[rows] * dt
        t.executed[rows] += dt

    def _run_until(self, now: float, stop: float, stop_at_completion: bool) -> tuple[float, int]:
        t = self.table
        finished = 0
        while self.run_rows.size:
            rows = self.run_rows
            to_done = t.overhead_left[rows] + (t.work[rows] - t.progress[rows]) / t.rate[rows]
            # the lifecycle's cut: a failing run, or the time limit (inf when the trace has none)
            to_cut = to_done if self.lifecycle is None else self.lifecycle.cut[rows] - t.executed[rows]
            left = np.minimum(to_done, to_cut)
            i = int(np.argmin(left))
            if now + left[i] > stop:
                break
            self._advance(float(left[i]))
            now += float(left[i])
            done_now = to_done <= left[i] + 1e-9
            done = rows[done_now]
            cut = rows[(to_cut <= left[i] + 1e-9) & ~done_now]
            if done.size:
                self._complete(done, now)
            if cut.size:
                finished += self._end_runs(cut, now)
            finished += int(done.size)
            if stop_at_completion:
                return now, finished
        self._advance(stop - now)
        return stop, finished

    def _gavel_round(self, now: float) -> tuple[float, int]:
        """One Gavel round: every running unit runs one micro-task; returns (round end, completions).

        A job runs floor(rate x (round - overhead)) iterations (Gavel's ``int(throughput *
        time_per_iteration)``), or what it has left, and then waits for the round to end. Both
        members of a pair keep their paired rate for the whole micro-task, and a pair's micro-task
        (its jobs' completion time too) ends when its slower member's does, as in Gavel.
        """
        t = self.table
        R = self.config.round_seconds
        rows = self.run_rows
        ov = t.overhead_left[rows]
        paid = np.minimum(ov, R)
        budget = R - paid
        rate = t.rate[rows]
        remaining = t.work[rows] - t.progress[rows]
        full = rate * budget
        steps = np.where(full >= 1.0, np.floor(full), full)
        steps = np.minimum(steps, remaining)
        finishing = steps >= remaining
        dur = paid + steps / rate
        unit_end = dur.copy()
        pos = {int(r): i for i, r in enumerate(rows.tolist())}
        for i, r in enumerate(rows.tolist()):
            partner = self.assignments[r].partner
            if partner is not None and partner in pos:
                unit_end[i] = max(dur[i], dur[pos[partner]])
        t.progress[rows] += steps
        t.overhead_left[rows] = ov - paid
        t.attained[rows] += t.num_gpus[rows] * dur
        t.executed[rows] += dur
        # A pair holds the host's GPUs until its micro-task ends; count them once.
        hosts = np.array([self.assignments[r].partner is None or r < self.assignments[r].partner
                          for r in rows.tolist()], dtype=bool)
        self.busy_gpu_seconds += float((t.num_gpus[rows] * unit_end)[hosts].sum())
        end = now + float(unit_end.max())
        done = 0
        for finish in sorted(set(unit_end[finishing].tolist())):
            who = rows[finishing & (unit_end == finish)]
            self._complete(who, now + finish)
            done += int(who.size)
        return end, done

    def _complete(self, rows: np.ndarray, now: float) -> None:
        t = self.table
        if self.observer is not None:
            self.observer.end(now, rows, False)
        for r in rows.tolist():
            t.status[r] = JobStatus.DONE
            t.finish[r] = now
            t.progress[r] = t.work[r]
            t.overhead_left[r] = 0.0
            t.rate[r] = 0.0
            t.last_stop[r] = now
            del self.assignments[r]
            del self.active[r]
            self.scheduler.policy.on_finish(t, r, now)
        self._unpair(set(rows.tolist()), now)
        self.events += int(rows.size)
        self._refresh_running(rows)
        self._dependents_of(rows.tolist(), now)

    def _end_runs(self, rows: np.ndarray, now: float) -> int:
        """Runs that reached their lifecycle cut (a failure, the time limit): each job is retried later
        or ends failed / timed out. Returns how many jobs ended."""
        t, lc = self.table, self.lifecycle
        assert lc is not None
        if self.observer is not None:
            self.observer.end(now, rows, False)
        final = []
        for r in rows.tolist():
            outcome = lc.end_run(r, now)
            t.rate[r] = 0.0
            t.overhead_left[r] = 0.0
            t.last_stop[r] = now
            del self.assignments[r]
            del self.active[r]
            if outcome is None:
                t.status[r] = JobStatus.QUEUED  # back after its backoff (``_admit_arrivals``)
            else:
                t.status[r] = JobStatus.DONE
                t.outcome[r] = outcome
                t.finish[r] = now
                self.scheduler.policy.on_finish(t, r, now)
                final.append(r)
        self._unpair(set(rows.tolist()), now)
        self.events += int(rows.size)
        self._refresh_running(rows)
        self._dependents_of(final, now)
        return len(final)

    def _dependents_of(self, rows: list[int], now: float) -> None:
        """Jobs that waited on ``rows`` (now ended): queue those now free to start."""
        if self.lifecycle is None or not rows:
            return
        ready, _cancelled = self.lifecycle.ended(rows, now)
        for r in ready:
            self.active[r] = None

    def _index_partners(self) -> None:
        """``named_by`` from the assignments: which rows name each row as their partner."""
        named: dict[int, list[int]] = {}
        for r, a in self.assignments.items():
            if a.partner is not None:
                named.setdefault(a.partner, []).append(r)
        self.named_by = named

    def _unpair(self, done: set[int], now: float) -> None:
        """The jobs in ``done`` left their GPUs (their strategy goes); those whose partner left run alone
        now, at their own rate."""
        t = self.table
        for r in done:
            self.strategy.pop(r, None)
        if not self.shared_gpus:
            return
        # Only the rows that named a finished row as partner, not every assignment: each is handled
        # on its own, so the order does not matter.
        for d in done:
            for r in self.named_by.pop(d, ()):
                a = self.assignments.get(r)
                if a is None or a.partner != d:
                    continue
                # Alone until the next decision, still launched with the strategy it had.
                observed = self.observer is not None and r not in done
                if observed:
                    self.observer.end(now, np.array([r]), False)
                alone = Assignment(r, a.gpus, None, self.strategy.get(r, a.strategy))
                self.assignments[r] = alone
                t.rate[r] = self._job_rate(alone, alone.strategy)
                self.shared_gpus -= min(int(t.num_gpus[r]), int(t.num_gpus[a.partner]))
                if observed:
                    self.observer.begin(now, np.array([r]), False)

    def _result(self, wall0: float) -> SimResult:
        tl = np.array(self._timeline, dtype=np.float64).reshape(-1, 4)
        timeline = {"time": tl[:, 0], "gpus_in_use": tl[:, 1], "queued": tl[:, 2], "running": tl[:, 3]}
        return SimResult(self.table, self.cluster, self.config, self.decision_seconds, timeline,
                         self.busy_gpu_seconds, time.perf_counter() - wall0, self.events,
                         self.scheduler.summary(), self.rejections, self.restart_summary(), list(self.warnings))
