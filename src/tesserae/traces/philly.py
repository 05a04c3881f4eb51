"""Reader for the Philly-derived CSV (AdaptDL's ``philly.csv``).

Header ``timestamp,duration,num_gpus,gpu_time,cluster``; ``timestamp`` is a wall-clock
submission time ``YYYY-MM-DD HH:MM:SS`` (read as UTC, so no daylight-saving jumps; any ISO 8601
form Python's ``datetime.fromisoformat`` accepts is taken, with an offset honoured), ``duration``
is in seconds. Rows are not sorted: times become seconds from the earliest submission.
``gpu_time`` is redundant (duration x GPUs) and not read; ``cluster`` (Philly's virtual cluster,
i.e. the team) becomes the job's ``user`` so that fairness policies see the teams.

The trace has no ids and no model names. Jobs are numbered by data row (0-based, file order;
``name`` is that number as text). Job types are drawn from the active model: with
``types = sorted(model.job_types())`` and ``rng = numpy.random.default_rng(seed)``, the k-th data
row gets ``types[rng.integers(len(types), size=n)[k]]``: uniform, and the same seed always gives
the same types.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.throughput import ThroughputModel
from tesserae.traces._fields import (
    JobRows,
    JobTypeCheck,
    RateCache,
    cell,
    check_file,
    csv_with_header,
    gpus,
    model_types,
    no_jobs,
    number,
)

REQUIRED = ("timestamp", "duration", "num_gpus")
OPTIONAL = ("cluster",)


def parse_timestamp(value: str, path: Path, line: int, field: str = "timestamp") -> float:
    """Seconds since the Unix epoch of a wall-clock time; naive times are taken as UTC."""
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InputError(f"bad timestamp {value!r}; expected 'YYYY-MM-DD HH:MM:SS'", path=str(path),
                         line=line, field=field) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def read_philly(path: str | Path, model: ThroughputModel, seed: int = 0, check: JobTypeCheck | None = None
                ) -> list[JobSpec]:
    """Jobs of a Philly-derived CSV; types drawn with ``seed`` (see module docstring)."""
    p = check_file(path)
    types = model_types(model)
    submit: list[float] = []
    duration: list[float] = []
    num_gpus: list[int] = []
    users: list[str] = []
    lines: list[int] = []
    last_line = 1
    with csv_with_header(p, REQUIRED, OPTIONAL, "timestamp") as (records, col):
        i_ts, i_dur, i_gpu = (col[c] for c in REQUIRED)
        i_cl = col.get("cluster")
        width = max(col.values()) + 1
        for line, row in records:
            last_line = line
            if len(row) < width:  # slow path only to name the missing field
                for name, i in col.items():
                    cell(row, i, p, line, name)
            submit.append(parse_timestamp(row[i_ts], p, line))
            duration.append(number(row[i_dur], p, line, "duration", positive=True))
            num_gpus.append(gpus(row[i_gpu], p, line, "num_gpus"))
            users.append(row[i_cl].strip() if i_cl is not None else "")
            lines.append(line)
    if not submit:
        raise no_jobs(p, last_line + 1, "timestamp")
    rng = np.random.default_rng(seed)
    drawn = rng.integers(len(types), size=len(submit)).tolist()
    rate = RateCache(model)
    check = check or JobTypeCheck(model)
    rows = JobRows()
    for k, (line, s, d, g, u, t) in enumerate(zip(lines, submit, duration, num_gpus, users, drawn,
                                                  strict=True)):
        job_type = types[t]
        if not check(job_type, g, p, line, "num_gpus", "num_gpus"):  # drawn types: only a count can miss
            continue
        rows.add(line, k, str(k), s, g, job_type, d * rate(job_type, g), d, user=u)
    return rows.finish()
