"""Discrete-event simulator: rounds plus arrival and completion events, restart overheads.

Between decisions every running job progresses at the rate the throughput model gives for its
placement (GPU type, consolidated or spread, alone or sharing, and the parallelism strategy it
and its partner were launched with). All running rows advance in one vectorised step; completions
inside a round are processed in time order, and a job whose partner finished speeds up at that
instant (keeping its strategy until the next decision). Starting, resuming or migrating a job, or
relaunching it with another parallelism strategy, costs the restart overhead, during which it
holds its GPUs and makes no progress: a fixed number of seconds (``restart_cost="fixed"``), or
each job type's start-up plus checkpoint bytes over the storage bandwidth, from the profile
(``restart_cost="job"``, see :mod:`tesserae.core.restart`). Stopping a preempted or migrating job
can take time too (``stop_latency``, 0 by default): it keeps its GPUs without progress until it has
stopped, and the decision's starts wait for it (:mod:`tesserae.sim.running`).

A time-slicing policy whose jobs' restart costs reach the round length could restart them round
after round without progress: refused unless a minimum run quantum is set
(:mod:`tesserae.sim.restart_costs`). Gavel's rounds: :mod:`tesserae.sim.gavel_rounds`. How a plan,
a completion or a lifecycle end changes the running set: :mod:`tesserae.sim.running`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec, JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.core.throughput import ThroughputModel
from tesserae.scheduler import Scheduler
from tesserae.sim import restart_costs
from tesserae.sim.gavel_rounds import micro_tasks
from tesserae.sim.interface import ProgressCallback, SimConfig, SimResult
from tesserae.sim.lifecycle import SimLifecycle
from tesserae.sim.rates import PlacementRates, never_progress
from tesserae.sim.running import RunningJobs


class SegmentObserver(Protocol):
    """Watches jobs run, segment by segment (a segment: one job on one placement, between changes).

    ``begin`` is called for rows whose segment starts (after a decision, ``decision`` True; or when
    a partner left), ``end`` for rows whose segment ends (before a decision, ``decision`` True; a
    completion, a failed run, or a partner leaving); the observer reads the rest from the simulator.
    """

    def attach(self, sim: Simulator) -> None: ...

    def begin(self, now: float, rows: np.ndarray, decision: bool) -> None: ...

    def end(self, now: float, rows: np.ndarray, decision: bool) -> None: ...


class Simulator(RunningJobs):
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
            self.rates.factor = factor
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
        self.observer: SegmentObserver | None = None
        self.config = config or SimConfig()
        self.table = table
        self._start: float | None = None
        t = self.table
        self.arrival_order = np.argsort(t.submit, kind="stable")
        too_big = t.num_gpus > cluster.num_gpus
        unrunnable = never_progress(t, cluster, self.model)  # no rate on any GPU type of this cluster
        t.status[too_big | unrunnable] = JobStatus.REJECTED
        self.rejections = {"too_large": int(too_big.sum()), "no_throughput_data": int(unrunnable.sum())}
        self.overhead = restart_costs.per_row(self.table, self.config, self.model)
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
        warning = restart_costs.thrashing(self.table, self.config, self.overhead, scheduler.policy)
        if warning is not None:
            self.warnings.append(warning)
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
        #: How fast each job runs where it is placed (the truth's rates, each job's factor).
        self.rates = PlacementRates(t, cluster, self.model, hidden=truth is not None)
        #: The strategy each running job was launched with (``rates.strategies``: some job has any).
        self.strategy: dict[int, str | None] = {}
        #: A decision's plan waiting for its stops (stop latency), and when they are carried out.
        self._waiting_plan: Plan | None = None
        self._stops_end: float | None = None

    @property
    def rate_factor(self) -> np.ndarray:
        """Each job's factor on its class's true rates (and its work)."""
        return self.rates.factor

    @property
    def stalled_runs(self) -> int:
        """Runs placed where the truth gives no rate (only when the truth is hidden from the scheduler)."""
        return self.rates.stalled_runs

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
            t.rate[r] = rates.get(r) or sim.rates.job_rate(a)
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
            decided = now
            if self._waiting_plan is not None:
                now, finished, wake = self._stops_done(decided)
                done_count += finished
                if wake or (not self.assignments and self._peek_arrival() is None):
                    continue  # decide at once, as the runtime does once a plan is applied
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
            stop = max(decided + R, now)  # the round counts from its decision, as the runtime's does
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
        if self.config.stop_latency > 0 and (plan.stopped or plan.migrated):
            # The stops take their time first; the rest of the plan waits for them (``_stops_done``).
            self._waiting_plan, self._stops_end = plan, self._begin_stops(plan, now)
            if self.observer is not None:
                self.observer.begin(now, self.run_rows, False)
        else:
            self._apply(plan, now)
            if self.observer is not None:
                self.observer.begin(now, self.run_rows, True)
        self._record_timeline(now)

    def _record_timeline(self, now: float) -> None:
        queued = len(self.active) - len(self.assignments)
        self._timeline.append((now, self.in_use, queued, len(self.assignments)))

    def _stops_done(self, decided: float) -> tuple[float, int, bool]:
        """Runs the jobs on until the stops asked at ``decided`` are carried out, then applies the rest
        of that decision's plan. Returns (now, jobs ended meanwhile, whether an event-driven run must
        decide at once: a job ended, or the policy had an event, while the stops were carried out)."""
        plan, end = self._waiting_plan, self._stops_end
        assert plan is not None and end is not None
        self._waiting_plan = self._stops_end = None
        events = self.events
        now, finished = decided, 0
        if self.config.stop_signal_delay > 0:  # the jobs run on until the stop reaches them
            now, finished = self._run_until(now, decided + self.config.stop_signal_delay, stop_at_completion=False)
            self._halt(plan)
        now, more = self._run_until(now, end, stop_at_completion=False)
        finished += more
        if self.observer is not None:
            self.observer.end(now, self.run_rows, False)
        self._apply(self._surviving(plan), now)
        if self.observer is not None:
            self.observer.begin(now, self.run_rows, True)
        self._record_timeline(now)
        if not self.config.event_driven:
            return now, finished, False
        if self.events > events:
            return now, finished, True
        active = np.fromiter(self.active, dtype=np.int64, count=len(self.active))
        return now, finished, decided < self.scheduler.policy.next_event(self.table, active, self.run_rows, now) <= now

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
        """One Gavel round (:mod:`tesserae.sim.gavel_rounds`): every running unit runs one micro-task;
        returns (round end, completions)."""
        t, rows = self.table, self.run_rows
        ov, remaining = t.overhead_left[rows], t.work[rows] - t.progress[rows]
        partner = np.array([-1 if (p := self.assignments[r].partner) is None else p for r in rows.tolist()],
                           dtype=np.int64)
        steps, paid, dur, unit_end = micro_tasks(rows, partner, t.rate[rows], remaining, ov, self.config.round_seconds)
        finishing = steps >= remaining
        t.progress[rows] += steps
        t.overhead_left[rows] = ov - paid
        t.attained[rows] += t.num_gpus[rows] * dur
        t.executed[rows] += dur
        # A pair holds the host's GPUs until its micro-task ends; count them once.
        hosts = (partner < 0) | (rows < partner)
        self.busy_gpu_seconds += float((t.num_gpus[rows] * unit_end)[hosts].sum())
        end = now + float(unit_end.max())
        done = 0
        for finish in sorted(set(unit_end[finishing].tolist())):
            who = rows[finishing & (unit_end == finish)]
            self._complete(who, now + finish)
            done += int(who.size)
        return end, done

    def _result(self, wall0: float) -> SimResult:
        tl = np.array(self._timeline, dtype=np.float64).reshape(-1, 4)
        timeline = {"time": tl[:, 0], "gpus_in_use": tl[:, 1], "queued": tl[:, 2], "running": tl[:, 3]}
        return SimResult(self.table, self.cluster, self.config, self.decision_seconds, timeline,
                         self.busy_gpu_seconds, time.perf_counter() - wall0, self.events,
                         self.scheduler.summary(), self.rejections,
                         restart_costs.summary(self.table, self.config, self.model, self.overhead), list(self.warnings))
