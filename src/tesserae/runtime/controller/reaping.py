"""Watching the runs every tick: reap the ended ones, escalate overdue stops, act on cancellations,
record progress, stop the jobs past their time limit.

A run has ended when its executor says so (``exited``); its exit code is the record its launcher
left (none: lost, the job is requeued). A run whose launcher has exited may still have processes
(a job that escaped its process group): its GPUs go to no one else until they are gone, so such
a run counts as stopping (decisions wait) while they are being killed. A run that was asked to
stop and is still there after the grace period gets SIGKILL; one that survives even that for
``KILL_TIMEOUT`` (or, where the executor fences runs with leases, until its lease is surely over:
``Executor.fence_seconds``) is written off as lost, loudly.
"""

from __future__ import annotations

import time

from tesserae.runtime.controller import lifecycle
from tesserae.runtime.controller.runs import Live, RunBook
from tesserae.runtime.store import allocations, jobs

#: After SIGKILL, how long a run may take to disappear before it is written off as lost.
KILL_TIMEOUT = 15.0


class Reaper:
    def __init__(self, runs: RunBook) -> None:
        self.runs = runs
        #: Set when a cancellation came through the API: look for it at the next tick, not the next second.
        self.cancel_hint = False
        self._last_progress = 0.0

    def poll(self, now: float) -> bool:
        """One tick; True when the executor says nodes joined or left (a reason to decide)."""
        changed = self.runs.executor.watch(now)
        self._reap(now)
        periodic = now - self._last_progress >= 1.0
        if self.cancel_hint or periodic:  # cancellations come through this process's API; look anyway each second
            self.cancel_hint = False
            self._cancellations(now)
        if periodic:
            self._last_progress = now
            self._progress(now)
            self._time_limits(now)
        return changed

    def _reap(self, now: float) -> None:
        runs, executor = self.runs, self.runs.executor
        for live in list(runs.live.values()):
            if live.proc is None or executor.exited(live.proc):
                code, t = executor.exit_code(live.proc, live.run_dir)
                if self._lingering(live, now, exit_recorded=t is not None):
                    continue  # processes of the run remain: its GPUs stay held until they are gone
                runs.faults.hit("exit-seen")
                if code is None:
                    runs.stats.lost += 1
                runs.close(live, code, now if t is None else min(t, now))
            elif live.phase == "stopping" and live.deadline is not None and now >= live.deadline:
                if live.killed_at is None:
                    runs.log(f"job {live.job_id}: no exit {runs.config.grace_seconds:g} s after SIGTERM; SIGKILL")
                    executor.kill(live.proc)
                    live.killed_at = now
                    runs.store.event(live.job_id, "killed", {"allocation": live.alloc_id})
                elif now - live.killed_at > max(KILL_TIMEOUT, executor.fence_seconds):
                    runs.log(f"job {live.job_id}: run {live.alloc_id} survived SIGKILL for "
                             f"{max(KILL_TIMEOUT, executor.fence_seconds):g} s; "
                             "written off as lost")
                    runs.close(live, None, now)

    def _cancellations(self, now: float) -> None:
        runs = self.runs
        for alloc_id in allocations.cancelling(runs.store):
            live = runs.live.get(alloc_id)
            if live is not None and live.phase == "running":
                runs.begin_stop(live, "cancel", now)

    def _time_limits(self, now: float) -> None:
        """Stop the running jobs past their time limit (``lifecycle``; checked each second)."""
        runs = self.runs
        limits = jobs.running_time_limits(runs.store)
        for live in list(runs.live.values()):
            if live.phase == "running" and live.job_id in limits:
                executed, limit = limits[live.job_id]
                if lifecycle.timed_out(executed, now - live.start_time, limit):
                    runs.log(f"job {live.job_id}: reached its time limit of {limit:g} s; stopping it")
                    runs.begin_stop(live, "timeout", now)

    def _progress(self, now: float) -> None:
        runs = self.runs
        read = [(live, runs.paths.read_progress_report(live.job_id)) for live in runs.live.values()]
        jobs.record_progress(runs.store, [(r.iterations, r.total, live.job_id) for live, r in read
                                          if r.iterations is not None])
        learning = runs.learning
        if learning is not None:  # every report of a running job feeds the estimator (``learning``)
            with learning.lock:
                learning.track(((live.alloc_id, live.job_id, live.gpus, live.start_time)
                                for live in runs.live.values() if live.phase == "running"), now)
                for live, report in read:
                    if live.phase == "running":
                        learning.on_report(live.alloc_id, report, now)

    def _lingering(self, live: Live, now: float, *, exit_recorded: bool) -> bool:
        """True while processes of a run whose launcher has exited remain (they are being killed).

        A job's GPUs go to no one else until its last process is gone: such a run counts as
        stopping (decisions wait) until its leftovers have died, or for at most ``KILL_TIMEOUT``
        after the first SIGKILL (an unkillable process is then written off, loudly)."""
        runs, executor = self.runs, self.runs.executor
        marker = str(live.run_dir)
        left = executor.leftovers(marker, exit_recorded=exit_recorded)
        if not left:
            return False
        executor.kill_marker(marker)
        if live.lingering_since is None:
            live.lingering_since, live.phase = now, "stopping"
            runs.log(f"job {live.job_id}: run {live.alloc_id} ended but {len(left)} of its processes remain; "
                     "killing them before its GPUs are handed out again")
            runs.store.event(live.job_id, "killed", {"allocation": live.alloc_id, "leftovers": len(left)}, now)
            return True
        if now - live.lingering_since <= KILL_TIMEOUT:
            return True
        runs.log(f"job {live.job_id}: processes {left} of run {live.alloc_id} survived SIGKILL for "
                 f"{KILL_TIMEOUT:g} s; written off")
        return False

    def end_leftovers(self, marker: str, *, exit_recorded: bool) -> list[int]:
        """Kill what is left of a run whose launcher is gone, and wait (at most ``KILL_TIMEOUT``)
        until it has died. Returns what was found."""
        executor = self.runs.executor
        found = executor.leftovers(marker, exit_recorded=exit_recorded)
        left, deadline = found, time.monotonic() + KILL_TIMEOUT
        while left and time.monotonic() < deadline:
            executor.kill_marker(marker)
            time.sleep(0.02)
            left = executor.leftovers(marker, exit_recorded=exit_recorded)
        if left:
            self.runs.log(f"processes {left} of the run {marker} survived SIGKILL for {KILL_TIMEOUT:g} s")
        return found
