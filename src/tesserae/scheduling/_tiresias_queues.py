"""Tiresias' discretized multi-level queues, shared by 2D-LAS and 2D-Gittins (DESIGN §3).

State per job row, kept in this policy object (sized lazily to ``table.n``, reset when a new table
comes in; no global state): the queue it is in, the instant it entered that queue, and the
attained GPU-seconds and executed wall seconds it had when it last entered queue 0 (the
"counter", reset by a promotion).

- Queue ``q`` holds jobs whose GPU-seconds attained since they last entered queue 0 lie in
  ``[T[q-1], T[q])`` (``T[-1] = 0``, ``T[K-1] = inf``).
- Demotion: a job crossing ``T[q]`` moves to the TAIL of queue ``q+1`` at the crossing instant.
  Attained service grows at ``num_gpus`` GPU-seconds per second while a job holds its GPUs, so
  the instant is computed exactly: ``t = ref - (attained_since_reset - T[q]) / num_gpus`` where
  ``ref`` is now for a running job and its last stop otherwise. This is exact whether the policy
  sees the job at the crossing (event-driven) or only at the next round boundary (round mode).
- Promotion (PromoteKnob ``P`` > 0): a waiting job in a queue below 0 that has run since its last
  reset goes back to the tail of queue 0, counter reset, at ``last_stop + P x executed`` where
  executed is the wall time it has run since its last reset (as in Tiresias' simulator, which
  resets ``executed_time`` on promotion). ``P = 0`` disables the guard.
- Order (2D-LAS): queues top-down; within a queue, running jobs that were already in it at the
  previous decision keep their place (no thrashing between equals), then queue-entry time, then
  job id. A running job demoted since the previous decision is at the tail, like Tiresias.
- ``next_event``: the earliest future demotion of a running job or promotion of a waiting one,
  so event-driven simulation decides at exactly that instant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.scheduling.base import SchedulingPolicy

DEFAULT_THRESHOLDS: tuple[float, ...] = (3600.0,)
DEFAULT_PROMOTE_KNOB = 0.0
#: Attained GPU-seconds this close below a threshold count as crossed: float noise from stopping
#: the clock exactly at a computed crossing instant must not leave a job a hair short of it.
SERVICE_EPS = 1e-4
#: Seconds of tolerance on a promotion instant, for the same reason.
TIME_EPS = 1e-6


def check_thresholds(queues: Sequence[float] | None) -> np.ndarray:
    values = np.asarray(DEFAULT_THRESHOLDS if queues is None else tuple(queues), dtype=np.float64)
    if values.ndim != 1 or not np.isfinite(values).all() or (values <= 0).any() or (np.diff(values) <= 0).any():
        raise InputError(f"queue thresholds {list(map(float, values.ravel()))} must be positive, finite and "
                         "strictly increasing GPU-seconds", field="queues")
    return values


def check_knob(promote_knob: float | None) -> float:
    p = DEFAULT_PROMOTE_KNOB if promote_knob is None else float(promote_knob)
    if not math.isfinite(p) or p < 0:
        raise InputError(f"promote knob {p} must be a finite number >= 0 (0 disables it)", field="promote-knob")
    return p


class TiresiasQueues(SchedulingPolicy):
    """Discretized 2D-LAS; subclasses change only the order within a queue (``_within_queue``)."""

    time_slicing: ClassVar[bool] = True

    def __init__(self, queues: Sequence[float] | None = None, promote_knob: float | None = None) -> None:
        self.thresholds = check_thresholds(queues)
        self.num_queues = int(self.thresholds.size) + 1
        self.promote_knob = check_knob(promote_knob)
        self._table: JobTable | None = None
        self._reset(0)

    @classmethod
    def from_options(cls, queues: Sequence[float] | None = None, promote_knob: float | None = None,
                     **_ignored: Any) -> TiresiasQueues:
        return cls(queues=queues, promote_knob=promote_knob)

    # ------------------------------------------------------------------ per-row state
    def _reset(self, n: int) -> None:
        self._seen = np.zeros(n, dtype=bool)
        self._queue = np.zeros(n, dtype=np.int64)
        self._entry = np.zeros(n)
        self._att0 = np.zeros(n)  # attained GPU-seconds when the job last entered queue 0
        self._exec0 = np.zeros(n)  # executed wall seconds when the job last entered queue 0
        self._last_decision = -math.inf
        self.demotions = 0
        self.promotions = 0

    def _ensure(self, table: JobTable) -> None:
        if table is not self._table:
            self._table = table
            self._reset(table.n)
            return
        grow = table.n - self._seen.size
        if grow > 0:
            self._seen = np.concatenate([self._seen, np.zeros(grow, dtype=bool)])
            self._queue = np.concatenate([self._queue, np.zeros(grow, dtype=np.int64)])
            self._entry = np.concatenate([self._entry, np.zeros(grow)])
            self._att0 = np.concatenate([self._att0, np.zeros(grow)])
            self._exec0 = np.concatenate([self._exec0, np.zeros(grow)])

    def queue_of(self, rows: np.ndarray) -> np.ndarray:
        """Current queue of each row (as of the latest ``order`` call)."""
        return self._queue[rows]

    def entry_of(self, rows: np.ndarray) -> np.ndarray:
        """Instant each row entered its current queue (as of the latest ``order`` call)."""
        return self._entry[rows]

    def service_since_reset(self, table: JobTable, rows: np.ndarray) -> np.ndarray:
        return table.attained[rows] - self._att0[rows]

    def _update(self, table: JobTable, rows: np.ndarray, now: float) -> None:
        """Admit new rows to queue 0, then apply every demotion and promotion due by ``now``."""
        self._ensure(table)
        new = rows[~self._seen[rows]]
        if new.size:
            self._seen[new] = True
            self._queue[new] = 0
            self._entry[new] = table.submit[new]
            self._att0[new] = table.attained[new]
            self._exec0[new] = table.executed[new]
        if rows.size == 0:
            return
        status = table.status[rows]
        if self.thresholds.size:
            since = table.attained[rows] - self._att0[rows]
            target = np.searchsorted(self.thresholds, since + SERVICE_EPS, side="right")
            down = target > self._queue[rows]
            if down.any():
                r = rows[down]
                ref = np.where(status[down] == JobStatus.RUNNING, now, table.last_stop[r])
                crossed = self.thresholds[target[down] - 1]
                instant = ref - np.maximum(since[down] - crossed, 0.0) / table.num_gpus[r]
                self.demotions += int((target[down] - self._queue[r]).sum())
                self._entry[r] = np.maximum(instant, self._entry[r])
                self._queue[r] = target[down]
        if self.promote_knob > 0:
            waiting = (status == JobStatus.QUEUED) & (self._queue[rows] > 0)
            if waiting.any():
                r = rows[waiting]
                ran = table.executed[r] - self._exec0[r]
                at = table.last_stop[r] + self.promote_knob * ran
                due = (ran > 0) & (at <= now + TIME_EPS)
                if due.any():
                    p = r[due]
                    self._queue[p] = 0
                    self._entry[p] = np.minimum(at[due], now)
                    self._att0[p] = table.attained[p]
                    self._exec0[p] = table.executed[p]
                    self.promotions += int(p.size)

    # ------------------------------------------------------------------ protocol
    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        rows = np.asarray(active, dtype=np.int64)
        self._update(table, rows, now)
        if rows.size == 0:
            self._last_decision = now
            return rows
        key = self._within_queue(table, rows, now)
        out = rows[np.lexsort((*reversed(key), self._queue[rows]))]
        self._last_decision = now
        return out

    def _fifo_keys(self, table: JobTable, rows: np.ndarray) -> tuple[np.ndarray, ...]:
        running = table.status[rows] == JobStatus.RUNNING
        holds = running & (self._entry[rows] <= self._last_decision + TIME_EPS)
        return (~holds, self._entry[rows], table.job_id[rows])

    def _within_queue(self, table: JobTable, rows: np.ndarray, now: float) -> tuple[np.ndarray, ...]:
        """Sort keys inside a queue, most significant first."""
        return self._fifo_keys(table, rows)

    def next_event(self, table: JobTable, active: np.ndarray, running: np.ndarray, now: float) -> float:
        self._ensure(table)
        best = math.inf
        run = np.asarray(running, dtype=np.int64)
        run = run[self._seen[run]]
        if run.size and self.thresholds.size:
            q = self._queue[run]
            m = q < self.thresholds.size
            if m.any():
                r = run[m]
                since = table.attained[r] - self._att0[r]
                t = now + (self.thresholds[q[m]] - since) / table.num_gpus[r]
                t = t[t > now]
                if t.size:
                    best = min(best, float(t.min()))
        if self.promote_knob > 0:
            act = np.asarray(active, dtype=np.int64)
            act = act[self._seen[act]]
            waiting = act[(table.status[act] == JobStatus.QUEUED) & (self._queue[act] > 0)]
            if waiting.size:
                ran = table.executed[waiting] - self._exec0[waiting]
                at = table.last_stop[waiting] + self.promote_knob * ran
                at = at[(ran > 0) & (at > now)]
                if at.size:
                    best = min(best, float(at.min()))
        return best

    def summary(self) -> dict[str, Any]:
        return {
            "queue_thresholds": [float(x) for x in self.thresholds],
            "promote_knob": self.promote_knob,
            "demotions": self.demotions,
            "promotions": self.promotions,
        }
