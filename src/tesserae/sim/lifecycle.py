"""Lifecycle controls in a simulation: time limits, failures with retries and backoff, dependencies.

The same semantics as the runtime's (``tesserae.runtime.controller.lifecycle``), on the ``Controls`` a trace
gives (``traces.controls``):

- a run ends at its *cut*: the job's run time (``executed``, over all its runs) reaching its time
  limit (the job fails, timed out, never retried) or its ``cancel_after`` (its owner cancels it:
  a history's record of a cancellation), or a failing run reaching ``fail_after`` seconds
  of run time (the first ``failures`` runs fail; progress made so far is kept, as a job resumed
  from its checkpoint keeps it);
- a failed run with retries left requeues the job after ``retry_backoff * 2^(k-1)`` seconds (at
  most an hour): it re-arrives then, as a submission would;
- a job whose dependencies have not all ended waits outside the queue (the policy never sees it);
  when an ``after_ok`` dependency ends otherwise than completed (or is rejected) the job is
  cancelled at that instant, and so on down a chain.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from tesserae.core.jobs import Controls, JobStatus, JobTable, Outcome

MAX_BACKOFF = 3600.0


class SimLifecycle:
    """The controls of one simulation's rows (built only when some job has controls)."""

    def __init__(self, table: JobTable) -> None:
        self.t = table
        n = table.n
        self.controls: list[Controls] = [s.controls or Controls() for s in table.specs]
        row_of = {int(j): r for r, j in enumerate(table.job_id.tolist())}
        self.deps: list[list[tuple[int, bool]]] = [
            [(row_of[j], False) for j in c.after] + [(row_of[j], True) for j in c.after_ok] for c in self.controls]
        self.dependents: dict[int, list[int]] = {}
        for r, deps in enumerate(self.deps):
            for d, _ in deps:
                self.dependents.setdefault(d, []).append(r)
        self.limit = np.array([math.inf if c.time_limit is None else c.time_limit for c in self.controls])
        self.cancel_at = np.array([math.inf if c.cancel_after is None else c.cancel_after for c in self.controls])
        self.attempt_start = np.zeros(n)  # run time when the current attempt began
        self.cut = np.full(n, math.inf)  # run time at which the current run ends (failure or limit)
        for r in range(n):
            self._set_cut(r)
        self.waiting: set[int] = set()  # arrived, dependencies not met
        self._releases: list[tuple[float, int]] = []  # (time, row): retries after their backoff

    @staticmethod
    def build(table: JobTable) -> SimLifecycle | None:
        return SimLifecycle(table) if any(s.controls is not None for s in table.specs) else None

    def _set_cut(self, r: int) -> None:
        c = self.controls[r]
        fails = c.fail_after is not None and int(self.t.retries_used[r]) < c.failures
        fail_at = self.attempt_start[r] + c.fail_after if fails else math.inf  # type: ignore[operator]
        self.cut[r] = min(self.limit[r], self.cancel_at[r], fail_at)

    # ------------------------------------------------------------------ dependencies
    def _state(self, r: int) -> str:
        """``blocked``, ``ready`` or ``doomed`` (an after_ok dependency ended otherwise than completed)."""
        t = self.t
        blocked = False
        for d, ok in self.deps[r]:
            status = t.status[d]
            if status == JobStatus.REJECTED or (status == JobStatus.DONE and t.outcome[d] != Outcome.COMPLETED):
                if ok:
                    return "doomed"
            elif status != JobStatus.DONE:
                blocked = True
        return "blocked" if blocked else "ready"

    def arrive(self, r: int, now: float) -> tuple[bool, list[int]]:
        """A row arrives: whether it may be queued now, and the rows cancelled (it, and what waited on it)."""
        state = self._state(r)
        if state == "ready":
            return True, []
        if state == "blocked":
            self.waiting.add(r)
            return False, []
        return False, self._cancel(r, now)

    def ended(self, rows: list[int], now: float) -> tuple[list[int], list[int]]:
        """Rows reached a final state: the waiting rows now ready, and those cancelled in consequence."""
        ready: list[int] = []
        cancelled: list[int] = []
        work = list(rows)
        while work:
            r = work.pop()
            for w in self.dependents.get(r, ()):
                if w not in self.waiting:
                    continue
                state = self._state(w)
                if state == "ready":
                    self.waiting.discard(w)
                    ready.append(w)
                elif state == "doomed":
                    self.waiting.discard(w)
                    gone = self._cancel(w, now)
                    cancelled += gone
                    work += gone
        return ready, cancelled

    def _cancel(self, r: int, now: float) -> list[int]:
        t = self.t
        t.status[r] = JobStatus.DONE
        t.outcome[r] = Outcome.CANCELLED
        t.finish[r] = now
        t.last_stop[r] = now
        return [r]

    # ------------------------------------------------------------------ runs that end at their cut
    def end_run(self, r: int, now: float) -> Outcome | None:
        """The run of ``r`` reached its cut: the job's final outcome (cancelled, timed out or failed), or
        None when it is retried (it re-arrives after its backoff)."""
        t, c = self.t, self.controls[r]
        if t.executed[r] >= self.cancel_at[r] - 1e-9 and self.cancel_at[r] <= self.limit[r]:
            return Outcome.CANCELLED
        if t.executed[r] >= self.limit[r] - 1e-9:
            return Outcome.TIMED_OUT
        if int(t.retries_used[r]) >= c.retries:
            return Outcome.FAILED
        t.retries_used[r] += 1
        self.attempt_start[r] = t.executed[r]
        self._set_cut(r)
        delay = min(MAX_BACKOFF, c.retry_backoff * 2.0 ** (int(t.retries_used[r]) - 1))
        heapq.heappush(self._releases, (now + delay, r))
        return None

    def next_release(self) -> float | None:
        return self._releases[0][0] if self._releases else None

    def releases(self, now: float) -> list[int]:
        """Rows whose retry backoff is over by ``now``."""
        out = []
        while self._releases and self._releases[0][0] <= now + 1e-9:
            out.append(heapq.heappop(self._releases)[1])
        return out
