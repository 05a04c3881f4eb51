"""Where a job's files are, as the controller sees them, and the server's lines in a job's log.

``STATE/jobs/ID`` is the job's private folder (its log, ``output.log``, and one folder per run,
``runs/RUN``: a run's marker); the *workspace* (checkpoints, ``progress.json``, the default working
folder) is ``JOB_ROOT/ID``: the same folder in same-user mode, a folder the job's account owns
otherwise (see ``isolation``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tesserae.runtime.job import files as job_files


class JobPaths:
    def __init__(self, state_dir: Path, job_root: Path, log: Callable[[str], None]) -> None:
        self.state_dir = state_dir
        self.job_root = job_root
        self.log = log

    def job_dir(self, job_id: int) -> Path:
        """The job's private folder (its log and run records), in the state folder."""
        return self.state_dir / "jobs" / str(job_id)

    def run_dir(self, job_id: int, run_id: int) -> Path:
        return self.job_dir(job_id) / "runs" / str(run_id)

    def workspace(self, job_id: int) -> Path:
        """The job's own folder (checkpoints, progress, default working folder); the same as
        ``job_dir`` in same-user mode, under the job root with job accounts."""
        return self.job_root / str(job_id)

    def log_path(self, job_id: int) -> Path:
        return self.job_dir(job_id) / "output.log"

    def append_log(self, job_id: int, line: str) -> None:
        """A line of the server's own in the job's log; a failure is said in the server's log."""
        path = self.log_path(job_id)
        try:
            job_files.append_server_line(path, line)
        except OSError as e:
            self.log(f"job {job_id}: cannot write its log {path}: {e}")

    def read_progress(self, job_id: int) -> tuple[float | None, int | None]:
        """The job's own progress report, read as hostile input (see ``job.files``)."""
        return job_files.read_progress(self.workspace(job_id) / "progress.json")

    def read_progress_report(self, job_id: int) -> job_files.ProgressReport:
        """The whole progress report (with when and by which run it was written), read as hostile input."""
        return job_files.read_progress_report(self.workspace(job_id) / "progress.json")
