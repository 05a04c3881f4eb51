"""The project's own trace format, as CSV or Parquet.

Columns ``job_id,submit_time,num_gpus,job_type,work,duration,user,priority_weight,name,queue,
priority_class``: the fields of :class:`JobSpec`, in its units (seconds, GPUs, iterations).
``job_id``, ``submit_time``, ``num_gpus``, ``job_type`` and ``work`` are required; ``duration``
(empty = unknown), ``user``, ``priority_weight`` (default 1), ``name``, ``queue`` (a tenant queue;
empty = the user's) and ``priority_class`` (production, normal or preemptible; default normal)
may be absent or empty, and so may the lifecycle columns of ``traces.controls`` (time limit,
retries, dependencies, failures, cancellations) and the resource columns ``gpu_type`` (the only GPU
type the job may run on), ``cpus`` and ``memory_mb`` (what it asked for; not modelled). The writers
write every column (the lifecycle ones when some job has controls, the resource ones when some job
has one), and floats are written exactly (shortest repr), so write-then-read gives the same jobs
back.

Parquet has no lines: errors name the row as the line it would have in the equivalent CSV
(header = line 1, first row = line 2), so the same bad value is reported at the same place in
both formats.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.queues import PRIORITY_CLASSES
from tesserae.core.throughput import ThroughputModel
from tesserae.extras import require
from tesserae.traces import controls
from tesserae.traces._fields import (
    Cell,
    JobRows,
    JobTypeCheck,
    cell,
    check_file,
    csv_with_header,
    gpus,
    integer,
    is_missing,
    no_jobs,
    number,
    text,
)

COLUMNS = ("job_id", "submit_time", "num_gpus", "job_type", "work", "duration", "user",
           "priority_weight", "name", "queue", "priority_class")
REQUIRED = COLUMNS[:5]
RESOURCE_COLUMNS = ("gpu_type", "cpus", "memory_mb")
OPTIONAL = (*COLUMNS[5:], *controls.COLUMNS, *RESOURCE_COLUMNS)
#: Largest memory request a trace may state (MiB): 1 EiB.
MAX_MEMORY_MB = 2**40
PARQUET_SUFFIXES = (".parquet", ".pq")


def _add_row(rows: JobRows, values: dict[str, Cell], p: Path, line: int, check: JobTypeCheck) -> None:
    """Validate one record (CSV cells are text, Parquet values are typed) and append it."""
    job_id = integer(values["job_id"], p, line, "job_id")
    submit = number(values["submit_time"], p, line, "submit_time")
    g = gpus(values["num_gpus"], p, line, "num_gpus")
    job_type = text(values["job_type"], p, line, "job_type")
    work = number(values["work"], p, line, "work", positive=True)
    d = values.get("duration")
    duration = None if is_missing(d) else number(d, p, line, "duration", positive=True)
    w = values.get("priority_weight")
    weight = 1.0 if is_missing(w) else number(w, p, line, "priority_weight", positive=True)
    user = "" if is_missing(values.get("user")) else str(values["user"])
    name = "" if is_missing(values.get("name")) else str(values["name"])
    queue = "" if is_missing(values.get("queue")) else str(values["queue"]).strip()
    cls = "normal" if is_missing(values.get("priority_class")) else str(values["priority_class"]).strip()
    if cls not in PRIORITY_CLASSES:
        raise InputError(f"unknown priority class '{cls}'; choose one of: {', '.join(PRIORITY_CLASSES)}",
                         path=str(p), line=line, field="priority_class")
    gpu_type = None if is_missing(values.get("gpu_type")) else str(values["gpu_type"]).strip().lower()
    c = values.get("cpus")
    cpus = None if is_missing(c) else number(c, p, line, "cpus", positive=True)
    m = values.get("memory_mb")
    memory = None if is_missing(m) else integer(m, p, line, "memory_mb")
    if memory is not None and not 1 <= memory <= MAX_MEMORY_MB:
        raise InputError(f"must be between 1 and {MAX_MEMORY_MB} MiB, got {m!r}", path=str(p), line=line,
                         field="memory_mb")
    if not check(job_type, g, p, line, "job_type", "num_gpus"):
        return
    rows.add(line, job_id, name, submit, g, job_type, work, duration, user=user, weight=weight, queue=queue,
             priority_class=cls, controls=controls.parse_controls(values, p, line), gpu_type=gpu_type, cpus=cpus,
             memory_mb=memory)


def read_canonical_csv(path: str | Path, model: ThroughputModel | None = None, check: JobTypeCheck | None = None
                       ) -> list[JobSpec]:
    """Jobs of a canonical CSV trace (with ``model``: each job's type and GPU count must be simulable)."""
    p = check_file(path)
    check = check or JobTypeCheck(model)
    rows = JobRows()
    last_line = 1
    with csv_with_header(p, REQUIRED, OPTIONAL, "job_id") as (records, col):
        for line, row in records:
            last_line = line
            values: dict[str, Cell] = {}
            for name, i in col.items():
                values[name] = cell(row, i, p, line, name) if name in REQUIRED else (
                    row[i] if i < len(row) else None)
            _add_row(rows, values, p, line, check)
    if not rows and not check.left_out:
        raise no_jobs(p, last_line + 1, "job_id")
    return _finish(rows, p)


def read_canonical_parquet(path: str | Path, model: ThroughputModel | None = None, check: JobTypeCheck | None = None,
                           batch_size: int = 65_536) -> list[JobSpec]:
    """Jobs of a canonical Parquet trace, read batch by batch (``model``: as ``read_canonical_csv``)."""
    p = check_file(path)
    require("parquet", "a Parquet trace", path=str(p))
    import pyarrow as pa
    import pyarrow.parquet as pq

    check = check or JobTypeCheck(model)
    try:
        pf = pq.ParquetFile(p)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"not a readable Parquet file: {e}", path=str(p)) from e
    present = {n.lower(): n for n in pf.schema_arrow.names}
    for col in REQUIRED:
        if col not in present:
            raise InputError(f"missing column '{col}' (table has: {', '.join(pf.schema_arrow.names)})",
                             path=str(p), line=1, field=col)
    wanted = [c for c in (*COLUMNS, *controls.COLUMNS, *RESOURCE_COLUMNS) if c in present]
    rows = JobRows()
    line = 1
    try:
        for batch in pf.iter_batches(batch_size=batch_size, columns=[present[c] for c in wanted]):
            data = batch.to_pydict()
            columns = [data[present[c]] for c in wanted]
            for record in zip(*columns, strict=True):
                line += 1
                _add_row(rows, dict(zip(wanted, record, strict=True)), p, line, check)
    except pa.ArrowException as e:
        raise InputError(f"cannot read Parquet data: {e}", path=str(p), line=line + 1) from e
    if not rows and not check.left_out:
        raise no_jobs(p, 2, "job_id")
    return _finish(rows, p)


def _finish(rows: JobRows, p: Path) -> list[JobSpec]:
    rows.check_unique_ids(p)
    jobs = rows.finish()
    controls.check_dependencies(jobs, dict(zip(rows.ids, rows.lines, strict=True)), p)
    return jobs


def read_canonical(path: str | Path, model: ThroughputModel | None = None, check: JobTypeCheck | None = None
                   ) -> list[JobSpec]:
    """Canonical trace; Parquet when the suffix is .parquet or .pq, CSV otherwise."""
    if Path(path).suffix.lower() in PARQUET_SUFFIXES:
        return read_canonical_parquet(path, model, check)
    return read_canonical_csv(path, model, check)


def _has_resources(j: JobSpec) -> bool:
    return j.gpu_type is not None or j.cpus is not None or j.memory_mb is not None


def _header(with_controls: bool, with_resources: bool) -> tuple[str, ...]:
    return (*COLUMNS, *(controls.COLUMNS if with_controls else ()), *(RESOURCE_COLUMNS if with_resources else ()))


def _records(jobs: Iterable[JobSpec], with_controls: bool, with_resources: bool) -> Iterator[tuple[Any, ...]]:
    for j in jobs:
        rec: tuple[Any, ...] = (j.job_id, j.submit_time, j.num_gpus, j.job_type, j.work, j.duration, j.user,
                                j.priority_weight, j.name, j.queue, j.priority_class)
        if with_controls:
            rec = (*rec, *controls.cells(j.controls))
        if with_resources:
            rec = (*rec, j.gpu_type, j.cpus, j.memory_mb)
        yield rec


def write_canonical_csv(jobs: Iterable[JobSpec], path: str | Path) -> Path:
    """Write every column (the lifecycle ones when a job has controls, the resource ones when a job has
    one); an unknown value is an empty cell."""
    p = Path(path)
    jobs = list(jobs)
    with_controls = any(j.controls is not None for j in jobs)
    with_resources = any(_has_resources(j) for j in jobs)
    with open(p, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(_header(with_controls, with_resources))
        for rec in _records(jobs, with_controls, with_resources):
            w.writerow(["" if v is None else v for v in rec])
    return p


def write_canonical_parquet(jobs: Sequence[JobSpec] | Iterable[JobSpec], path: str | Path) -> Path:
    """Write every column with fixed types (duration nullable)."""
    require("parquet", "writing Parquet", path=str(path))
    import pyarrow as pa
    import pyarrow.parquet as pq

    jobs = list(jobs)
    with_controls = any(j.controls is not None for j in jobs)
    with_resources = any(_has_resources(j) for j in jobs)
    fields = [
        ("job_id", pa.int64()), ("submit_time", pa.float64()), ("num_gpus", pa.int64()),
        ("job_type", pa.string()), ("work", pa.float64()), ("duration", pa.float64()),
        ("user", pa.string()), ("priority_weight", pa.float64()), ("name", pa.string()),
        ("queue", pa.string()), ("priority_class", pa.string()),
    ]
    if with_controls:  # as text, as in the CSV: empty = unset
        fields += [(c, pa.string()) for c in controls.COLUMNS]
    if with_resources:
        fields += [("gpu_type", pa.string()), ("cpus", pa.float64()), ("memory_mb", pa.int64())]
    schema = pa.schema(fields)
    columns: list[list[Any]] = [[] for _ in fields]
    n_controls = len(controls.COLUMNS) if with_controls else 0
    for rec in _records(jobs, with_controls, with_resources):
        rec = (*rec[:len(COLUMNS)], *(str(v) for v in rec[len(COLUMNS):len(COLUMNS) + n_controls]),
               *rec[len(COLUMNS) + n_controls:])
        for col, v in zip(columns, rec, strict=True):
            col.append(v)
    table = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
                                 schema=schema)
    p = Path(path)
    pq.write_table(table, p)
    return p


def write_canonical(jobs: Iterable[JobSpec], path: str | Path) -> Path:
    """Canonical trace; Parquet when the suffix is .parquet or .pq, CSV otherwise."""
    if Path(path).suffix.lower() in PARQUET_SUFFIXES:
        return write_canonical_parquet(jobs, path)
    return write_canonical_csv(jobs, path)
