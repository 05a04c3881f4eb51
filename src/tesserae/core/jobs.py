"""Jobs: an immutable spec (what a trace or a user gives) and a columnar state table.

The table keeps every job of a run in NumPy columns, indexed by row. Policies order rows with
vectorised sorts and the simulator advances all running rows at once; only the per-round
allocation walk touches rows one by one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from tesserae.core.throughput import ThroughputModel


@dataclass(frozen=True, slots=True)
class Controls:
    """A job's lifecycle controls, as the runtime has them (``tesserae submit --time-limit --retries
    --after --after-ok``), and how its runs fail in a simulation.

    ``time_limit``: most run time (seconds, over all its runs), then it fails (timed out, no retry).
    ``after``/``after_ok``: job ids that must have ended / completed before it may start (an
    ``after_ok`` job that failed or was cancelled cancels it). ``failures`` runs of the job fail,
    each ``fail_after`` seconds of run time into it (a trace's record of crashes); each failure is
    retried while ``retries`` are left, after ``retry_backoff * 2^(k-1)`` seconds (at most an hour).
    ``cancel_after``: its owner cancels it once it has run this long (seconds over all its runs; a
    history's record of a cancellation, e.g. Slurm's ``CANCELLED``); simulations only, as failures.
    """

    time_limit: float | None = None
    retries: int = 0
    retry_backoff: float = 10.0
    after: tuple[int, ...] = ()
    after_ok: tuple[int, ...] = ()
    failures: int = 0
    fail_after: float | None = None
    cancel_after: float | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a job is. ``work`` is in iterations; ``duration`` (seconds) when the trace gives one."""

    job_id: int
    submit_time: float
    num_gpus: int
    job_type: str
    work: float
    duration: float | None = None
    user: str = ""
    priority_weight: float = 1.0
    name: str = ""
    controls: Controls | None = None
    #: The only GPU type the job may run on (``tesserae submit --gpu-type``); None: any.
    gpu_type: str | None = None
    #: Tenant queue (a leaf of the queue tree); empty = the user's queue or the default one.
    queue: str = ""
    #: Priority class within tenant queues: production, normal or preemptible (core/queues.py).
    priority_class: str = "normal"
    #: CPUs and memory (MiB) the job asked for, when the trace says (Slurm's AllocTRES); not modelled.
    cpus: float | None = None
    memory_mb: int | None = None


class Outcome(IntEnum):
    """How a DONE job ended: completed, or (lifecycle controls) failed, timed out, cancelled."""

    COMPLETED = 0
    FAILED = 1
    TIMED_OUT = 2
    CANCELLED = 3


class JobStatus(IntEnum):
    PENDING = 0  # not yet submitted (simulated time before submit_time)
    QUEUED = 1  # submitted, waiting (never ran, or preempted)
    RUNNING = 2
    DONE = 3
    REJECTED = 4  # can never run here (asks for more GPUs than the cluster has)


class JobTable:
    """All jobs of one run: static spec columns plus the mutable state columns.

    Times are seconds. ``attained`` is GPU-seconds held (restart overhead included: the job holds
    its GPUs then), ``executed`` is wall seconds held, ``progress`` is iterations done.
    """

    def __init__(self, specs: Sequence[JobSpec]) -> None:
        self.specs: list[JobSpec] = list(specs)
        n = len(self.specs)
        self.n = n
        self.types: list[str] = sorted({s.job_type for s in self.specs})
        type_index = {t: i for i, t in enumerate(self.types)}
        self.job_id = np.fromiter((s.job_id for s in self.specs), dtype=np.int64, count=n)
        self.submit = np.fromiter((s.submit_time for s in self.specs), dtype=np.float64, count=n)
        self.num_gpus = np.fromiter((s.num_gpus for s in self.specs), dtype=np.int64, count=n)
        self.type_idx = np.fromiter((type_index[s.job_type] for s in self.specs), dtype=np.int64, count=n)
        self.work = np.fromiter((s.work for s in self.specs), dtype=np.float64, count=n)
        self.duration = np.fromiter(
            (math.nan if s.duration is None else s.duration for s in self.specs), dtype=np.float64, count=n
        )
        self.weight = np.fromiter((s.priority_weight for s in self.specs), dtype=np.float64, count=n)
        #: The GPU type each job asks for (None: any); type-blind placements honour it.
        self.gpu_type_req: list[str | None] = [s.gpu_type for s in self.specs]
        # Iterations/s consolidated and alone on the reference GPU type (see set_reference_rates).
        self.ref_rate = np.ones(n)

        self.status = np.full(n, JobStatus.PENDING, dtype=np.int8)
        self.progress = np.zeros(n)
        self.attained = np.zeros(n)
        self.executed = np.zeros(n)
        self.first_start = np.full(n, math.nan)
        self.finish = np.full(n, math.nan)
        self.last_start = np.full(n, math.nan)  # start of the current (or latest) run
        self.last_stop = self.submit.copy()  # when it last stopped running (submit if never ran)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.migrations = np.zeros(n, dtype=np.int64)
        self.type_switches = np.zeros(n, dtype=np.int64)  # migrations onto another GPU type
        self.strategy_changes = np.zeros(n, dtype=np.int64)  # relaunches with another parallelism strategy
        self.rate = np.zeros(n)  # iterations per second at the current placement
        self.overhead_left = np.zeros(n)  # restart overhead still to pay before progress resumes
        self.hold_until = np.zeros(n)  # minimum run quantum: not preempted before this instant
        self.outcome = np.zeros(n, dtype=np.int8)  # Outcome of a DONE row
        self.retries_used = np.zeros(n, dtype=np.int64)

    def set_reference_rates(self, model: ThroughputModel) -> None:
        """Fill ``ref_rate`` from the model, once per (job type, GPU count) pair."""
        cache: dict[tuple[int, int], float] = {}
        for row in range(self.n):
            key = (int(self.type_idx[row]), int(self.num_gpus[row]))
            if key not in cache:
                cache[key] = model.reference_rate(self.types[key[0]], key[1])
            self.ref_rate[row] = cache[key]

    def job_type(self, row: int) -> str:
        return self.types[int(self.type_idx[row])]

    def remaining_work(self, rows: np.ndarray) -> np.ndarray:
        return np.maximum(self.work[rows] - self.progress[rows], 0.0)

    def rows_with(self, status: JobStatus) -> np.ndarray:
        return np.flatnonzero(self.status == status)
