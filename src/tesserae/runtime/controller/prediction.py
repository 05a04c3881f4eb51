"""Predicted start and finish times of the server's jobs, and ``what-if`` (``tesserae.sim.predict``).

After every decision the controller hands its state to the ``Predictor``, which copies it (in
the controller's thread, so the copy is consistent) and simulates it forward in a worker thread
of its own, at most ``budget_seconds`` of wall time per prediction; the API reads the latest
finished prediction (one per decision: cached per round). ``what_if`` simulates the same latest
snapshot under another policy, placement or queue config, for ``POST /v1/what-if``.

The simulated cost of a (re)start is ``restart_seconds`` (default 1 s; ``benchmarks/sim_vs_real.py``
measured about 0.2 s for the toy trainer on a 2-core machine, a PyTorch job loading a checkpoint
takes longer: set it with ``tesserae server --predict-restart-seconds``).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tesserae.config import RunSpec, build_placement, build_policy, queue_policy
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.queues import QueueConfig, build_tree
from tesserae.scheduler import Scheduler
from tesserae.scheduler_queues import QueueStep
from tesserae.scheduling.base import queue_policy_names
from tesserae.scheduling.per_queue import check_queue_policy
from tesserae.sim.engine import SimConfig
from tesserae.sim.predict import Prediction, Snapshot, predict

UNKNOWN_WORK_MIN = 1e11
#: The most of a core the predictions take: after one that took w seconds the next waits w * (1/SHARE - 1).
SHARE = 0.25  # the controller's stand-in for 'iterations not given' is larger than this


class Predictor:
    def __init__(self, round_seconds: float, event_driven: bool, *, restart_seconds: float = 1.0,
                 budget_seconds: float = 2.0, run: RunSpec | None = None) -> None:
        self.config = SimConfig(round_seconds=round_seconds, restart_overhead=restart_seconds,
                                event_driven=event_driven, allow_thrashing=True)
        self.budget_seconds = budget_seconds
        #: The server's configuration: what-if builds another policy or placement with its options.
        self.run = run or RunSpec()
        self.epoch = 0.0
        self.latest: Prediction | None = None
        self._snapshot: Snapshot | None = None  # the latest one taken (what-if starts from it)
        self._latest_of: Snapshot | None = None  # the snapshot ``latest`` was predicted from
        self._todo: Snapshot | None = None
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self.predictions = 0
        self.failures = 0

    # ------------------------------------------------------------------ controller thread
    def after_decision(self, epoch: float, now: float, table: JobTable, active: np.ndarray,
                       assignments: dict[int, Assignment], scheduler: Scheduler,
                       units: Callable[[JobTable], None] | None = None) -> None:
        """Copy the state just decided on; the worker predicts from it (the previous copy, if not
        started yet, is dropped: only the latest state matters). ``units``: see ``Snapshot.take``."""
        known = table.work < UNKNOWN_WORK_MIN
        snap = Snapshot.take(now, table, active, assignments, scheduler, known, units)
        with self._cond:
            self.epoch = epoch
            self._snapshot = snap
            self._todo = snap
            self._cond.notify()
            if self._worker is None:
                self._worker = threading.Thread(target=self._loop, name="tesserae-predictor", daemon=True)
                self._worker.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._todo is None:
                    self._cond.wait()
                snap, self._todo = self._todo, None
            work = _fork(snap)  # the kept snapshot stays pristine for what-if
            t0 = time.monotonic()
            try:
                result = predict(work, work.scheduler.cluster, self.config, budget_seconds=self.budget_seconds)
            except Exception:  # a prediction never takes the server down; the API then shows none
                self.failures += 1
                continue
            finally:
                # At most a share of a core (SHARE): a decision at every arrival must not keep a
                # simulation running all the time (issue 27); the latest snapshot waits meanwhile.
                time.sleep((time.monotonic() - t0) * (1.0 / SHARE - 1.0))
            with self._cond:
                self.latest, self._latest_of = result, snap
                self.predictions += 1

    # ------------------------------------------------------------------ API threads
    def lookup(self, job_id: int) -> tuple[float | None, float | None]:
        """(predicted start, predicted finish) in epoch seconds, from the latest prediction."""
        p = self.latest
        if p is None:
            return None, None
        start, finish = p.start.get(job_id), p.finish.get(job_id)
        return (None if start is None else start + self.epoch, None if finish is None else finish + self.epoch)

    def what_if(self, policy: str | None, placement: str | None, queues: QueueConfig | None,
                no_queues: bool = False) -> tuple[Prediction, Prediction]:
        """The latest snapshot simulated as it is and with another policy, placement or queue config."""
        with self._cond:
            snap, latest, latest_of = self._snapshot, self.latest, self._latest_of
        if snap is None:
            raise LookupError("no decision has been made yet: nothing to predict from")
        # The other scheduler first: a bad policy, placement or queue config is refused before any simulation.
        self._check(snap, policy, placement, queues, no_queues)
        # The prediction as it is: the worker's, when it was made from this snapshot (half the cost).
        base = latest if latest is not None and latest_of is snap else predict(
            _fork(snap), snap.scheduler.cluster, self.config, budget_seconds=self.budget_seconds)
        alt = _fork(snap)
        alt.scheduler = self._other_scheduler(alt, policy, placement, queues, no_queues)
        return base, predict(alt, alt.scheduler.cluster, self.config, budget_seconds=self.budget_seconds)

    def _check(self, snap: Snapshot, policy: str | None, placement: str | None, queues: QueueConfig | None,
               no_queues: bool) -> None:
        """Raise what ``_other_scheduler`` would, without touching the snapshot (its objects stay pristine)."""
        sched = snap.scheduler
        run = self._other(policy, placement)
        name = sched.policy.name if policy is None else build_policy(run).name
        if placement is not None:
            build_placement(run)
        if queues is not None:
            check_queue_policy(name)
            build_tree(queues, gpus_by_type=sched.cluster.gpus_by_type, path="body", policy_names=queue_policy_names())
        elif not no_queues and sched.queues is not None and policy is not None:
            check_queue_policy(name)

    def _other_scheduler(self, snap: Snapshot, policy: str | None, placement: str | None,
                         queues: QueueConfig | None, no_queues: bool) -> Scheduler:
        """The snapshot's scheduler with another policy, placement or queue config (built from, and
        sharing the state of, ``snap``'s: pass a fork)."""
        sched = snap.scheduler
        run = self._other(policy, placement)
        new_policy = sched.policy if policy is None else build_policy(run)
        new_placement = sched.placement if placement is None else build_placement(run)
        step = None if no_queues else sched.queues
        if queues is not None:
            check_queue_policy(new_policy.name)
            tree = build_tree(queues, gpus_by_type=sched.cluster.gpus_by_type, path="body",
                              policy_names=queue_policy_names())
            step = QueueStep(tree)
            new_policy = queue_policy(tree, new_policy, run)
        elif step is not None and policy is not None:
            check_queue_policy(new_policy.name)
            step = QueueStep(step.tree)
        return Scheduler(sched.cluster, new_policy, new_placement, sched.model, sched.config, queues=step)

    def _other(self, policy: str | None, placement: str | None) -> RunSpec:
        """The server's run with another policy or placement, which takes the server's options it declares."""
        run = self.run
        if policy is not None:
            run = run.model_copy(update={"policy": policy, "policy_options": run.options_for("policy", policy)})
        if placement is not None:
            run = run.model_copy(update={"placement": placement,
                                         "placement_options": run.options_for("placement", placement)})
        return run


def not_started(start: float | None, finish: float | None, now: float) -> tuple[float | None, float | None]:
    """A waiting job's predicted (start, finish) as of ``now``: a start the prediction put before now
    (it is as old as the latest decision, and the job has not started) is now, and its finish moves
    with it, so a job that has not started never shows a start and an end that have passed."""
    if start is None or start >= now:
        return start, finish
    return now, None if finish is None else finish + (now - start)


def _fork(snap: Snapshot) -> Snapshot:
    """An independent copy of a snapshot (a prediction mutates its table and policy)."""
    s = snap.scheduler
    memo: dict[int, Any] = {id(s.model): s.model, id(s.cluster): s.cluster,
                            id(snap.table.specs): snap.table.specs}  # frozen, never changed: shared
    return copy.deepcopy(snap, memo)
