"""How running jobs take and leave their GPUs in the simulator: a decision's plan applied (starts,
stops, migrations, strategy relaunches, restart costs charged), the running rows and GPUs in use,
completions, runs ended by their lifecycle (failure, time limit), and partners left alone when a
pair's other job leaves. A mixin of :class:`tesserae.sim.engine.Simulator`, which owns the state
named below and the main loop.

**Stop latency** (``SimConfig.stop_latency``, 0 by default). A preempted or migrating job takes
that long to stop after the decision (SIGTERM, checkpoint, exit): it keeps its GPUs and makes no
progress meanwhile, while its attained service and executed time go on (the runtime charges a run
until it has ended). The rest of the plan waits for the stops, as the runtime's ``apply_plan`` does:
the jobs to start or move start when the stop latency is over (then they pay their restart
overhead), and no decision is taken in between. A job that ends meanwhile (a completion, a failed
or timed-out run) is left out of the plan, and a job the plan paired with it starts alone. With
``stop_signal_delay`` the stopped job still runs, and makes progress, for that first part of the
stop latency (the stop has not reached it yet: a signal on its way), and none for the rest.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.sim import restart_costs
from tesserae.sim.interface import SimConfig
from tesserae.sim.lifecycle import SimLifecycle
from tesserae.sim.rates import PlacementRates


class RunningJobs:
    """Mixin of the simulator: the running set, changed by decisions, completions and lifecycle ends.

    The simulator provides the table, cluster, scheduler, config, rates, the restart cost per row
    (``overhead``), the lifecycle (or None), the observer (or None) and the state kept here:
    ``assignments``, ``named_by``, ``active``, ``run_rows``, ``in_use``, ``shared_gpus``,
    ``strategy`` and the ``events`` count.
    """

    table: JobTable
    cluster: Cluster
    scheduler: Any
    config: SimConfig
    rates: PlacementRates
    overhead: np.ndarray
    lifecycle: SimLifecycle | None
    observer: Any
    assignments: dict[int, Assignment]
    named_by: dict[int, list[int]]
    active: dict[int, None]
    run_rows: np.ndarray
    in_use: int
    shared_gpus: int
    strategy: dict[int, str | None]
    events: int

    def _begin_stops(self, plan: Plan, now: float) -> float:
        """The stops of ``plan`` are asked at ``now``: those jobs hold their GPUs for the stop latency, without
        progress from when the stop reaches them (at once, or after the signal delay: ``_halt``); returns
        when the rest of the plan applies (``_apply(self._surviving(plan), end)``)."""
        latency = self.config.stop_latency
        if self.config.stop_signal_delay == 0:
            self._halt(plan)
        return now + latency

    def _halt(self, plan: Plan) -> None:
        """The stop reaches the jobs ``plan`` stops or moves: they make no progress until it is carried out."""
        t = self.table
        left = self.config.stop_latency - self.config.stop_signal_delay
        for r in (*plan.stopped, *plan.migrated):
            if r in self.assignments:
                t.overhead_left[r] = left  # time without progress, like a restart overhead

    def _surviving(self, plan: Plan) -> Plan:
        """``plan`` without the jobs that ended while its stops were carried out; a job paired with one
        of them runs alone."""
        ended = {r for r in (*plan.assignments, *plan.stopped) if r not in self.active}
        if not ended:
            return plan
        assignments = {}
        for r, a in plan.assignments.items():
            if r in ended:
                continue
            if a.partner is not None and a.partner in ended:
                a = Assignment(r, a.gpus, None, a.strategy)
            assignments[r] = a

        def kept(rows: list[int]) -> list[int]:
            return [r for r in rows if r not in ended]

        return Plan(plan.time, assignments, kept(plan.started), kept(plan.stopped), kept(plan.migrated),
                    [p for p in plan.pairs if p[0] not in ended and p[1] not in ended])

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
            restart_costs.charge(t, r, now, self.overhead, self.config.min_run_quantum)
        for r in plan.migrated:
            t.migrations[r] += 1
            restart_costs.charge(t, r, now, self.overhead, self.config.min_run_quantum)
            if c.gpu_type[previous[r].gpus[0]] != c.gpu_type[plan.assignments[r].gpus[0]]:
                t.type_switches[r] += 1
        strategy: dict[int, str | None] = {}
        changed: set[int] = set()
        if self.rates.strategies:
            strategy = {r: self.rates.strategy_of(a) for r, a in plan.assignments.items()}
            changed = {r for r, s in strategy.items() if self.strategy.get(r, s) != s}
            for r in changed:
                # Still running on the same GPUs, relaunched with another strategy: a restart.
                if r in previous and t.overhead_left[r] < self.overhead[r]:
                    restart_costs.charge(t, r, now, self.overhead, self.config.min_run_quantum)
                    t.strategy_changes[r] += 1
        shared = 0
        for r, a in plan.assignments.items():
            p = previous.get(r)
            if (p is not a and p != a) or r in changed or a.partner in changed:
                partner_strategy = None if a.partner is None else strategy.get(a.partner)
                t.rate[r] = self.rates.job_rate(a, strategy.get(r), partner_strategy)
            if a.partner is not None and r < a.partner:
                shared += min(int(t.num_gpus[r]), int(t.num_gpus[a.partner]))
        self.assignments = dict(plan.assignments)
        self.strategy = strategy
        self.shared_gpus = shared
        self._index_partners()
        self._refresh_running()

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
                t.rate[r] = self.rates.job_rate(alone, alone.strategy)
                self.shared_gpus -= min(int(t.num_gpus[r]), int(t.num_gpus[a.partner]))
                if observed:
                    self.observer.begin(now, np.array([r]), False)
