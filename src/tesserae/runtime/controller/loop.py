"""The controller: rounds of decisions by the scheduler core, applied through an executor.

It wires four parts and runs the loop that drives them, on one thread:

- ``reconcile`` at start-up: adopt what still runs, close what ended, requeue what was lost;
- ``reaping`` every tick: reap ended runs, escalate overdue stops, act on cancellations, record
  progress (and let the executor poll: ``Executor.watch``);
- ``rounds``, when a decision is due: store -> JobTable -> ``Scheduler.decide`` -> Plan, after
  taking the executor's new view of the cluster if it has one;
- ``apply``: the Plan's stops, then its starts;
- ``learning`` (with ``--throughputs learned``): every progress report feeds the estimator the
  scheduler decides on, whose state is saved in the store.

Every change to a run goes through ``runs.RunBook``, write-ahead (the store first, then the act),
so a crash at any point is settled by the next start's reconciliation: a job is never lost, never
runs twice at once, and a completed job never runs again. The controller talks to its executor
through the ``Executor`` protocol only and never asks which kind it holds.

Decisions happen every ``round_seconds`` and, when ``event_driven``, also at arrivals,
completions, cancellations, cluster changes and the policy's own events (a demotion, say), as in
the simulator.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.runtime.controller.apply import apply_plan
from tesserae.runtime.controller.faults import Faults
from tesserae.runtime.controller.reaping import Reaper
from tesserae.runtime.controller.reconcile import reconcile
from tesserae.runtime.controller.rounds import Rounds
from tesserae.runtime.controller.runs import ControllerConfig, Live, RunBook, Stats
from tesserae.runtime.executor.protocol import Executor
from tesserae.runtime.job.isolation import Isolation
from tesserae.runtime.job.paths import JobPaths
from tesserae.runtime.store import jobs
from tesserae.runtime.store.database import RUNNABLE_STATES, Store
from tesserae.runtime.store.job_ids import JobIds
from tesserae.scheduler import Scheduler

if TYPE_CHECKING:
    from tesserae.core.throughput import ThroughputModel
    from tesserae.runtime.controller.learning import RuntimeLearning
    from tesserae.runtime.controller.prediction import Predictor
    from tesserae.runtime.controller.tenancy import RuntimeQueues

__all__ = ["Controller", "ControllerConfig", "Live", "Stats"]

#: The most of a core event-driven decisions take (``Controller.decide``).
DECISION_SHARE = 0.5


class Controller:
    def __init__(self, store: Store, executor: Executor[Any], scheduler: Scheduler, cluster: Cluster,
                 state_dir: Path, config: ControllerConfig | None = None,
                 log: Callable[[str], None] | None = None, *, isolation: Isolation | None = None,
                 job_root: Path | None = None, reserve_job_id: Callable[[int], None] | None = None,
                 profile: ThroughputModel | None = None, learning: RuntimeLearning | None = None) -> None:
        """``profile``: the server's profile when the scheduler decides on another model (learned
        throughputs: then ``learning`` feeds the estimator behind it)."""
        self.store, self.executor, self.state_dir = store, executor, state_dir
        #: Who jobs run as (see ``isolation``).
        self.isolation = isolation or Isolation(same_user=True)
        #: Called (inside the submit transaction) with each new job id before it is used (``store.integrity``).
        self.reserve_job_id: Callable[[int], None] = reserve_job_id or (lambda job_id: None)
        self.config = config or ControllerConfig()
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.paths = JobPaths(state_dir, job_root or state_dir / "jobs", self.log)
        #: Claims each new job's id and folder (``job_ids``).
        self.job_ids = JobIds(self.paths, self.reserve_job_id)
        self.runs = RunBook(store, executor, self.config, self.paths, self.isolation, Faults.from_env(self.log),
                            self.log, self.wake)
        self.runs.learning = learning
        self.reaper = Reaper(self.runs)
        self.rounds = Rounds(store, executor, scheduler, cluster, self.runs, self.log, profile=profile,
                             learning=learning)
        self._wake = threading.Event()
        self._stop = threading.Event()
        #: Counts the changes the controller is told of (``wake``): what the API's caches key on
        #: (``pending.board``).
        self.changes = 0
        self._pending = True  # decide at once after start-up
        self._calm_until = 0.0  # no event-driven decision before this (``decide``)

    # ------------------------------------------------------------------ what the API and the dashboard read
    @property
    def scheduler(self) -> Scheduler:
        return self.rounds.scheduler

    @property
    def cluster(self) -> Cluster:
        return self.rounds.cluster

    @property
    def table(self) -> JobTable | None:
        """The table of the latest decision (rows: every job ever submitted, in id order)."""
        return self.rounds.table

    @property
    def learning(self) -> RuntimeLearning | None:
        """Learned throughputs (None: the scheduler decides on the profile)."""
        return self.rounds.learning

    @property
    def stats(self) -> Stats:
        return self.runs.stats

    @property
    def on_cluster_change(self) -> Callable[[Cluster], None] | None:
        return self.rounds.on_cluster_change

    @on_cluster_change.setter
    def on_cluster_change(self, callback: Callable[[Cluster], None] | None) -> None:
        self.rounds.on_cluster_change = callback

    @property
    def tenancy(self) -> RuntimeQueues | None:
        """The server's tenant queues (None: one global queue)."""
        return self.rounds.tenancy

    @tenancy.setter
    def tenancy(self, queues: RuntimeQueues | None) -> None:
        self.rounds.tenancy = queues

    @property
    def predictor(self) -> Predictor | None:
        """Predicted starts and finishes (None: the server makes none)."""
        return self.rounds.predictor

    @predictor.setter
    def predictor(self, predictor: Predictor | None) -> None:
        self.rounds.predictor = predictor

    def log_path(self, job_id: int) -> Path:
        return self.paths.log_path(job_id)

    def job_types(self) -> list[str]:
        """The job types a submission may name: the profile's, and ``generic``."""
        return list(self.rounds.types)

    # ------------------------------------------------------------------ the loop
    def wake(self, event: bool = True) -> None:
        """Something happened (a submission, a cancellation): decide soon when event-driven."""
        if event:
            self._pending = True
        self.changes += 1
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Reconcile with what runs, then decide and apply until ``stop`` is set."""
        self._stop = stop
        reconcile(self.runs, self.reaper, self.cluster)
        next_round = 0.0
        last_beat = 0.0
        while not stop.is_set():
            now = time.time()
            self.poll(now)
            due = now >= next_round or (self.config.event_driven
                                        and (self._pending or now >= self.rounds.next_event)
                                        and now >= self._calm_until)
            if due and self.decide(now):
                next_round = self.stats.last_decision + self.config.round_seconds  # type: ignore[operator]
            now = time.time()
            if now - last_beat >= 1.0:
                self.store.set_meta("heartbeat", repr(now))
                last_beat = now
            timeout = min(self.config.tick, max(0.0, next_round - now))
            self._wake.wait(timeout)
            self._wake.clear()

    def poll(self, now: float) -> None:
        """Reap ended runs, escalate overdue stops, act on cancellations, record progress."""
        if self.reaper.poll(now) and self.config.event_driven:
            self._pending = True  # nodes joined or left

    def decide(self, now: float) -> bool:
        """One decision, applied. False when postponed (a run is still starting or stopping, or the
        cluster has no usable node)."""
        if not self.runs.settled() or not self.rounds.take_view():
            return False
        self._pending = False
        t0 = time.perf_counter()
        decision = self.rounds.decide(now)
        cost = time.perf_counter() - t0
        # Event-driven decisions take at most DECISION_SHARE of a core: under a flood of arrivals a
        # decision that took d seconds is followed by the next event's no sooner than d * (1/SHARE - 1)
        # later (a round's own time is not delayed). A small queue's decision takes milliseconds.
        self._calm_until = time.time() + cost * (1.0 / DECISION_SHARE - 1.0)
        if decision is not None:
            plan, table = decision
            self.runs.faults.hit("decided")
            apply_plan(plan, table, self.runs, stop=self._stop, tick=self.config.tick, poll=self.poll)
        return True

    # ------------------------------------------------------------------ requests from the API
    def cancel(self, job_id: int, by: str) -> str:
        """Cancel a job: at once when it waits, via SIGTERM when it runs. Returns its state now."""
        state = jobs.cancel(self.store, job_id, by, time.time())
        if state in RUNNABLE_STATES:
            state = "cancelled"
        elif state == "running":
            self.reaper.cancel_hint = True
        self.wake()
        return state
