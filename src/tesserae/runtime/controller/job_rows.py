"""Every job's stored row, kept by the controller between decisions (issue 27, point 6).

Before, each decision read every job ever submitted (100,000 rows: seconds of CPU a round, and a
round at every arrival) and rebuilt the scheduler's table from them. Now the first decision reads
them all; each later one reads only the jobs submitted since, the jobs the store's change log
(``job_changes``, filled by a trigger on every update of a job that is not a running job's own) names,
and the running jobs (whose progress and held time move on). An ended job's row never changes again.

``changed`` (row indices) is what the caller must refresh in the table; ``open`` the rows of the jobs
that have not ended. A decision used to look at each of those one by one (46,000 rows: most of a
second of every decision, issue 27); now each row is sorted when it is read into what a decision needs
of it: a waiting job free of every lifecycle control (``plain``: in every decision), one with a
dependency or a retry's backoff (``special``: checked at each decision, ``lifecycle.blocked``), one that
runs. A held job, or one being cancelled, is in none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tesserae.runtime.controller import lifecycle
from tesserae.runtime.store import jobs
from tesserae.runtime.store.database import ACTIVE_STATES, FINAL_STATES, RUNNABLE_STATES, Store


class JobRows:
    def __init__(self, store: Store) -> None:
        self.store = store
        #: Row i: the i-th job ever submitted (id order), as last read.
        self.rows: list[Any] = []
        self.row_of: dict[int, int] = {}
        #: Every job's state, by id.
        self.states: dict[int, str] = {}
        #: Row indices of the jobs not ended.
        self.open: set[int] = set()
        #: Of those: waiting, not held, not being cancelled, no dependency, no retry time (always active);
        self.plain: set[int] = set()
        #: waiting, not held, not being cancelled, with a dependency or a retry time (active when not blocked);
        self.special: set[int] = set()
        #: in state running; active with a retry time (``retry_at``); waiting with dependencies (held or not).
        self.running: set[int] = set()
        self.with_retry: set[int] = set()
        self.with_deps: set[int] = set()
        #: open and pinned to a node (``--node``).
        self.pinned: set[int] = set()
        self._mark = 0

    def refresh(self) -> list[int]:
        """Read what changed since the last call (everything the first time); returns the row indices
        read again or added, in order."""
        if not self.rows:
            mark = jobs.change_mark(self.store)  # before the rows: a change after it is read next time too
            fresh = jobs.every_job(self.store)
        else:
            mark, changed = jobs.changed_since(self.store, self._mark)
            running = [int(self.rows[i]["id"]) for i in self.running]
            again = sorted({j for j in changed if j in self.row_of} | set(running))
            fresh = jobs.rows_of(self.store, again) + jobs.after_id(self.store, int(self.rows[-1]["id"]))
        touched = []
        for r in fresh:
            job_id = int(r["id"])
            i = self.row_of.get(job_id)
            if i is None:
                i = self.row_of[job_id] = len(self.rows)
                self.rows.append(r)
            else:
                self.rows[i] = r
            self.states[job_id] = str(r["state"])
            self._sort(i, r)
            touched.append(i)
        if mark > self._mark:
            jobs.forget_changes(self.store, mark)
            self._mark = mark
        return sorted(set(touched))

    def _sort(self, i: int, r: Any) -> None:
        """File row ``i`` (just read as ``r``) under what a decision needs of it (see the module docstring)."""
        for kind in (self.open, self.plain, self.special, self.running, self.with_retry, self.with_deps,
                     self.pinned):
            kind.discard(i)
        state = r["state"]
        if state in FINAL_STATES:
            return
        self.open.add(i)
        if r["node"]:
            self.pinned.add(i)
        deps = r["after"] not in ("", "[]")
        if state == "running":
            self.running.add(i)
        if state in ACTIVE_STATES and r["retry_at"] is not None:
            self.with_retry.add(i)
        if state in RUNNABLE_STATES:
            if deps:
                self.with_deps.add(i)
            if not r["held"] and not r["cancel_requested"]:
                (self.special if deps or r["retry_at"] is not None else self.plain).add(i)

    def open_rows(self) -> list[Any]:
        """The rows of the jobs not ended, in id order."""
        return [self.rows[i] for i in sorted(self.open)]

    def rows_at(self, kind: set[int]) -> list[Any]:
        """The rows of one of the sets above, in id order."""
        return [self.rows[i] for i in sorted(kind)]

    def active(self, running: Mapping[int, Any], now: float) -> list[int]:
        """The rows a decision at ``now`` takes (in id order): every job with an open run (``running``, by
        job id), and every waiting job no lifecycle control blocks (held, a dependency, a backoff)."""
        out = set(self.plain)
        rows, states = self.rows, self.states
        out.update(i for i in self.special if lifecycle.blocked(rows[i], states, now) is None)
        out.update(i for j in running if (i := self.row_of.get(j)) is not None and i in self.open)
        return sorted(out)
