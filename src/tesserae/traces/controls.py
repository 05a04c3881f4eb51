"""The lifecycle columns of the canonical trace format: the ``Controls`` of a job (``core.jobs``).

Optional columns, each may be absent or empty:

- ``time_limit``: seconds of run time (summed over its runs); past it the job fails, timed out;
- ``retries``: how often a failed run is retried (0-100); ``retry_backoff``: seconds before the
  first retry, doubled at each next one (default 10, at most an hour);
- ``after``/``after_ok``: job ids, separated by ``;`` or spaces, that must have ended / completed
  first (each submitted before this job, so no cycle can form);
- ``failures``: how many runs of the job fail (a record of crashes), each ``fail_after`` seconds of
  run time into it (required when ``failures`` > 0);
- ``cancel_after``: seconds of run time (over all its runs) after which its owner cancels it (a
  record of a cancellation, e.g. Slurm's ``CANCELLED``).

A job with none of them set has no controls (``None``), and a trace none of whose jobs has any is
written without these columns, so traces without controls keep their exact form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tesserae.core.errors import InputError
from tesserae.core.jobs import Controls, JobSpec
from tesserae.traces._fields import Cell, id_as_int, integer, is_missing, number

COLUMNS = ("time_limit", "retries", "retry_backoff", "after", "after_ok", "failures", "fail_after", "cancel_after")
MAX_RETRIES = 100
MAX_BACKOFF = 3600.0


def _ids(value: Cell, path: Path, line: int, field: str) -> tuple[int, ...]:
    if is_missing(value):
        return ()
    out = []
    for part in str(value).replace(";", " ").split():
        job_id = id_as_int(part.strip())
        if job_id is None:
            raise InputError(f"'{part}' is not a job id (ids are separated by ';' or spaces)", path=str(path),
                             line=line, field=field)
        out.append(job_id)
    return tuple(dict.fromkeys(out))


def parse_controls(values: Mapping[str, Cell], path: Path, line: int) -> Controls | None:
    """The job's controls from its row's cells (None when it has none)."""
    if all(is_missing(values.get(c)) for c in COLUMNS):
        return None

    def opt_number(field: str) -> float | None:
        v = values.get(field)
        return None if is_missing(v) else number(v, path, line, field, positive=field != "retry_backoff")

    def opt_int(field: str, top: int | None = None) -> int:
        v = values.get(field)
        i = 0 if is_missing(v) else integer(v, path, line, field)
        if top is not None and i > top:
            raise InputError(f"at most {top}, got {v!r}", path=str(path), line=line, field=field)
        return i

    backoff = opt_number("retry_backoff")
    if backoff is not None and backoff > MAX_BACKOFF:
        raise InputError(f"at most {MAX_BACKOFF:g} s, got {backoff:g}", path=str(path), line=line,
                         field="retry_backoff")
    failures, fail_after = opt_int("failures"), opt_number("fail_after")
    if failures and fail_after is None:
        raise InputError("failures > 0 needs fail_after (seconds of run time before each failing run fails)",
                         path=str(path), line=line, field="fail_after")
    return Controls(time_limit=opt_number("time_limit"), retries=opt_int("retries", MAX_RETRIES),
                    retry_backoff=10.0 if backoff is None else backoff,
                    after=_ids(values.get("after"), path, line, "after"),
                    after_ok=_ids(values.get("after_ok"), path, line, "after_ok"),
                    failures=failures, fail_after=fail_after, cancel_after=opt_number("cancel_after"))


def check_dependencies(jobs: Sequence[JobSpec], lines: Mapping[int, int], path: Path) -> None:
    """Every dependency names a job of the trace submitted before the job (by submit time, then id)."""
    order = {j.job_id: (j.submit_time, j.job_id) for j in jobs}
    for j in jobs:
        if j.controls is None:
            continue
        for field, deps in (("after", j.controls.after), ("after_ok", j.controls.after_ok)):
            for dep in deps:
                if dep not in order:
                    raise InputError(f"job {dep} is not in the trace", path=str(path), line=lines.get(j.job_id),
                                     field=field)
                if order[dep] >= order[j.job_id]:
                    raise InputError(f"job {dep} is not submitted before job {j.job_id} (a dependency must be)",
                                     path=str(path), line=lines.get(j.job_id), field=field)


def cells(c: Controls | None) -> tuple[object, ...]:
    """The row's values of ``COLUMNS`` (empty cells for what is unset)."""
    if c is None:
        return ("",) * len(COLUMNS)
    return ("" if c.time_limit is None else c.time_limit, c.retries, c.retry_backoff, ";".join(map(str, c.after)),
            ";".join(map(str, c.after_ok)), c.failures, "" if c.fail_after is None else c.fail_after,
            "" if c.cancel_after is None else c.cancel_after)
