"""Reader for Tiresias' job CSV (SymbioticLab/Tiresias ``simulator/*.csv``).

Header ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``. Only ``num_gpu``,
``submit_time``, ``model_name`` and ``duration`` carry meaning (Tiresias' own simulator ignores
the rest), so only they are required; ``iterations`` and ``interval`` are not read. ``job_id`` is
optional: when every id is a non-negative integer the ids are kept, otherwise jobs are numbered
by their row (0-based, file order); ``name`` keeps the original id text either way.
"""

from __future__ import annotations

from pathlib import Path

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
    id_as_int,
    no_jobs,
    number,
    text,
)

REQUIRED = ("num_gpu", "submit_time", "model_name", "duration")
OPTIONAL = ("job_id",)


def read_tiresias(path: str | Path, model: ThroughputModel, check: JobTypeCheck | None = None) -> list[JobSpec]:
    """Jobs of a Tiresias CSV; work = duration x the model's reference rate for (type, GPUs)."""
    p = check_file(path)
    rate = RateCache(model)
    check = check or JobTypeCheck(model)
    rows = JobRows()
    raw_ids: list[str] = []
    last_line = 1
    with csv_with_header(p, REQUIRED, OPTIONAL, "job_id") as (records, col):
        i_id = col.get("job_id")
        i_gpu, i_sub, i_model, i_dur = (col[c] for c in REQUIRED)
        for line, row in records:
            last_line = line
            index = len(rows)
            raw_id = cell(row, i_id, p, line, "job_id").strip() if i_id is not None else str(index)
            g = gpus(cell(row, i_gpu, p, line, "num_gpu"), p, line, "num_gpu")
            submit = number(cell(row, i_sub, p, line, "submit_time"), p, line, "submit_time")
            job_type = text(cell(row, i_model, p, line, "model_name"), p, line, "model_name")
            duration = number(cell(row, i_dur, p, line, "duration"), p, line, "duration", positive=True)
            if not check(job_type, g, p, line, "model_name", "num_gpu"):
                continue
            raw_ids.append(raw_id)
            rows.add(line, index, raw_id, submit, g, job_type, duration * rate(job_type, g), duration)
    if not rows and not check.left_out:
        raise no_jobs(p, last_line + 1, "job_id")
    ids = [id_as_int(r) for r in raw_ids]
    if all(i is not None for i in ids):
        rows.ids = [i for i in ids if i is not None]
        rows.check_unique_ids(p)
    return rows.finish()
