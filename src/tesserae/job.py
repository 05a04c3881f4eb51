"""Job-side library: what a training script imports to cooperate with the Tesserae runtime.

It reports progress (iterations), saves and restores checkpoints, and turns a preemption
(SIGTERM from the controller) into "checkpoint, then exit with :data:`PREEMPTED_EXIT_CODE`", so
that the controller requeues the job and the next run resumes where this one stopped::

    from tesserae.job import Job

    job = Job(total_iterations=1000)            # installs the SIGTERM handler
    state = job.restore() or {"iteration": 0}   # the latest checkpoint, or None on a first run
    for it in range(state["iteration"], 1000):
        train_one_step()
        state["iteration"] = it + 1
        job.report(it + 1)                      # progress, cheap (rate-limited file write)
        if job.preempted:                       # SIGTERM arrived: save and leave
            job.save(state)
            job.exit_preempted()
    job.complete()

A job of several processes (``tesserae submit --nproc N``: ``RANK`` 0..N-1, ``WORLD_SIZE`` N) runs
the same script in every process. The library is rank-aware: **rank 0 is the only writer** of the
progress file and of checkpoints (on the other ranks :meth:`Job.report` only counts and
:meth:`Job.save` writes nothing and returns None), so data-parallel ranks, which hold the same
state, can all call it. Every rank reads the checkpoint with :meth:`Job.restore`. Ranks that
hold different state (sharded models) write their own files under :meth:`Job.checkpoint_path`.
:meth:`Job.lock_run` guards against two runs of one job at once: rank 0 takes the lock on behalf
of its whole run, so the lock is per run, not per rank.

**Run epochs.** Each run of a job has a number that grows from run to run (``TESSERAE_RUN_ID``).
Rank 0 records it in the checkpoint folder (``run.epoch``) when it creates its :class:`Job`, and
every checkpoint and progress write first checks, under a lock on that file, that no newer run
has recorded a larger one: a stale copy of the job (one on a node cut off from the server that
somehow outlived its lease) then gets :class:`StaleRunError` instead of overwriting the newer
run's checkpoint or progress. Files a job writes itself can be fenced the same way with
``with job.fenced(): ...``.

Plain Python state (JSON-able) is stored as JSON; anything else goes through ``torch.save`` when
PyTorch is installed (state dicts, tensors), else ``pickle``. Writes are atomic (temporary file,
fsync, rename), and only the latest checkpoint is kept, so a crash in the middle of a save never
leaves a torn checkpoint behind.

Outside Tesserae (no ``TESSERAE_*`` variables) the same script runs unchanged: checkpoints go to
``./tesserae-checkpoints`` and progress is not reported anywhere.

This module imports only the standard library (PyTorch lazily), so importing it is cheap.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

#: Exit code of a job that saved its state because it was asked to stop (EX_TEMPFAIL).
PREEMPTED_EXIT_CODE = 75
#: Environment variables of the job contract (DESIGN §7), set by the runtime for every job.
ENV_JOB_ID = "TESSERAE_JOB_ID"
ENV_CHECKPOINT_DIR = "TESSERAE_CHECKPOINT_DIR"
ENV_PROGRESS_FILE = "TESSERAE_PROGRESS_FILE"
ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_RUN_ID = "TESSERAE_RUN_ID"
DEFAULT_CHECKPOINT_DIR = "tesserae-checkpoints"
#: The run lock's file in the checkpoint folder (see :meth:`Job.lock_run`).
RUN_LOCK = "running.lock"
#: The newest run's epoch, in the checkpoint folder (see "Run epochs" above).
RUN_EPOCH = "run.epoch"
_MANIFEST = "latest.json"
_SUFFIX = {"json": "json", "torch": "pt", "pickle": "pkl"}


def _atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write-then-rename, so readers see the old or the new content, never a torn one. ``durable``
    also fsyncs (checkpoints must survive a machine crash; progress reports need not)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    with contextlib.suppress(OSError):  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _ignore_stop_signals() -> None:
    """SIGTERM ignored for the rest of the process (SIG_IGN survives interpreter shutdown; a Python
    handler does not)."""
    with contextlib.suppress(ValueError):  # not the main thread: leave it as it is
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _env_int(name: str, default: int, minimum: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"{name}={value} must be at least {minimum}")
    return value


class StaleRunError(RuntimeError):
    """This run of the job is not the newest one: a newer run has started, and this one must not write."""


def _torch() -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    return torch


class Job:
    """The running job's side of the contract (see the module docstring).

    ``total_iterations`` is optional; when given it is reported with the progress, and the server
    uses it as the job's work if the submission did not declare one.
    ``report_interval`` bounds how often :meth:`report` writes the progress file (seconds).
    """

    def __init__(self, total_iterations: int | None = None, *, checkpoint_dir: str | os.PathLike[str] | None = None,
                 report_interval: float = 0.5, handle_signals: bool = True) -> None:
        env = os.environ
        self.job_id: str | None = env.get(ENV_JOB_ID)
        self.checkpoint_dir = Path(checkpoint_dir or env.get(ENV_CHECKPOINT_DIR) or DEFAULT_CHECKPOINT_DIR)
        progress = env.get(ENV_PROGRESS_FILE)
        self.progress_file: Path | None = Path(progress) if progress else None
        self.total_iterations = total_iterations
        self.report_interval = report_interval
        self.rank = _env_int(ENV_RANK, 0, 0)
        self.world_size = _env_int(ENV_WORLD_SIZE, 1, 1)
        #: This run's epoch (``TESSERAE_RUN_ID``); None outside Tesserae (no fencing then).
        self.epoch: int | None = _env_int(ENV_RUN_ID, 0, 0) if env.get(ENV_RUN_ID, "").strip() else None
        self.iteration = 0
        self._lock_fd: int | None = None
        self._preempted = False
        self._last_report = -1.0
        self._reported: int | None = None
        if handle_signals:
            signal.signal(signal.SIGTERM, self._on_signal)
        if self.epoch is not None and self.is_primary:
            self._claim_epoch()

    # ------------------------------------------------------------------ run epochs
    @contextlib.contextmanager
    def _epoch_file(self, mode: int) -> Iterator[int]:
        """The epoch file, open and locked (``fcntl.LOCK_SH`` or ``LOCK_EX``) for the ``with`` block."""
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.checkpoint_dir / RUN_EPOCH, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, mode)
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _recorded(fd: int) -> int:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else 0

    def _stale(self, recorded: int, what: str) -> StaleRunError:
        return StaleRunError(f"tesserae.job: this run ({ENV_RUN_ID}={self.epoch}) is stale: run {recorded} of this job "
                             f"has started since, so this one may not write {what} (it should have been stopped: was "
                             "its node cut off from the server?)")

    def _claim_epoch(self) -> None:
        """Record this run's epoch in the checkpoint folder (rank 0, at the start of the run)."""
        with self._epoch_file(fcntl.LOCK_EX) as fd:
            recorded = self._recorded(fd)
            if self.epoch is not None and recorded > self.epoch:
                raise self._stale(recorded, "anything")
            if recorded != self.epoch:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{self.epoch}\n".encode(), 0)
                os.fsync(fd)

    @contextlib.contextmanager
    def fenced(self, what: str = "files") -> Iterator[None]:
        """Run the ``with`` block only if this run is still the newest (else :class:`StaleRunError`);
        no newer run can take over until the block ends. Outside Tesserae it just runs the block."""
        if self.epoch is None:
            yield
            return
        with self._epoch_file(fcntl.LOCK_SH) as fd:
            recorded = self._recorded(fd)
            if recorded > self.epoch:
                raise self._stale(recorded, what)
            yield

    # ------------------------------------------------------------------ preemption
    def _on_signal(self, signum: int, frame: Any) -> None:
        self._preempted = True

    @property
    def preempted(self) -> bool:
        """True once the controller asked this job to stop (SIGTERM): save, then exit_preempted()."""
        return self._preempted

    @property
    def under_tesserae(self) -> bool:
        return self.job_id is not None

    @property
    def is_primary(self) -> bool:
        """Rank 0: the process that writes progress and checkpoints for the whole job."""
        return self.rank == 0

    def lock_run(self) -> bool:
        """Hold this job's run lock until the process ends; False if another run of the job holds it.

        Two runs of one job at once would write over each other's checkpoints; the runtime never
        starts them, and a job that wants proof calls this first and stops when it returns False.
        Rank 0 takes the lock for its whole run; the other ranks of the run return True at once.
        """
        if not self.is_primary or self._lock_fd is not None:
            return True
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.checkpoint_dir / RUN_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def exit_preempted(self) -> NoReturn:
        """Report the final progress and exit with the code that tells the controller 'requeue me'."""
        self.report(self.iteration, force=True)
        _ignore_stop_signals()
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(PREEMPTED_EXIT_CODE)

    # ------------------------------------------------------------------ progress
    def report(self, iteration: int, *, force: bool = False) -> None:
        """Record that ``iteration`` iterations are done (absolute, not an increment); rank 0 writes it."""
        self.iteration = int(iteration)
        if self.progress_file is None or not self.is_primary:
            return
        now = time.monotonic()
        if not force and self._reported is not None and now - self._last_report < self.report_interval:
            return
        doc: dict[str, Any] = {"iterations": self.iteration, "time": time.time()}
        if self.epoch is not None:  # which run wrote it: the server takes another run's report as stale
            doc["run"] = self.epoch
        if self.total_iterations is not None:
            doc["total"] = int(self.total_iterations)
        with self.fenced("progress"):
            _atomic_write(self.progress_file, json.dumps(doc).encode(), durable=False)
        self._last_report, self._reported = now, self.iteration

    def complete(self) -> None:
        """Report the final progress (call once the work is done).

        From here on a stop request (SIGTERM) is ignored: the work is done, and the process must end
        with its own exit code. Otherwise a SIGTERM arriving while the interpreter shuts down (when
        Python has put back the default action, which is to die) would kill a job that completed,
        the controller would count it as preempted and run it again: a second completion.
        """
        self.report(self.iteration, force=True)
        _ignore_stop_signals()

    # ------------------------------------------------------------------ checkpoints
    def save(self, state: Any, *, iteration: int | None = None) -> Path | None:
        """Save ``state`` as the latest checkpoint; returns its path (None on ranks other than 0,
        which write nothing: rank 0 saves for the job).

        JSON-able state is written as JSON; other objects with ``torch.save`` when PyTorch is
        installed (model/optimizer state dicts, tensors), else with ``pickle``.
        """
        if iteration is not None:
            self.iteration = int(iteration)
        if not self.is_primary:
            return None
        try:
            data, kind = json.dumps(state).encode(), "json"
        except (TypeError, ValueError):
            torch = _torch()
            if torch is not None:
                import io

                buf = io.BytesIO()
                torch.save(state, buf)
                data, kind = buf.getvalue(), "torch"
            else:
                data, kind = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), "pickle"
        # A new file per save, then the manifest, then the old files: a crash at any point leaves
        # the manifest naming a complete checkpoint.
        name = f"checkpoint-{time.time_ns()}.{_SUFFIX[kind]}"
        path = self.checkpoint_dir / name
        with self.fenced("a checkpoint"):
            _atomic_write(path, data)
            manifest = {"file": name, "format": kind, "iteration": self.iteration, "time": time.time()}
            _atomic_write(self.checkpoint_dir / _MANIFEST, json.dumps(manifest).encode())
            for other in self.checkpoint_dir.glob("checkpoint-*"):
                if other.name != name:
                    with contextlib.suppress(FileNotFoundError):
                        other.unlink()
        self.report(self.iteration, force=True)
        return path

    def restore(self, *, map_location: Any = "cpu") -> Any | None:
        """The latest saved state, or None when this is the job's first run.

        ``map_location`` is passed to ``torch.load`` for PyTorch checkpoints.
        """
        manifest_path = self.checkpoint_dir / _MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text())
        except FileNotFoundError:
            return None
        path = self.checkpoint_dir / manifest["file"]
        kind = manifest.get("format", "json")
        if kind == "json":
            state = json.loads(path.read_text())
        elif kind == "torch":
            torch = _torch()
            if torch is None:
                raise RuntimeError(f"{path} is a PyTorch checkpoint but PyTorch is not installed")
            state = torch.load(path, map_location=map_location, weights_only=False)
        else:
            with path.open("rb") as f:
                state = pickle.load(f)
        self.iteration = int(manifest.get("iteration", 0))
        return state

    def checkpoint_path(self, name: str) -> Path:
        """A path in the checkpoint folder, for jobs that write their own checkpoint files."""
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        return self.checkpoint_dir / name


__all__ = ["PREEMPTED_EXIT_CODE", "RUN_EPOCH", "RUN_LOCK", "Job", "StaleRunError"]
