"""Reader for Gavel's tab-separated job trace (stanford-futuredata/gavel ``scheduler/traces``).

No header; one job a line. Two layouts exist and are told apart by the field count of the first
job line (every later line must have the same count):

- 7 fields: ``job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time,
  scale_factor`` (e.g. ``msr/seed=0/23dbec.trace``);
- 10 fields: ``job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps,
  scale_factor, priority_weight, SLO, arrival_time`` (Gavel's ``utils.parse_trace``).

``scale_factor`` is the GPU count; ``total_steps`` is the work in iterations, taken as is (Gavel
measures throughput in steps per second), so ``duration`` is None. ``command``, the working
directory, ``needs_data_dir`` and ``SLO`` do not affect scheduling and are not read. Jobs are
numbered by line (0-based, file order), ``name`` is that number as text.
"""

from __future__ import annotations

from pathlib import Path

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.throughput import ThroughputModel
from tesserae.traces._fields import JobRows, JobTypeCheck, check_file, gpus, no_jobs, number, open_text, text

LAYOUT_7 = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time",
            "scale_factor")
LAYOUT_10 = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
             "total_steps", "scale_factor", "priority_weight", "SLO", "arrival_time")
LAYOUTS = {7: LAYOUT_7, 10: LAYOUT_10}


def read_gavel(path: str | Path, model: ThroughputModel | None = None, check: JobTypeCheck | None = None
               ) -> list[JobSpec]:
    """Jobs of a Gavel trace (either layout); with ``model``, each job's type and GPU count must be simulable."""
    p = check_file(path)
    check = check or JobTypeCheck(model)
    jobs_seen = 0
    rows = JobRows()
    layout: tuple[str, ...] | None = None
    line = 0
    with open_text(p) as f:
        while True:
            try:
                raw = f.readline()
            except UnicodeDecodeError as e:
                raise InputError("file is not UTF-8 text", path=str(p), line=line + 1) from e
            if not raw:
                break
            line += 1
            content = raw.rstrip("\r\n")
            if not content.strip():
                continue
            parts = content.split("\t")
            if layout is None:
                if len(parts) not in LAYOUTS:
                    raise InputError(
                        f"{len(parts)} tab-separated fields; a Gavel trace has 7 ({', '.join(LAYOUT_7)}) "
                        f"or 10 ({', '.join(LAYOUT_10)})",
                        path=str(p), line=line,
                        field=_field_at(LAYOUT_7 if len(parts) < 7 else LAYOUT_10, len(parts)),
                    )
                layout = LAYOUTS[len(parts)]
            if len(parts) != len(layout):
                raise InputError(
                    f"{len(parts)} tab-separated fields, but the first job line has {len(layout)}",
                    path=str(p), line=line, field=_field_at(layout, len(parts)),
                )
            f_ = dict(zip(layout, parts, strict=True))
            job_type = text(f_["job_type"], p, line, "job_type")
            work = number(f_["total_steps"], p, line, "total_steps", positive=True)
            arrival = number(f_["arrival_time"], p, line, "arrival_time")
            g = gpus(f_["scale_factor"], p, line, "scale_factor")
            weight = (number(f_["priority_weight"], p, line, "priority_weight", positive=True)
                      if "priority_weight" in f_ else 1.0)
            k, jobs_seen = jobs_seen, jobs_seen + 1  # ids in file order, even when a job is left out
            if not check(job_type, g, p, line, "job_type", "scale_factor"):
                continue
            rows.add(line, k, str(k), arrival, g, job_type, work, None, weight=weight)
    if not rows and not check.left_out:
        raise no_jobs(p, line + 1, "job_type")
    return rows.finish()


def _field_at(layout: tuple[str, ...], count: int) -> str:
    """The first missing field of a short line, or the first unexpected one of a long line."""
    return layout[count] if count < len(layout) else f"extra field {len(layout) + 1}"
