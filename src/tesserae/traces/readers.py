"""One entry point for every trace format: ``read_trace(path, fmt, model, seed)``.

Whatever the format, the result follows DESIGN §2: times in seconds from the trace's first
submission, work in iterations (a trace that gives only a duration gets work = duration x the
model's reference rate for the job's type and GPU count), jobs sorted by (submit_time, job_id).
Jobs asking for more GPUs than a cluster has are kept: the simulator rejects them and counts
them (``trace_info`` reports them too), so a reader never needs to know the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.throughput import ThroughputModel
from tesserae.traces._fields import JobTypeCheck, check_file
from tesserae.traces.canonical import (
    read_canonical,
    read_canonical_csv,
    read_canonical_parquet,
    write_canonical,
    write_canonical_csv,
    write_canonical_parquet,
)
from tesserae.traces.gavel import read_gavel
from tesserae.traces.philly import read_philly
from tesserae.traces.slurm import read_slurm
from tesserae.traces.tiresias import read_tiresias

Reader = Callable[[Path, ThroughputModel, int, JobTypeCheck], list[JobSpec]]

READERS: dict[str, Reader] = {
    "tiresias": lambda p, model, seed, check: read_tiresias(p, model, check),
    "philly": lambda p, model, seed, check: read_philly(p, model, seed, check),
    "gavel": lambda p, model, seed, check: read_gavel(p, model, check),
    "slurm": lambda p, model, seed, check: read_slurm(p, model, seed),  # types drawn from the model
    "canonical": lambda p, model, seed, check: read_canonical(p, model, check),
}
FORMATS: tuple[str, ...] = tuple(READERS)


def read_trace(path: str | Path, fmt: str, model: ThroughputModel, seed: int = 0, unprofiled: str = "refuse",
               notes: list[str] | None = None) -> list[JobSpec]:
    """Read a trace of format ``fmt`` (one of FORMATS); ``seed`` only matters for Philly's job types.

    Every job's type and GPU count must be one ``model`` can simulate; ``unprofiled`` says what to do
    with one it cannot (``JobTypeCheck``: refuse, generic or reject). What was let through or left out
    is appended to ``notes`` (the run's summary warns about it).
    """
    key = fmt.strip().lower()
    reader = READERS.get(key)
    if reader is None:
        raise InputError(f"unknown trace format '{fmt}'; valid formats: {', '.join(FORMATS)}",
                         field="format")
    check = JobTypeCheck(model, unprofiled)
    p = check_file(path)
    jobs = reader(p, model, seed, check)
    if notes is not None:
        notes.extend(check.notes(path))
    return jobs


__all__ = [
    "FORMATS",
    "read_canonical",
    "read_canonical_csv",
    "read_canonical_parquet",
    "read_gavel",
    "read_philly",
    "read_slurm",
    "read_tiresias",
    "read_trace",
    "write_canonical",
    "write_canonical_csv",
    "write_canonical_parquet",
]
