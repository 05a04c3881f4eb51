"""The controller: rounds of decisions by the scheduler core, applied through an executor.

Each decision rebuilds a ``JobTable`` from the store (row i = the i-th job ever submitted, so
rows are stable across rounds and restarts), computes attained service and executed time from
the recorded run intervals (an open run counts up to now), takes the progress each job reported
(iterations), and calls ``Scheduler.decide`` exactly as the simulator does. The Plan is applied
in order: the jobs to stop (preempted or migrating) get SIGTERM and the controller waits until
they have exited (SIGKILL after the grace period), then the jobs to start or move are launched.

Write-ahead intent: every change is committed to the store before the controller acts on it
(an allocation is ``starting`` before its process exists, ``stopping`` before SIGTERM is sent).
``reconcile`` runs at start-up: a run whose launcher is alive (same pid, kernel start time and
marker) is adopted; a run that ended meanwhile is closed with the exit code its launcher wrote;
a run whose processes vanished without a trace is closed as lost and its job requeued (it resumes
from its own checkpoint). So a job is never lost, never runs twice at once, and a completed job
never runs again.

Decisions happen every ``round_seconds`` and, when ``event_driven``, also at arrivals,
completions, cancellations and the policy's own events (a demotion, say), as in the simulator.

The controller talks to its executor through the ``Executor`` protocol only (``executor``) and
never asks which kind it holds. The executor is polled every tick (``executor.watch``: nodes joining
or leaving are an event); at the start of a decision the controller takes its new view, if any
(``executor.view_change``), rebuilds the Scheduler on it (same policy and placement objects, so
their per-job state carries over) and remaps the GPU ids of the running jobs onto it. A run is
started from the job contract and its GPU ids (``executor.Launch``); the executor adds the base
environment and the devices.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobSpec, JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.job import PREEMPTED_EXIT_CODE
from tesserae.runtime import job_env, job_files
from tesserae.runtime.executor import Executor, Launch, Run
from tesserae.runtime.faults import Faults
from tesserae.runtime.isolation import Isolation, prepare_workspace
from tesserae.runtime.store import ACTIVE_STATES, FINAL_STATES, RUNNABLE_STATES, Store
from tesserae.scheduler import Scheduler

#: Work (iterations) of a job that declared none: real schedulers such as Tiresias do not need it.
UNKNOWN_WORK = 1e12
#: A job that exits with the preemption code without being asked is requeued at most this often.
MAX_UNASKED_REQUEUES = 3
#: After SIGKILL, how long a run may take to disappear before it is written off as lost.
KILL_TIMEOUT = 15.0


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    round_seconds: float = 60.0
    grace_seconds: float = 30.0
    event_driven: bool = True
    tick: float = 0.05


@dataclass
class Live:
    """A run that has (or may have) a process: starting, running or stopping."""

    alloc_id: int
    job_id: int
    gpus: tuple[int, ...]
    start_time: float
    run_dir: Path
    proc: Run | None
    phase: str
    stop_reason: str | None = None
    deadline: float | None = None
    killed_at: float | None = None
    partner: int | None = None
    strategy: str | None = None
    lingering_since: float | None = None


@dataclass
class Stats:
    rounds: int = 0
    decision_seconds_sum: float = 0.0
    last_decision: float | None = None
    started: int = 0
    stopped: int = 0
    migrated: int = 0
    adopted: int = 0
    lost: int = 0


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


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"killed by signal {name}"
    if code == 127:
        return "exit code 127: the command was not found (see the log)"
    if code == 126:
        return "exit code 126: the command is not executable (see the log)"
    return f"exited with code {code}"


class Controller:
    def __init__(self, store: Store, executor: Executor[Any], scheduler: Scheduler, cluster: Cluster,
                 state_dir: Path, config: ControllerConfig | None = None,
                 log: Callable[[str], None] | None = None, *, isolation: Isolation | None = None,
                 job_root: Path | None = None, reserve_job_id: Callable[[int], None] | None = None) -> None:
        self.store, self.executor, self.scheduler, self.cluster = store, executor, scheduler, cluster
        self.state_dir = state_dir
        #: Who jobs run as (see ``isolation``); where their workspaces live.
        self.isolation = isolation or Isolation(same_user=True)
        self.job_root = job_root or state_dir / "jobs"
        #: Called (inside the submit transaction) with each new job id before it is used (``store_integrity``).
        self.reserve_job_id: Callable[[int], None] = reserve_job_id or (lambda job_id: None)
        self.config = config or ControllerConfig()
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.epoch = store.epoch
        self.live: dict[int, Live] = {}
        self.stats = Stats()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pending = True  # decide at once after start-up
        self._cancel_hint = False
        self._finished: list[int] = []
        self._next_policy_event = math.inf
        self._last_progress = 0.0
        self.table: RuntimeTable | None = None
        self._types: list[str] = [*sorted(scheduler.model.job_types()), "generic"]
        self._faults = Faults.from_env(self.log)
        #: Called with the new Cluster when the executor's view changed (the server's info).
        self.on_cluster_change: Callable[[Cluster], None] | None = None

    # ------------------------------------------------------------------ paths and helpers
    def job_dir(self, job_id: int) -> Path:
        """The job's private folder (its log and run records), in the state folder."""
        return self.state_dir / "jobs" / str(job_id)

    def workspace(self, job_id: int) -> Path:
        """The job's own folder (checkpoints, progress, default working folder); the same as
        ``job_dir`` in same-user mode, under the job root with job accounts."""
        return self.job_root / str(job_id)

    def log_path(self, job_id: int) -> Path:
        return self.job_dir(job_id) / "output.log"

    def job_types(self) -> list[str]:
        """The job types a submission may name: the profile's, and ``generic``."""
        return list(self._types)

    def wake(self, event: bool = True) -> None:
        """Something happened (a submission, a cancellation): decide soon when event-driven."""
        if event:
            self._pending = True
        self._wake.set()

    def _append_log(self, job_id: int, line: str) -> None:
        """A line of the server's own in the job's log (never blocking on what a job put there)."""
        path = self.log_path(job_id)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = job_files.open_log_append(path)
        except OSError as e:
            self.log(f"job {job_id}: cannot write its log {path}: {e}")
            return
        try:
            os.write(fd, f"--- tesserae {stamp}: {line} ---\n".encode(errors="backslashreplace"))
        except OSError as e:
            self.log(f"job {job_id}: cannot write its log {path}: {e}")
        finally:
            os.close(fd)

    def _fault(self, point: str) -> None:
        self._faults.hit(point)

    def _read_progress(self, job_id: int) -> tuple[float | None, int | None]:
        """The job's own progress report, read as hostile input (see ``job_files``)."""
        return job_files.read_progress(self.workspace(job_id) / "progress.json")

    # ------------------------------------------------------------------ main loop
    def run(self, stop: threading.Event) -> None:
        """Reconcile with what runs, then decide and apply until ``stop`` is set."""
        self._stop = stop
        self.reconcile()
        next_round = 0.0
        last_beat = 0.0
        while not stop.is_set():
            now = time.time()
            self.poll(now)
            due = now >= next_round or (self.config.event_driven
                                        and (self._pending or now >= self._next_policy_event))
            if due and self.decide(now):
                next_round = self.stats.last_decision + self.config.round_seconds  # type: ignore[operator]
            now = time.time()
            if now - last_beat >= 1.0:
                self.store.set_meta("heartbeat", repr(now))
                last_beat = now
            timeout = min(self.config.tick, max(0.0, next_round - now))
            self._wake.wait(timeout)
            self._wake.clear()

    # ------------------------------------------------------------------ reconciliation
    def reconcile(self) -> None:
        now = time.time()
        beat = self.store.meta("heartbeat")
        last_seen = min(now, float(beat)) if beat else now
        for a in self.store.query("SELECT * FROM allocations WHERE phase != 'ended' ORDER BY id"):
            run_dir = Path(a["run_dir"])
            live = Live(a["id"], a["job_id"], tuple(json.loads(a["gpus"])), a["start_time"], run_dir, None,
                        a["phase"], a["stop_reason"], a["stop_deadline"], partner=a["partner"],
                        strategy=a["strategy"])
            adopted = self.executor.adopt(a["pid"], a["pid_start"], str(run_dir), live.gpus)
            if adopted is not None:
                live.proc = proc = adopted.run
                if adopted.gpus != live.gpus:  # the executor's view changed meanwhile
                    live.gpus = adopted.gpus
                    self.store.execute("UPDATE allocations SET gpus=? WHERE id=?",
                                       (json.dumps(list(live.gpus)), a["id"]))
                if live.phase == "starting":
                    live.phase = "running"
                    self.store.execute("UPDATE allocations SET pid=?, pid_start=?, phase='running' WHERE id=?",
                                       (proc.pid, proc.ticks, a["id"]))
                self.live[a["id"]] = live
                self.stats.adopted += 1
                self.store.event(a["job_id"], "adopted", {"allocation": a["id"], "pid": proc.pid})
                self.log(f"adopted job {a['job_id']} (run {a['id']}, pid {proc.pid}, {live.phase})")
                if live.phase == "stopping":
                    live.deadline = a["stop_deadline"] or now + self.config.grace_seconds
                    self.executor.terminate(proc)
                elif any(g >= self.cluster.num_gpus for g in live.gpus):
                    self._begin_stop(live, "preempt", now)
                continue
            code, t = self.executor.exit_code(None, run_dir)
            # The launcher is gone; any process of the run still alive must die before the job runs again
            # or its GPUs are handed out.
            leftovers = self._end_leftovers(str(run_dir), exit_recorded=t is not None)
            if live.phase == "starting" and a["pid"] is None and code is None and not leftovers:
                self._unstart(a)
                continue
            end = t if t is not None else max(a["start_time"], last_seen)
            if code is None:
                self.stats.lost += 1
            self._close(live, code, end)

    def _end_leftovers(self, marker: str, *, exit_recorded: bool) -> list[int]:
        """Kill what is left of a run whose launcher is gone, and wait (at most ``KILL_TIMEOUT``)
        until it has died. Returns what was found."""
        found = self.executor.leftovers(marker, exit_recorded=exit_recorded)
        left, deadline = found, time.monotonic() + KILL_TIMEOUT
        while left and time.monotonic() < deadline:
            self.executor.kill_marker(marker)
            time.sleep(0.02)
            left = self.executor.leftovers(marker, exit_recorded=exit_recorded)
        if left:
            self.log(f"processes {left} of the run {marker} survived SIGKILL for {KILL_TIMEOUT:g} s")
        return found

    def _unstart(self, a: Any) -> None:
        """An allocation recorded as 'starting' whose process never came to be: undo the intent."""
        job_id = a["job_id"]
        with self.store.tx() as c:
            c.execute("UPDATE allocations SET phase='ended', end_time=start_time, outcome='not-started' "
                      "WHERE id=?", (a["id"],))
            ran = c.execute("SELECT COUNT(*) FROM allocations WHERE job_id=? AND pid IS NOT NULL",
                            (job_id,)).fetchone()[0]
            if ran:
                c.execute("UPDATE jobs SET state='preempted' WHERE id=? AND state='running'", (job_id,))
            else:
                c.execute("UPDATE jobs SET state='queued', first_start=NULL, last_start=NULL "
                          "WHERE id=? AND state='running'", (job_id,))
            self.store.event(job_id, "requeued", {"allocation": a["id"], "why": "never started"})
        self.executor.release(str(a["run_dir"]))
        self.log(f"job {job_id}: run {a['id']} never started; requeued")

    # ------------------------------------------------------------------ polling
    def poll(self, now: float) -> None:
        """Reap ended runs, escalate overdue stops, act on cancellations, record progress."""
        if self.executor.watch(now) and self.config.event_driven:
            self._pending = True  # nodes joined or left
        for live in list(self.live.values()):
            if live.proc is None or self.executor.exited(live.proc):
                code, t = self.executor.exit_code(live.proc, live.run_dir)
                if self._lingering(live, now, exit_recorded=t is not None):
                    continue  # processes of the run remain: its GPUs stay held until they are gone
                self._fault("exit-seen")
                if code is None:
                    self.stats.lost += 1
                self._close(live, code, now if t is None else min(t, now))
            elif live.phase == "stopping" and live.deadline is not None and now >= live.deadline:
                if live.killed_at is None:
                    self.log(f"job {live.job_id}: no exit {self.config.grace_seconds:g} s after SIGTERM; SIGKILL")
                    self.executor.kill(live.proc)
                    live.killed_at = now
                    self.store.event(live.job_id, "killed", {"allocation": live.alloc_id})
                elif now - live.killed_at > KILL_TIMEOUT:
                    self.log(f"job {live.job_id}: run {live.alloc_id} survived SIGKILL for {KILL_TIMEOUT:g} s; "
                             "written off as lost")
                    self._close(live, None, now)
        periodic = now - self._last_progress >= 1.0
        if self._cancel_hint or periodic:  # cancellations come through this process's API; look anyway each second
            self._cancel_hint = False
            for row in self.store.query("SELECT a.id FROM allocations a JOIN jobs j ON j.id = a.job_id "
                                        "WHERE a.phase='running' AND j.cancel_requested=1"):
                live = self.live.get(row["id"])
                if live is not None and live.phase == "running":
                    self._begin_stop(live, "cancel", now)
        if periodic:
            self._last_progress = now
            reports = [(it, total, live.job_id) for live in self.live.values()
                       for it, total in [self._read_progress(live.job_id)] if it is not None]
            if reports:
                with self.store.tx() as c:
                    c.executemany("UPDATE jobs SET progress=?, total_reported=COALESCE(?, total_reported) "
                                  "WHERE id=?", reports)

    def _lingering(self, live: Live, now: float, *, exit_recorded: bool) -> bool:
        """True while processes of a run whose launcher has exited remain (they are being killed).

        A job's GPUs go to no one else until its last process is gone: such a run counts as
        stopping (decisions wait) until its leftovers have died, or for at most ``KILL_TIMEOUT``
        after the first SIGKILL (an unkillable process is then written off, loudly)."""
        marker = str(live.run_dir)
        left = self.executor.leftovers(marker, exit_recorded=exit_recorded)
        if not left:
            return False
        self.executor.kill_marker(marker)
        if live.lingering_since is None:
            live.lingering_since, live.phase = now, "stopping"
            self.log(f"job {live.job_id}: run {live.alloc_id} ended but {len(left)} of its processes remain; "
                     "killing them before its GPUs are handed out again")
            self.store.event(live.job_id, "killed", {"allocation": live.alloc_id, "leftovers": len(left)}, now)
            return True
        if now - live.lingering_since <= KILL_TIMEOUT:
            return True
        self.log(f"job {live.job_id}: processes {left} of run {live.alloc_id} survived SIGKILL for "
                 f"{KILL_TIMEOUT:g} s; written off")
        return False

    # ------------------------------------------------------------------ the decision
    def build_table(self, now: float) -> tuple[JobTable, np.ndarray, dict[int, Assignment]]:
        """JobTable of every job ever submitted (row = id order), the active rows, the current plan."""
        rows = self.store.query("SELECT * FROM jobs ORDER BY id")
        e = self.epoch
        known = set(self._types)
        specs = [JobSpec(int(r["id"]), float(r["submit_time"]) - e, int(r["num_gpus"]),
                         str(r["job_type"]) if r["job_type"] in known else "generic",
                         float(r["iterations"] or r["total_reported"] or UNKNOWN_WORK), None, str(r["user"]),
                         1.0, str(r["name"])) for r in rows]
        table = self._table_for(specs)
        row_of = {int(r["id"]): i for i, r in enumerate(rows)}
        running = {live.job_id: live for live in self.live.values() if live.phase == "running"}
        active = []
        for i, r in enumerate(rows):
            state = r["state"]
            attained, executed = float(r["attained"]), float(r["executed"])
            live = running.get(int(r["id"]))
            if live is not None:
                held = max(0.0, now - live.start_time)
                attained += int(r["num_gpus"]) * held
                executed += held
            table.attained[i], table.executed[i] = attained, executed
            table.progress[i] = float(r["progress"])
            table.preemptions[i], table.migrations[i] = int(r["preemptions"]), int(r["migrations"])
            for col, key in ((table.first_start, "first_start"), (table.finish, "finish_time"),
                             (table.last_start, "last_start")):
                if r[key] is not None:
                    col[i] = float(r[key]) - e
            if r["last_stop"] is not None:
                table.last_stop[i] = float(r["last_stop"]) - e
            if state in FINAL_STATES:
                table.status[i] = JobStatus.DONE
            elif live is not None:
                table.status[i] = JobStatus.RUNNING
                active.append(i)
            else:
                table.status[i] = JobStatus.QUEUED
                if state in ACTIVE_STATES and not r["cancel_requested"] and state != "running":
                    active.append(i)
        previous = {row_of[live.job_id]: Assignment(row_of[live.job_id], live.gpus,
                                                    row_of.get(live.partner) if live.partner is not None
                                                    else None, live.strategy)
                    for live in running.values() if live.job_id in row_of}
        return table, np.asarray(active, dtype=np.int64), previous

    def _table_for(self, specs: list[JobSpec]) -> JobTable:
        """The one table of this controller, grown in place when jobs arrive.

        Policies and placements may keep per-row state tied to the table object (Tiresias' queues,
        say), exactly as over a simulation; so the object lives as long as the controller and only
        grows. Its job-type list is fixed: the profile's types and ``generic`` (the API refuses any
        other, and ``build_table`` counts a stored one it does not know as ``generic``), so no
        submission can make the policy's per-job state restart.
        """
        if self.table is None:
            self.table = RuntimeTable(specs, list(self._types))
        else:
            RuntimeTable.__init__(self.table, specs, list(self._types))
        self.table.set_reference_rates(self.scheduler.model)
        return self.table

    def decide(self, now: float) -> bool:
        """One decision, applied. False when postponed (a run is still stopping)."""
        if any(live.phase != "running" for live in self.live.values()):
            return False
        if not self._refresh_cluster():
            return False
        self._pending = False
        table, active, previous = self.build_table(now)
        rel = now - self.epoch
        for job_id in self._finished:
            rows = np.flatnonzero(table.job_id == job_id)
            if rows.size:
                self.scheduler.policy.on_finish(table, int(rows[0]), rel)
        self._finished.clear()
        if active.size == 0:
            self._next_policy_event = math.inf
            self._record_decision(now, 0.0, None)
            return True
        c0 = time.perf_counter()
        plan = self.scheduler.decide(rel, table, active, previous)
        seconds = time.perf_counter() - c0
        self._record_decision(now, seconds, plan)
        running_rows = np.fromiter(plan.assignments, dtype=np.int64, count=len(plan.assignments))
        ev = self.scheduler.policy.next_event(table, active, running_rows, rel)
        self._next_policy_event = self.epoch + ev if ev > rel else math.inf
        self._fault("decided")
        self._apply(plan, table)
        return True

    def _refresh_cluster(self) -> bool:
        """Take the executor's new view of the cluster, if any; False: postpone the decision."""
        change = self.executor.view_change()
        if change is None:
            return self.executor.cluster is not None
        if any(change.remap.get(g) is None for live in self.live.values() for g in live.gpus):
            return False  # a run still holds GPUs of a node that left: it is being reaped
        self.executor.commit_view(change)
        moved = []
        for live in self.live.values():
            gpus = tuple(change.remap[g] for g in live.gpus)  # type: ignore[misc]
            if gpus != live.gpus:
                live.gpus = gpus
                moved.append((json.dumps(list(gpus)), live.alloc_id))
        if moved:
            with self.store.tx() as c:
                c.executemany("UPDATE allocations SET gpus=? WHERE id=?", moved)
        if change.cluster is None:
            self.log("cluster: no usable node left; decisions wait until one joins")
            return False
        s = self.scheduler
        self.cluster = change.cluster
        self.scheduler = Scheduler(change.cluster, s.policy, s.placement, s.model, s.config)
        self.log(f"cluster: now {change.cluster.describe()} ({change.cluster.num_gpus} GPUs)")
        self.store.event(None, "cluster", {"cluster": change.cluster.describe(), "gpus": change.cluster.num_gpus})
        if self.on_cluster_change is not None:
            self.on_cluster_change(change.cluster)
        return True

    def _record_decision(self, now: float, seconds: float, plan: Plan | None) -> None:
        self.stats.rounds += 1
        self.stats.decision_seconds_sum += seconds
        self.stats.last_decision = now
        if plan is not None and (plan.started or plan.stopped or plan.migrated):
            self.store.event(None, "decision", {"started": len(plan.started), "stopped": len(plan.stopped),
                                                "migrated": len(plan.migrated), "seconds": round(seconds, 6)})

    def _apply(self, plan: Plan, table: JobTable) -> None:
        job_of = table.job_id
        by_job = {live.job_id: live for live in self.live.values()}
        waiting = []
        now = time.time()
        for rows, why in ((plan.stopped, "preempt"), (plan.migrated, "migrate")):
            for r in rows:
                live = by_job.get(int(job_of[r]))
                if live is not None and live.phase == "running":
                    self._begin_stop(live, why, now)
                    waiting.append(live.alloc_id)
        while any(a in self.live for a in waiting):
            if self._stop.wait(self.config.tick):
                return  # shutting down: the pending starts are simply not done (jobs stay queued)
            self.poll(time.time())
        starts = set(plan.started) | set(plan.migrated)
        for r, a in plan.assignments.items():
            if r in starts:
                partner = int(job_of[a.partner]) if a.partner is not None else None
                self._start(int(job_of[r]), a.gpus, partner, a.strategy)

    # ------------------------------------------------------------------ actions
    def _start(self, job_id: int, gpus: tuple[int, ...], partner: int | None, strategy: str | None) -> bool:
        now = time.time()
        with self.store.tx() as c:
            cur = c.execute("UPDATE jobs SET state='running', first_start=COALESCE(first_start, ?), last_start=?, "
                            "reason='' WHERE id=? AND state IN ('queued', 'preempted') AND cancel_requested=0",
                            (now, now, job_id))
            if cur.rowcount != 1:
                return False  # cancelled, or finished while the plan was applied
            job = c.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
            alloc_id = int(c.execute(
                "INSERT INTO allocations (job_id, gpus, partner, strategy, phase, start_time, run_dir) "
                "VALUES (?, ?, ?, ?, 'starting', ?, '')",
                (job_id, json.dumps(list(gpus)), partner, strategy, now)).lastrowid)
            run_dir = self.job_dir(job_id) / "runs" / str(alloc_id)
            c.execute("UPDATE allocations SET run_dir=? WHERE id=?", (str(run_dir), alloc_id))
            kind = "resumed" if job["first_start"] != now else "started"
            self.store.event(job_id, kind, {"allocation": alloc_id, "gpus": list(gpus)}, now)
        self._fault("start-intent")
        live = Live(alloc_id, job_id, gpus, now, run_dir, None, "starting", partner=partner, strategy=strategy)
        try:
            proc = self._spawn(job, live, kind)
        except Exception as e:  # whatever this job's spec or files do, only this job fails
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            why = " ".join(why.split())[:300] or type(e).__name__
            self.log(f"job {job_id}: cannot start: {why}")
            self._close(live, None, now, failure=f"cannot start: {why}")
            return False
        self._fault("spawn")
        live.proc, live.phase = proc, "running"
        self.store.execute("UPDATE allocations SET pid=?, pid_start=?, phase='running' WHERE id=?",
                           (proc.pid, proc.ticks, alloc_id))
        self.live[alloc_id] = live
        self.stats.started += 1
        return True

    def _spawn(self, job: Any, live: Live, kind: str) -> Run:
        """Start the run ``live`` of ``job``; raises when it cannot be started."""
        job_id, gpus = live.job_id, live.gpus
        account = self.isolation.account_for(str(job["user"]))
        argv = json.loads(job["command"])
        if job["shell"]:
            argv = ["/bin/sh", "-c", argv[0]]
        workspace = prepare_workspace(self.job_root, job_id, account)
        cwd = Path(job["workdir"]) if job["workdir"] else workspace / "work"
        live.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._append_log(job_id, f"run {live.alloc_id} ({kind}) on GPUs {','.join(map(str, gpus))}")
        env = job_env.contract(job, self.workspace(job_id), gpus, live.alloc_id, live.strategy)
        return self.executor.spawn(Launch(argv, env, cwd, self.log_path(job_id), live.run_dir, int(job["nproc"]), gpus,
                                          account))

    def _begin_stop(self, live: Live, why: str, now: float) -> None:
        live.phase, live.stop_reason = "stopping", why
        live.deadline = now + self.config.grace_seconds
        with self.store.tx():
            self.store.execute("UPDATE allocations SET phase='stopping', stop_reason=?, stop_deadline=? WHERE id=?",
                               (why, live.deadline, live.alloc_id))
            self.store.event(live.job_id, {"preempt": "preempting", "migrate": "migrating",
                                           "cancel": "cancelling"}.get(why, why),
                             {"allocation": live.alloc_id}, now)
        self._fault("stop-intent")
        if live.proc is not None:
            self.executor.terminate(live.proc)
        self._fault("stop")
        if why == "preempt":
            self.stats.stopped += 1
        elif why == "migrate":
            self.stats.migrated += 1

    def _classify(self, job: Any, live: Live, code: int | None, failure: str | None) -> tuple[str, str, str]:
        """(new job state, allocation outcome, reason) for a run that ended with ``code``."""
        why = live.stop_reason
        if failure is not None:
            return "failed", "failed", failure
        if code == 0:
            return "completed", "completed", ""
        if why == "cancel" or job["cancel_requested"]:
            return "cancelled", "cancelled", job["reason"] or "cancelled on request"
        if why in ("preempt", "migrate"):
            return "preempted", "preempted" if why == "preempt" else "migrated", ""
        if code is None:
            return "preempted", "lost", "its process was lost (controller restart or kill); requeued, it " \
                                        "resumes from its checkpoint"
        if code == PREEMPTED_EXIT_CODE:
            if int(job["requeues"]) < MAX_UNASKED_REQUEUES:
                return "preempted", "requeued", (f"exited with the preemption code {code} without being asked "
                                                 "to stop; requeued")
            return "failed", "failed", (f"exited with the preemption code {code} without being asked to stop, "
                                        f"{MAX_UNASKED_REQUEUES + 1} times")
        return "failed", "failed", describe_exit(code)

    def _close(self, live: Live, code: int | None, end: float, *, failure: str | None = None) -> None:
        job = self.store.one("SELECT * FROM jobs WHERE id=?", (live.job_id,))
        assert job is not None
        progress, total = self._read_progress(live.job_id)
        state, outcome, reason = self._classify(job, live, code, failure)
        held = max(0.0, end - live.start_time)
        final = state in FINAL_STATES
        with self.store.tx() as c:
            c.execute("UPDATE allocations SET phase='ended', end_time=?, exit_code=?, outcome=? WHERE id=?",
                      (end, code, outcome, live.alloc_id))
            c.execute(
                "UPDATE jobs SET state=?, attained=attained+?, executed=executed+?, last_stop=?, "
                "progress=COALESCE(?, progress), total_reported=COALESCE(?, total_reported), exit_code=?, "
                "reason=?, finish_time=?, preemptions=preemptions+?, migrations=migrations+?, "
                "requeues=requeues+? WHERE id=?",
                (state, held * int(job["num_gpus"]), held, end, progress, total, code, reason,
                 end if final else None, int(outcome == "preempted"), int(outcome == "migrated"),
                 int(outcome == "requeued"), live.job_id))
            self.store.event(live.job_id, outcome, {"allocation": live.alloc_id, "exit_code": code,
                                                    "seconds": round(held, 3)}, end)
        self._fault("closed")
        self.live.pop(live.alloc_id, None)
        self.executor.release(str(live.run_dir))
        exit_text = "no exit code" if code is None else f"exit code {code}"
        self._append_log(live.job_id, f"run {live.alloc_id} ended: {outcome} ({exit_text})")
        if final:
            self._finished.append(live.job_id)
        if final or outcome in ("lost", "requeued"):
            self.wake()

    # ------------------------------------------------------------------ requests from the API
    def cancel(self, job_id: int, by: str) -> str:
        """Cancel a job: at once when it waits, via SIGTERM when it runs. Returns its state now."""
        now = time.time()
        with self.store.tx() as c:
            row = c.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            state = row["state"]
            if state in RUNNABLE_STATES:
                c.execute("UPDATE jobs SET state='cancelled', finish_time=?, reason=? WHERE id=?",
                          (now, f"cancelled by {by}", job_id))
                self.store.event(job_id, "cancelled", {"by": by}, now)
                state = "cancelled"
            elif state == "running":
                c.execute("UPDATE jobs SET cancel_requested=1, reason=? WHERE id=?", (f"cancelled by {by}", job_id))
                self.store.event(job_id, "cancel-requested", {"by": by}, now)
                self._cancel_hint = True
        self.wake()
        return str(state)
