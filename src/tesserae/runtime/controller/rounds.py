"""Decision rounds: store -> JobTable -> ``Scheduler.decide`` -> Plan, exactly as the simulator calls it.

Each decision rebuilds a ``JobTable`` from the store (row i = the i-th job ever submitted, so
rows are stable across rounds and restarts), computes attained service and executed time from
the recorded run intervals (an open run counts up to now), takes the progress each job reported
(iterations), leaves out the waiting jobs a lifecycle control blocks (``lifecycle.blocked``: held,
a dependency, a retry's backoff), and calls ``Scheduler.decide`` with the running jobs' current assignments.

Before it, the executor's new view of the cluster is taken, if it has one (nodes joined or left):
the Scheduler is rebuilt on it (same policy and placement objects, so their per-job state
carries over) and the running jobs' GPU ids are remapped onto it; and a tenant queue config
replaced over the API (``tenancy``) is put into the scheduler. After it, the predictor (if any)
takes a copy of the state to predict start times from. Applying the Plan is ``apply``'s.

With learned throughputs (``learning``), the jobs are registered with the estimator and the
round's progress windows become observations before the decision (under the estimator's lock), the
scheduler decides on its view (``LearnedScheduler``), the runs that explore are noted after it, and
the predictor simulates the view, whose rates are the learned ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import Controls, JobSpec, JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.core.throughput import ThroughputModel
from tesserae.runtime.controller import lifecycle, node_fences
from tesserae.runtime.controller.job_rows import JobRows
from tesserae.runtime.controller.runs import Live, RunBook
from tesserae.runtime.executor.protocol import Executor
from tesserae.runtime.store import allocations
from tesserae.runtime.store.database import ACTIVE_STATES, FINAL_STATES, Store
from tesserae.scheduler import Scheduler
from tesserae.scheduler_learned import LearnedScheduler

if TYPE_CHECKING:
    from tesserae.runtime.controller.learning import RuntimeLearning
    from tesserae.runtime.controller.prediction import Predictor
    from tesserae.runtime.controller.tenancy import RuntimeQueues

#: Work (iterations) of a job that declared none: real schedulers such as Tiresias do not need it.
UNKNOWN_WORK = 1e12


class RuntimeTable(JobTable):
    """A JobTable whose job-type list is given (append-only across rounds) instead of derived.

    Row i is the i-th job ever submitted; the controller re-initialises it in place as jobs arrive,
    so its identity (which per-table caches key on) stays the same for the controller's life.
    """

    def __init__(self, specs: list[JobSpec], types: list[str]) -> None:
        super().__init__(specs)
        index = {t: i for i, t in enumerate(types)}
        self.types = types
        self.type_idx = np.fromiter((index[s.job_type] for s in self.specs), dtype=np.int64, count=self.n)


def fill_row(table: JobTable, i: int, r: Any, live: Live | None, now: float, epoch: float) -> None:
    """Row ``i``'s service, progress, times and status from its stored row ``r`` (and its open run)."""
    attained, executed = float(r["attained"]), float(r["executed"])
    if live is not None:
        held = max(0.0, now - live.start_time)
        attained += int(r["num_gpus"]) * held
        executed += held
    table.attained[i], table.executed[i] = attained, executed
    table.progress[i] = float(r["progress"])
    table.preemptions[i], table.migrations[i] = int(r["preemptions"]), int(r["migrations"])
    for col, key in ((table.first_start, "first_start"), (table.finish, "finish_time"),
                     (table.last_start, "last_start")):
        col[i] = math.nan if r[key] is None else float(r[key]) - epoch
    table.last_stop[i] = table.submit[i] if r["last_stop"] is None else float(r["last_stop"]) - epoch
    table.status[i] = (JobStatus.DONE if r["state"] in FINAL_STATES else JobStatus.RUNNING if live is not None
                       else JobStatus.QUEUED)


def is_active(r: Any, live: Live | None) -> bool:
    """Whether the job may be in a decision: running (an open run), or waiting and not being cancelled.
    (What ``job_rows.JobRows.active`` keeps sorted as rows are read; the tests judge by this.)"""
    state = r["state"]
    if state in FINAL_STATES:
        return False
    return live is not None or (state in ACTIVE_STATES and not r["cancel_requested"] and state != "running")


def _limit(row: Any) -> Controls | None:
    """A job's time limit, for the predictions: a simulated run ends there, as the real one will
    (``lifecycle``). The other controls are the controller's own (blocked jobs are not active)."""
    return None if row["time_limit"] is None else Controls(time_limit=float(row["time_limit"]))


class Rounds:
    def __init__(self, store: Store, executor: Executor[Any], scheduler: Scheduler, cluster: Cluster,
                 runs: RunBook, log: Callable[[str], None], *, profile: ThroughputModel | None = None,
                 learning: RuntimeLearning | None = None) -> None:
        self.store, self.executor, self.scheduler, self.cluster = store, executor, scheduler, cluster
        self.runs, self.log = runs, log
        self.epoch = store.epoch
        self.table: RuntimeTable | None = None
        #: The server's profile (the job types it names, and their reference rates); with learned
        #: throughputs the scheduler's own model is the estimator's class model instead.
        self.profile: ThroughputModel = profile if profile is not None else scheduler.model
        #: Learned throughputs (None: the scheduler decides on the profile).
        self.learning = learning
        #: The job types a submission may name: the profile's, and ``generic``.
        self.types: list[str] = [*sorted(self.profile.job_types()), "generic"]
        #: When the policy wants to decide again by itself (a demotion, say), in wall-clock time.
        self.next_event = math.inf
        #: When the first retry's backoff ends (``lifecycle``): a decision is due then.
        self.retry_due = math.inf
        #: Called with the new Cluster when the executor's view changed (the server's info).
        self.on_cluster_change: Callable[[Cluster], None] | None = None
        #: Tenant queues (``tenancy.RuntimeQueues``): a new config is installed before a decision.
        self.tenancy: RuntimeQueues | None = None
        #: Predicted starts (``prediction.Predictor``): handed the state after every decision.
        self.predictor: Predictor | None = None
        #: Every job's row, read again only where it changed (``job_rows``).
        self.job_rows = JobRows(store)
        self._known_types = set(self.types)
        #: The table's columns and specs as the last decision filled them (before the scheduler used them),
        #: and the rows that had an open run then.
        self._filled: dict[str, np.ndarray] | None = None
        self._filled_specs: list[JobSpec] = []
        self._live_rows: set[int] = set()
        self.pins: dict[int, str] = {}

    def build_table(self, now: float) -> tuple[JobTable, np.ndarray, dict[int, Assignment]]:
        """JobTable of every job ever submitted (row = id order), the active rows, the current plan.

        Only the rows that changed since the last decision are read and filled again (``job_rows``);
        the others keep what the last decision filled in."""
        changed = self.job_rows.refresh()
        book = self.job_rows
        if lifecycle.cancel_unsatisfiable(self.store, book.rows_at(book.with_deps), book.states, now):
            changed = sorted(set(changed) | set(book.refresh()))
        rows = book.rows
        running = self.runs.running()
        live_rows = {book.row_of[j] for j in running if j in book.row_of}
        table = self._update_table(rows, sorted(set(changed) | live_rows | self._live_rows), running, now)
        self._live_rows = live_rows
        self.retry_due = min((float(r["retry_at"]) for r in book.rows_at(book.with_retry)
                              if float(r["retry_at"]) > now), default=math.inf)
        active = book.active(running, now)  # not held, no dependency waited on, no backoff running
        #: The rows pinned to a node (``--node``), with its name: fenced at the decision.
        self.pins = {i: str(book.rows[i]["node"]) for i in sorted(book.pinned)}
        row_of = book.row_of
        previous = {row_of[live.job_id]: Assignment(row_of[live.job_id], live.gpus,
                                                    row_of.get(live.partner) if live.partner is not None
                                                    else None, live.strategy)
                    for live in running.values() if live.job_id in row_of}
        return table, np.asarray(active, dtype=np.int64), previous

    def _spec(self, r: Any) -> JobSpec:
        e, known = self.epoch, self._known_types
        return JobSpec(int(r["id"]), float(r["submit_time"]) - e, int(r["num_gpus"]),
                       str(r["job_type"]) if r["job_type"] in known else "generic",
                       float(r["iterations"] or r["total_reported"] or UNKNOWN_WORK), None, str(r["user"]),
                       1.0, str(r["name"]), queue=str(r["queue"]), priority_class=str(r["priority_class"]),
                       gpu_type=r["gpu_type"], controls=_limit(r))

    def _update_table(self, rows: list[Any], refill: list[int], running: dict[int, Live], now: float) -> JobTable:
        """The table with the rows ``refill`` (and every new one) made again from their stored rows; the
        others as the last decision filled them (its own changes to the table undone)."""
        if self.table is None or self._filled is None:
            table = self.table_for([self._spec(r) for r in rows])
            for i, r in enumerate(rows):
                fill_row(table, i, r, running.get(int(r["id"])), now, self.epoch)
        else:
            table = self.table
            old_n = len(self._filled_specs)
            for name, saved in self._filled.items():  # undo what the last decision did to the table
                setattr(table, name, saved.copy())
            table.specs, table.n = list(self._filled_specs), old_n
            table.gpu_type_req = [s.gpu_type for s in table.specs]
            redo = [i for i in refill if i < old_n]
            if redo:  # static columns of rows whose spec may have changed (work reported, queue)
                self._put(table, redo, [self._spec(rows[i]) for i in redo])
            if len(rows) > old_n:  # new jobs: the table grows in place (its identity is what policies key on)
                self._put(table, list(range(old_n, len(rows))), [self._spec(r) for r in rows[old_n:]])
            for i in sorted(set(refill) | set(range(old_n, len(rows)))):
                fill_row(table, i, rows[i], running.get(int(rows[i]["id"])), now, self.epoch)
        self._filled = {name: value.copy() for name, value in vars(table).items() if isinstance(value, np.ndarray)}
        self._filled_specs = list(table.specs)
        return table

    def _put(self, table: JobTable, at: list[int], specs: list[JobSpec]) -> None:
        """Write the columns of ``specs`` (a blank row each, as a new table has it) at rows ``at``."""
        part = RuntimeTable(specs, list(self.types))
        part.set_reference_rates(self.profile)
        n = max(table.n, at[-1] + 1)
        for name, value in vars(part).items():
            if not isinstance(value, np.ndarray):
                continue
            column = getattr(table, name)
            if column.shape[0] < n:
                grown = np.empty((n, *column.shape[1:]), dtype=column.dtype)
                grown[:column.shape[0]] = column
                column = grown
                setattr(table, name, column)
            column[at] = value
        for i, spec in zip(at, specs, strict=True):
            if i < len(table.specs):
                table.specs[i] = spec
                table.gpu_type_req[i] = spec.gpu_type
            else:
                table.specs.append(spec)
                table.gpu_type_req.append(spec.gpu_type)
        table.n = len(table.specs)

    def table_for(self, specs: list[JobSpec]) -> JobTable:
        """The one table of this controller, grown in place when jobs arrive.

        Policies and placements may keep per-row state tied to the table object (Tiresias' queues,
        say), exactly as over a simulation; so the object lives as long as the controller and only
        grows. Its job-type list is fixed: the profile's types and ``generic`` (the API refuses any
        other, and ``build_table`` counts a stored one it does not know as ``generic``), so no
        submission can make the policy's per-job state restart.
        """
        if self.table is None:
            self.table = RuntimeTable(specs, list(self.types))
        else:
            RuntimeTable.__init__(self.table, specs, list(self.types))
        self.table.set_reference_rates(self.profile)
        return self.table

    def decide(self, now: float) -> tuple[Plan, JobTable] | None:
        """One decision: the Plan and the table it names rows of; None when no job is active."""
        if self.tenancy is not None:
            self.tenancy.install(self.scheduler)  # a config replaced over the API, between decisions
        table, active, previous = self.build_table(now)
        rel = now - self.epoch
        # A learned scheduler's policy keeps its state on the view it decides on: it hears of the ends there.
        seen = self.scheduler.follow(table) if isinstance(self.scheduler, LearnedScheduler) else None
        for job_id in self.runs.finished:
            rows = np.flatnonzero(table.job_id == job_id)
            if rows.size:
                self.scheduler.policy.on_finish(table if seen is None else seen, int(rows[0]), rel)
        self.runs.finished.clear()
        if active.size == 0:
            self.next_event = self.retry_due
            self._record(now, 0.0, None)
            return None
        # Drained nodes, unhealthy GPUs and pinned jobs: the scheduler places around them (``fencing``).
        self.scheduler.fences = node_fences.fences(self.store, self.executor, self.cluster, self.pins)
        if self.learning is not None:
            with self.learning.lock:
                return self._decide_learned(now, rel, table, active, previous)
        c0 = time.perf_counter()
        plan = self.scheduler.decide(rel, table, active, previous)
        seconds = time.perf_counter() - c0
        self._after(now, rel, seconds, plan, table, active)
        if self.predictor is not None:  # it copies the state here and simulates it in a thread of its own
            self.predictor.after_decision(self.epoch, rel, table, active, plan.assignments, self.scheduler)
        return plan, table

    def _after(self, now: float, rel: float, seconds: float, plan: Plan, table: JobTable, active: np.ndarray) -> None:
        self._record(now, seconds, plan)
        running_rows = np.fromiter(plan.assignments, dtype=np.int64, count=len(plan.assignments))
        ev = self.scheduler.policy.next_event(table, active, running_rows, rel)
        self.next_event = min(self.epoch + ev if ev > rel else math.inf, self.retry_due)

    def _decide_learned(self, now: float, rel: float, table: JobTable, active: np.ndarray,
                        previous: dict[int, Assignment]) -> tuple[Plan, JobTable]:
        """The decision on learned rates (under the estimator's lock: see module docstring)."""
        learning, sched = self.learning, self.scheduler
        assert learning is not None and isinstance(sched, LearnedScheduler)
        learning.register((int(table.job_id[r]), int(table.num_gpus[r]), str(self.job_rows.rows[r]["job_type"]))
                          for r in active.tolist())  # its --type: a hint for its prior
        learning.before_decision(now)
        c0 = time.perf_counter()
        plan = sched.decide(rel, table, active, previous)
        seconds = time.perf_counter() - c0
        view = sched.view_table
        assert view is not None
        self._after(now, rel, seconds, plan, view, active)  # the policy keeps its state on the view it decided on
        learning.after_decision(plan.assignments, view, sched.row_bonus)
        if self.predictor is not None:
            self.predictor.after_decision(self.epoch, rel, view, active, plan.assignments, sched,
                                          units=learning.model_units(sched))
        return plan, table

    def take_view(self) -> bool:
        """Take the executor's new view of the cluster, if any; False: postpone the decision."""
        change = self.executor.view_change()
        if change is None:
            return self.executor.cluster is not None
        live = self.runs.live.values()
        if any(change.remap.get(g) is None for run in live for g in run.gpus):
            return False  # a run still holds GPUs of a node that left: it is being reaped
        self.executor.commit_view(change)
        moved = []
        for run in live:
            gpus = tuple(change.remap[g] for g in run.gpus)  # type: ignore[misc]
            if gpus != run.gpus:
                run.gpus = gpus
                moved.append((run.alloc_id, gpus))
        allocations.move(self.store, moved)
        if change.cluster is None:
            self.log("cluster: no usable node left; decisions wait until one joins")
            return False
        s = self.scheduler
        self.cluster = change.cluster
        if isinstance(s, LearnedScheduler) and self.learning is not None:
            self.scheduler = self.learning.rebuild(s, change.cluster)
        else:
            self.scheduler = Scheduler(change.cluster, s.policy, s.placement, s.model, s.config, queues=s.queues)
        self.log(f"cluster: now {change.cluster.describe()} ({change.cluster.num_gpus} GPUs)")
        self.store.event(None, "cluster", {"cluster": change.cluster.describe(), "gpus": change.cluster.num_gpus})
        if self.on_cluster_change is not None:
            self.on_cluster_change(change.cluster)
        return True

    def _record(self, now: float, seconds: float, plan: Plan | None) -> None:
        stats = self.runs.stats
        stats.rounds += 1
        stats.decision_seconds_sum += seconds
        stats.last_decision = now
        if plan is not None and (plan.started or plan.stopped or plan.migrated):
            self.store.event(None, "decision", {"started": len(plan.started), "stopped": len(plan.stopped),
                                                "migrated": len(plan.migrated), "seconds": round(seconds, 6)})
