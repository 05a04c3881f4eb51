"""Tiresias' discretized multi-level queues, shared by 2D-LAS and 2D-Gittins (DESIGN §3).

The queues follow SymbioticLab/Tiresias' own simulator (``run_sim.py``, ``dlas_sim_jobs``): each
queue is a *list whose order persists* from one decision to the next.

- A new job goes to the tail of queue 0.
- Demotion: a job whose GPU-seconds attained since it last entered queue 0 reach ``T[q]`` goes to
  the TAIL of queue ``q+1``. Attained service grows at ``num_gpus`` GPU-seconds per second while a
  job holds its GPUs, so the crossing instant is exact: ``t = ref - (attained_since_reset - T[q]) /
  num_gpus``, where ``ref`` is now for a running job and its last stop otherwise. Tiresias'
  simulator keeps time in whole seconds: its timer wakes a running job at the first whole second
  at or after the crossing (``ceil((T[q] - GPU-seconds) / num_gpu)`` seconds on), and any event
  before that finds the job still in its queue. So does this policy (``tick``, default 1 s):
  event-driven simulation decides at the first tick at or after a crossing (``next_event``), and
  a decision demotes every job whose crossing is at or before it. With whole-second traces this
  is the peer's clock exactly; ``tick=0`` demotes at the exact crossing.
- Promotion (PromoteKnob ``P`` > 0, Tiresias' ``solve_starvation``): a waiting job in a queue below
  0 goes back to the tail of queue 0, its counter reset, once the time it has spent waiting since
  it first ran after its last reset reaches ``P x`` the wall time it has run since that reset.
  As in Tiresias, the waiting time adds up over every wait since that first run (Tiresias'
  ``last_pending_time`` is only zeroed by a promotion), so the promotion instant is
  ``first_run_since_reset + (1 + P) x executed_since_reset``. ``P = 0`` disables the guard.
- Jobs moved at the same decision are appended in the order of their instants; on a tie, new
  jobs first, then the others in arrival order (Tiresias appends arrivals, then walks its
  runnable list, which is in arrival order).
- After every pass the jobs that did not get GPUs move behind those that did, in each queue,
  keeping their relative order. So a job that has started stays ahead of jobs that entered its
  queue later, even after it is preempted. The policy learns who got GPUs from the job status it
  sees at the next decision (in the simulator and the runtime alike, a job's status changes only at
  decisions and completions), and applies that move first.
- Order of a pass: queues top-down; within a queue, the list order (2D-LAS). 2D-Gittins sorts each
  list by its own keys first, keeping list order on ties, and the sorted order persists, as
  Tiresias' in-place ``queue.sort`` does.

State per job row lives in this policy object (sized lazily to ``table.n``, reset when a new table
comes in; no global state): queue, position key (unique, from one counter: a larger key is later in
its queue), the attained GPU-seconds and executed seconds at the last reset (entry to queue 0), and
when it first ran after that reset.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import Field, field_validator

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.core.plugins import FloatList, PluginOptions
from tesserae.scheduling.base import SchedulingPolicy

DEFAULT_THRESHOLDS: tuple[float, ...] = (3600.0,)
DEFAULT_PROMOTE_KNOB = 0.0
#: Attained GPU-seconds this close below a threshold count as crossed: float noise from stopping
#: the clock exactly at a computed crossing instant must not leave a job a hair short of it.
SERVICE_EPS = 1e-4
#: Seconds of tolerance on a promotion instant, and for two instants to count as simultaneous.
TIME_EPS = 1e-6
#: The clock demotions take effect on (s): Tiresias' simulator counts whole seconds.
DEFAULT_TICK = 1.0


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


class QueuesOptions(PluginOptions):
    """The queues of Tiresias' policies (``--tiresias-thresholds``, ``--promote-knob``)."""

    queues: FloatList | None = Field(None, description="queue thresholds in attained GPU-seconds, increasing "
                                     "(K thresholds make K+1 queues; default 3600)")
    promote_knob: float | None = Field(None, ge=0, allow_inf_nan=False,
                                       description="starvation guard P (0 = off, the default)")
    tick: float = Field(DEFAULT_TICK, ge=0, allow_inf_nan=False,
                        description="seconds of the clock demotions take effect on: 1 = Tiresias' whole "
                        "seconds (the default), 0 = the exact crossing")

    @field_validator("queues")
    @classmethod
    def _thresholds(cls, v: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if v is not None:
            try:
                check_thresholds(v)
            except InputError as e:
                raise ValueError(e.message) from None
        return v


class TiresiasQueues(SchedulingPolicy):
    """Discretized 2D-LAS; a subclass may sort each queue's list first (``_within_queue``)."""

    time_slicing: ClassVar[bool] = True
    orders_inside_queues: ClassVar[bool] = True
    Options: ClassVar[type[PluginOptions]] = QueuesOptions

    def __init__(self, queues: Sequence[float] | None = None, promote_knob: float | None = None,
                 tick: float = DEFAULT_TICK) -> None:
        self.thresholds = check_thresholds(queues)
        self.num_queues = int(self.thresholds.size) + 1
        self.promote_knob = check_knob(promote_knob)
        if not (math.isfinite(tick) and tick >= 0):
            raise ValueError(f"tick {tick} must be a finite number of seconds >= 0")
        self.tick = float(tick)
        self._table: JobTable | None = None
        self._reset(0)

    # ------------------------------------------------------------------ per-row state
    def _reset(self, n: int) -> None:
        self._seen = np.zeros(n, dtype=bool)
        self._queue = np.zeros(n, dtype=np.int64)
        self._pos = np.zeros(n, dtype=np.int64)  # list position key, unique; larger = later
        self._att0 = np.zeros(n)  # attained GPU-seconds when the job last entered queue 0
        self._exec0 = np.zeros(n)  # executed wall seconds when the job last entered queue 0
        self._run0 = np.full(n, math.nan)  # when it first ran after that (nan: not yet)
        self._next_pos = 0
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
            self._pos = np.concatenate([self._pos, np.zeros(grow, dtype=np.int64)])
            self._att0 = np.concatenate([self._att0, np.zeros(grow)])
            self._exec0 = np.concatenate([self._exec0, np.zeros(grow)])
            self._run0 = np.concatenate([self._run0, np.full(grow, math.nan)])

    def _take_positions(self, rows: np.ndarray) -> None:
        """Give ``rows`` (in this order) the next positions: the tails of their queues."""
        self._pos[rows] = np.arange(self._next_pos, self._next_pos + rows.size)
        self._next_pos += int(rows.size)

    def queue_of(self, rows: np.ndarray) -> np.ndarray:
        """Current queue of each row (as of the latest ``order`` call)."""
        return self._queue[rows]

    def queue_lists(self, rows: np.ndarray) -> list[list[int]]:
        """The rows of each queue in list order (as of the latest ``order`` call): for tests and reports."""
        rows = np.asarray(rows, dtype=np.int64)
        rows = rows[self._seen[rows]]
        rows = rows[np.lexsort((self._pos[rows], self._queue[rows]))]
        return [rows[self._queue[rows] == q].tolist() for q in range(self.num_queues)]

    def on_tick(self, t: np.ndarray) -> np.ndarray:
        """The first tick at or after each instant (one within TIME_EPS after a tick counts as on it)."""
        if self.tick <= 0:
            return t
        return np.ceil((t - TIME_EPS) / self.tick) * self.tick

    def service_since_reset(self, table: JobTable, rows: np.ndarray) -> np.ndarray:
        return table.attained[rows] - self._att0[rows]

    def _update(self, table: JobTable, rows: np.ndarray, now: float) -> None:
        """Close the previous pass, then append new jobs and every demotion and promotion due by ``now``."""
        self._ensure(table)
        seen = self._seen[rows]
        old, new = rows[seen], rows[~seen]
        status = table.status[old]
        running = status == JobStatus.RUNNING
        # The previous pass: who did not get GPUs moves behind who did, keeping their relative order.
        waiting = old[~running]
        if waiting.size:
            self._take_positions(waiting[np.argsort(self._pos[waiting], kind="stable")])
        moved: list[np.ndarray] = []  # rows appended at this decision
        when: list[np.ndarray] = []  # their instants
        if new.size:
            self._seen[new] = True
            self._queue[new] = 0
            self._att0[new] = table.attained[new]
            self._exec0[new] = table.executed[new]
            self._run0[new] = math.nan
            moved.append(new)
            when.append(np.minimum(table.submit[new], now))
        # A job seen running for the first time since its reset has run without a break since it
        # started: that start is ``now`` less what it has executed since the reset.
        first_run = rows[(table.status[rows] == JobStatus.RUNNING) & np.isnan(self._run0[rows])]
        self._run0[first_run] = now - (table.executed[first_run] - self._exec0[first_run])
        if old.size and self.thresholds.size:
            since = table.attained[old] - self._att0[old]
            target = np.searchsorted(self.thresholds, since + SERVICE_EPS, side="right")
            down = target > self._queue[old]
            if down.any():
                r = old[down]
                ref = np.where(running[down], now, table.last_stop[r])
                crossed = self.thresholds[target[down] - 1]
                # Demoted when the clock first ticks after the crossing (or now, if sooner).
                instant = np.minimum(self.on_tick(ref - np.maximum(since[down] - crossed, 0.0) / table.num_gpus[r]),
                                     now)
                self.demotions += int((target[down] - self._queue[r]).sum())
                self._queue[r] = target[down]
                moved.append(r)
                when.append(instant)
        if self.promote_knob > 0 and old.size:
            cand = (~running) & (self._queue[old] > 0)
            if cand.any():
                r = old[cand]
                ran = table.executed[r] - self._exec0[r]
                at = self._run0[r] + (1.0 + self.promote_knob) * ran
                due = (ran > 0) & (at <= now + TIME_EPS)  # nan (never ran since reset) is never due
                if due.any():
                    p = r[due]
                    self._queue[p] = 0
                    self._att0[p] = table.attained[p]
                    self._exec0[p] = table.executed[p]
                    self._run0[p] = math.nan
                    self.promotions += int(p.size)
                    moved.append(p)
                    when.append(np.clip(at[due], table.last_stop[p], now))
        if moved:
            self._append(rows, moved, when, now, new.size > 0)

    def _append(self, rows: np.ndarray, moved: list[np.ndarray], when: list[np.ndarray], now: float,
                has_new: bool) -> None:
        """Append the moved rows to their queues' tails: by instant, then new jobs first, then arrival order."""
        r = np.concatenate(moved)
        if r.size == 1:
            self._take_positions(r)
            return
        t = np.concatenate(when)
        t = np.where(now - t <= TIME_EPS, now, t)
        kind = np.ones(r.size, dtype=np.int8)
        if has_new:
            kind[:moved[0].size] = 0
        # ``rows`` (the active rows) are in arrival order: rank by position in it.
        rank = np.empty(int(rows.max()) + 1, dtype=np.int64)
        rank[rows] = np.arange(rows.size)
        self._take_positions(r[np.lexsort((rank[r], kind, t))])

    # ------------------------------------------------------------------ protocol
    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        rows = np.asarray(active, dtype=np.int64)
        self._update(table, rows, now)
        if rows.size == 0:
            return rows
        keys = self._within_queue(table, rows, now)
        out = rows[np.lexsort((self._pos[rows], *reversed(keys), self._queue[rows]))]
        if keys:
            self._take_positions(out)  # the sorted order persists, as Tiresias' in-place sort
        return out

    def _within_queue(self, table: JobTable, rows: np.ndarray, now: float) -> tuple[np.ndarray, ...]:
        """Sort keys inside a queue, most significant first, before the list order; none for 2D-LAS."""
        return ()

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
                t = self.on_tick(now + (self.thresholds[q[m]] - since) / table.num_gpus[r])
                t = t[t > now]
                if t.size:
                    best = min(best, float(t.min()))
        if self.promote_knob > 0:
            act = np.asarray(active, dtype=np.int64)
            act = act[self._seen[act]]
            waiting = act[(table.status[act] == JobStatus.QUEUED) & (self._queue[act] > 0)]
            if waiting.size:
                ran = table.executed[waiting] - self._exec0[waiting]
                at = self._run0[waiting] + (1.0 + self.promote_knob) * ran
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
