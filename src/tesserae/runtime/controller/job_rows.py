"""Every job's stored row, kept by the controller between decisions (issue 27, point 6).

Before, each decision read every job ever submitted (100,000 rows: seconds of CPU a round, and a
round at every arrival) and rebuilt the scheduler's table from them. Now the first decision reads
them all; each later one reads only the jobs submitted since, the jobs the store's change log
(``job_changes``, filled by a trigger on every update of a job that is not a running job's own) names,
and the running jobs (whose progress and held time move on). An ended job's row never changes again.

``changed`` (row indices) is what the caller must refresh in the table; ``open`` the rows of the jobs
that have not ended, the only ones a decision looks at one by one.
"""

from __future__ import annotations

from typing import Any

from tesserae.runtime.store import jobs
from tesserae.runtime.store.database import FINAL_STATES, Store


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
        self._mark = 0

    def refresh(self) -> list[int]:
        """Read what changed since the last call (everything the first time); returns the row indices
        read again or added, in order."""
        if not self.rows:
            mark = jobs.change_mark(self.store)  # before the rows: a change after it is read next time too
            fresh = jobs.every_job(self.store)
        else:
            mark, changed = jobs.changed_since(self.store, self._mark)
            running = [j for j in (int(self.rows[i]["id"]) for i in self.open) if self.states[j] == "running"]
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
            if r["state"] in FINAL_STATES:
                self.open.discard(i)
            else:
                self.open.add(i)
            touched.append(i)
        if mark > self._mark:
            jobs.forget_changes(self.store, mark)
            self._mark = mark
        return sorted(set(touched))

    def open_rows(self) -> list[Any]:
        """The rows of the jobs not ended, in id order."""
        return [self.rows[i] for i in sorted(self.open)]
