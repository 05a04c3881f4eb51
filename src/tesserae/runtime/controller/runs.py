"""The runs the controller holds, and every change to them, write-ahead.

A *run* is one start of a job on some GPUs (an ``allocations`` row, ``runs/RUN`` on disk). Every
change is committed to the store before the controller acts on it, so a crash at any point
leaves the store saying what may exist (``reconcile`` settles it at the next start):

- ``start``: the job goes ``running`` and the run is recorded ``starting`` (fault point
  ``start-intent``), then its process is started through the executor (``spawn``), then its pid
  is recorded and the run is ``running``;
- ``begin_stop``: the run is recorded ``stopping`` with its deadline (``stop-intent``), then it
  gets SIGTERM (``stop``); SIGKILL after the grace period is the reaper's (``reaping``);
- ``close``: the run's end, the job's new state (``outcomes.classify``, then ``lifecycle.retry``),
  its attained service and an event, in one transaction (``closed``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tesserae.runtime.controller import lifecycle
from tesserae.runtime.controller.faults import Faults
from tesserae.runtime.controller.outcomes import classify
from tesserae.runtime.executor.protocol import Executor, Launch, Run
from tesserae.runtime.job import env as job_env
from tesserae.runtime.job import output as job_output
from tesserae.runtime.job.isolation import Isolation, prepare_workspace
from tesserae.runtime.job.paths import JobPaths
from tesserae.runtime.store import allocations, jobs
from tesserae.runtime.store.allocations import RunEnd
from tesserae.runtime.store.database import FINAL_STATES, Store

if TYPE_CHECKING:
    from tesserae.runtime.controller.learning import RuntimeLearning


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


class RunBook:
    """The live runs (``live``, by run id) and the write-ahead steps that change them."""

    def __init__(self, store: Store, executor: Executor[Any], config: ControllerConfig, paths: JobPaths,
                 isolation: Isolation, faults: Faults, log: Callable[[str], None],
                 wake: Callable[[], None]) -> None:
        self.store, self.executor, self.config, self.paths = store, executor, config, paths
        self.isolation, self.faults, self.log = isolation, faults, log
        #: Called when a run's end frees GPUs or requeues a job: decide soon.
        self.wake = wake
        self.live: dict[int, Live] = {}
        self.stats = Stats()
        #: Jobs that reached a final state since the last decision (the policy's ``on_finish``).
        self.finished: list[int] = []
        #: Learned throughputs (``learning``): fed each run's reports, the last one when the run ends.
        self.learning: RuntimeLearning | None = None

    def running(self) -> dict[int, Live]:
        """The running runs, by job id."""
        return {live.job_id: live for live in self.live.values() if live.phase == "running"}

    def settled(self) -> bool:
        """No run is starting or stopping (a decision sees only runs that hold their GPUs for good)."""
        return all(live.phase == "running" for live in self.live.values())

    # ------------------------------------------------------------------ start
    def start(self, job_id: int, gpus: tuple[int, ...], partner: int | None, strategy: str | None) -> bool:
        now = time.time()
        started = allocations.record_start(self.store, job_id, gpus, partner, strategy, now, self.paths.run_dir)
        if started is None:
            return False  # cancelled, or finished while the plan was applied
        job, alloc_id, run_dir, kind = started.job, started.alloc_id, started.run_dir, started.kind
        self.faults.hit("start-intent")
        live = Live(alloc_id, job_id, gpus, now, run_dir, None, "starting", partner=partner, strategy=strategy)
        try:
            proc = self._spawn(job, live, kind)
        except Exception as e:  # whatever this job's spec or files do, only this job fails
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            why = " ".join(why.split())[:300] or type(e).__name__
            self.log(f"job {job_id}: cannot start: {why}")
            self.close(live, None, now, failure=f"cannot start: {why}")
            return False
        self.faults.hit("spawn")
        live.proc, live.phase = proc, "running"
        allocations.record_spawned(self.store, alloc_id, proc.pid, proc.ticks)
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
        argv = job_output.wrap(argv, job)  # --output/--error: opened by the job itself
        workspace = prepare_workspace(self.paths.job_root, job_id, account)
        cwd = Path(job["workdir"]) if job["workdir"] else workspace / "work"
        live.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.paths.append_log(job_id, f"run {live.alloc_id} ({kind}) on GPUs {','.join(map(str, gpus))}")
        env = job_env.contract(job, self.paths.workspace(job_id), gpus, live.alloc_id, live.strategy,
                               self._gpu_type(gpus))
        return self.executor.spawn(Launch(argv, env, cwd, self.paths.log_path(job_id), live.run_dir,
                                          int(job["nproc"]), gpus, account, job["cpus"], job["memory_mb"]))

    def _gpu_type(self, gpus: tuple[int, ...]) -> str | None:
        """The type of these GPUs in the executor's cluster (None: unknown, or several)."""
        cluster = self.executor.cluster
        if cluster is None or not gpus or max(gpus) >= cluster.num_gpus:
            return None
        types = {cluster.gpu_types[int(cluster.gpu_type[g])] for g in gpus}
        return types.pop() if len(types) == 1 else None

    # ------------------------------------------------------------------ stop
    def begin_stop(self, live: Live, why: str, now: float) -> None:
        """Record the stop (``preempt``, ``migrate`` or ``cancel``), then send SIGTERM."""
        live.phase, live.stop_reason = "stopping", why
        live.deadline = deadline = now + self.config.grace_seconds
        event = {"preempt": "preempting", "migrate": "migrating", "cancel": "cancelling"}.get(why, why)
        allocations.record_stop(self.store, live.alloc_id, live.job_id, why, deadline, event, now)
        self.faults.hit("stop-intent")
        if live.proc is not None:
            self.executor.terminate(live.proc)
        self.faults.hit("stop")
        if why == "preempt":
            self.stats.stopped += 1
        elif why == "migrate":
            self.stats.migrated += 1

    # ------------------------------------------------------------------ close
    def close(self, live: Live, code: int | None, end: float, *, failure: str | None = None) -> None:
        """Record how the run ended (``code`` None: lost) and what that makes of its job."""
        job = jobs.get(self.store, live.job_id)
        assert job is not None
        report = self.paths.read_progress_report(live.job_id)
        progress, total = report.iterations, report.total
        if self.learning is not None and live.phase != "starting":
            with self.learning.lock:
                self.learning.on_close(live.alloc_id, report, end)
        state, outcome, reason = classify(job, live.stop_reason, code, failure)
        state, reason, retry_at = lifecycle.retry(job, state, outcome, reason, end)
        held = max(0.0, end - live.start_time)
        final = state in FINAL_STATES
        allocations.record_end(self.store, RunEnd(
            live.alloc_id, live.job_id, end, code, outcome, state, reason, held, int(job["num_gpus"]), progress,
            total, final, retry_at, int(job["retries_used"]) + 1))
        self.faults.hit("closed")
        self.live.pop(live.alloc_id, None)
        self.executor.release(str(live.run_dir))
        exit_text = "no exit code" if code is None else f"exit code {code}"
        self.paths.append_log(live.job_id, f"run {live.alloc_id} ended: {outcome} ({exit_text})")
        if final:
            self.finished.append(live.job_id)
        if final or outcome in ("lost", "requeued") or retry_at is not None:
            self.wake()
