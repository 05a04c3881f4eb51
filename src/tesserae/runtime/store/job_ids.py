"""Ids of new jobs: never one handed out before, never one whose folder exists (issue 27, point 2).

The store's own counter (SQLite's ``AUTOINCREMENT`` sequence) is not enough: a write-ahead log lost
or moved aside (the recovery the server advises for a corrupt one) takes the latest submissions
with it, and the counter goes back to what the database file holds. The next job then got a lost
job's id, and its folders: the old run's log and checkpoint (``restored {'iteration': 5}``).

So every new job *claims* its id before the transaction that records it commits: its private folder
``STATE/jobs/ID`` is created (``mkdir``, which fails on a folder that exists, then the folder above
is fsynced), and an id whose folder, or workspace under the job root, exists is skipped. The job
folders thus record durably, outside the database, every id ever handed out: at start-up the
counter continues after the highest of them (``folder_floor``), whatever the database lost. The
ids are also reserved in blocks in ``store.json`` (``store.integrity``), which outlives the job
folders being moved aside.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from tesserae.runtime.job.paths import JobPaths
from tesserae.runtime.store.integrity import job_folder_ids


def folder_floor(state: Path, job_root: Path) -> int:
    """The highest id among the job folders of a state folder and its job root (0: none)."""
    ids = job_folder_ids(state / "jobs", job_root)
    return ids[-1] if ids else 0


class JobIds:
    """Claims the ids of new jobs (see the module docstring)."""

    def __init__(self, paths: JobPaths, reserve: Callable[[int], None]) -> None:
        self.paths = paths
        #: Records an id durably before it is used (``store.integrity.Sidecar.reserve``).
        self.reserve = reserve

    def claim(self, candidate: int) -> int:
        """The first id from ``candidate`` on whose folders do not exist; its private folder is made."""
        jobs = self.paths.state_dir / "jobs"
        jobs.mkdir(mode=0o700, exist_ok=True)
        job_id = candidate
        while True:
            self.reserve(job_id)
            workspace = self.paths.workspace(job_id)
            if workspace != self.paths.job_dir(job_id) and os.path.lexists(workspace):
                job_id += 1
                continue
            try:
                os.mkdir(self.paths.job_dir(job_id), 0o700)
            except FileExistsError:
                job_id += 1
                continue
            return job_id

    def sync(self) -> None:
        """Make the claimed folders durable (before the transaction that records their jobs commits)."""
        with contextlib.suppress(OSError):
            fd = os.open(self.paths.state_dir / "jobs", os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
