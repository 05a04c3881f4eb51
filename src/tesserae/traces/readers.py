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
from tesserae.traces._fields import check_file
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

Reader = Callable[[Path, ThroughputModel, int], list[JobSpec]]

READERS: dict[str, Reader] = {
    "tiresias": lambda p, model, seed: read_tiresias(p, model),
    "philly": lambda p, model, seed: read_philly(p, model, seed),
    "gavel": lambda p, model, seed: read_gavel(p),
    "slurm": lambda p, model, seed: read_slurm(p, model, seed),
    "canonical": lambda p, model, seed: read_canonical(p),
}
FORMATS: tuple[str, ...] = tuple(READERS)


def read_trace(path: str | Path, fmt: str, model: ThroughputModel, seed: int = 0) -> list[JobSpec]:
    """Read a trace of format ``fmt`` (one of FORMATS); ``seed`` only matters for Philly's job types."""
    key = fmt.strip().lower()
    reader = READERS.get(key)
    if reader is None:
        raise InputError(f"unknown trace format '{fmt}'; valid formats: {', '.join(FORMATS)}",
                         field="format")
    p = check_file(path)
    return reader(p, model, seed)


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
