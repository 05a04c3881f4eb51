"""Field parsing shared by every trace reader.

Each helper validates one cell and raises :class:`InputError` naming the file, the 1-based line
and the field, so that a bad trace is fixed from the message alone. Readers never skip a row: a
row either becomes a job or stops the read with an error. Only blank lines (e.g. the trailing
newline many tools write) are not rows.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from tesserae.core.errors import InputError
from tesserae.core.jobs import Controls, JobSpec
from tesserae.core.throughput import JobProblem, ThroughputModel

INT64_MAX = 2**63 - 1
Cell = str | int | float | None


def check_file(path: str | Path) -> Path:
    """A missing or unreadable trace is an input error, not a traceback."""
    p = Path(path)
    if not p.exists():
        raise InputError("file not found", path=str(p))
    if not p.is_file():
        raise InputError("not a regular file", path=str(p))
    return p


@contextmanager
def open_text(path: Path) -> Iterator[IO[str]]:
    """Open a text trace (UTF-8, a leading byte-order mark is ignored; newlines kept for csv)."""
    try:
        f = open(path, encoding="utf-8-sig", newline="")  # noqa: SIM115 - closed below
    except OSError as e:
        raise InputError(f"cannot open: {e.strerror or e}", path=str(path)) from e
    with f:
        yield f


def csv_rows(f: IO[str], path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) for each non-blank CSV record; decoding and CSV errors name the line."""
    reader = csv.reader(f)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except UnicodeDecodeError as e:
            raise InputError("file is not UTF-8 text", path=str(path), line=reader.line_num + 1) from e
        except csv.Error as e:
            raise InputError(f"malformed CSV: {e}", path=str(path), line=reader.line_num) from e
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        yield reader.line_num, row


def header_index(header: Sequence[str], required: Sequence[str], optional: Sequence[str],
                 path: Path) -> dict[str, int]:
    """Map column names (case-insensitive, spaces trimmed) to positions; a missing one is an error."""
    names = [h.strip().lower() for h in header]
    index: dict[str, int] = {}
    for col in (*required, *optional):
        if col in names:
            index[col] = names.index(col)
    for col in required:
        if col not in index:
            raise InputError(
                f"missing column '{col}' (header has: {', '.join(h.strip() for h in header)}; "
                f"required: {', '.join(required)})",
                path=str(path), line=1, field=col,
            )
    return index


def cell(row: Sequence[str], i: int, path: Path, line: int, field: str) -> str:
    """The raw text of one cell; a row too short to hold it is an error."""
    if i >= len(row):
        raise InputError(f"missing value (the row has only {len(row)} fields)",
                         path=str(path), line=line, field=field)
    return row[i]


def is_missing(value: Cell) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def number(value: Cell, path: Path, line: int, field: str, *, positive: bool = False) -> float:
    """A finite, non-negative number (strictly positive when ``positive``)."""
    if is_missing(value):
        raise InputError("missing value", path=str(path), line=line, field=field)
    if isinstance(value, bool):
        raise InputError(f"not a number: {value!r}", path=str(path), line=line, field=field)
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"not a number: {value!r}", path=str(path), line=line, field=field) from None
    if not math.isfinite(x):
        raise InputError(f"not a finite number: {value!r}", path=str(path), line=line, field=field)
    if x < 0:
        raise InputError(f"negative value: {value!r}", path=str(path), line=line, field=field)
    if positive and x == 0:
        raise InputError(f"must be positive, got {value!r}", path=str(path), line=line, field=field)
    return x


def integer(value: Cell, path: Path, line: int, field: str) -> int:
    """A non-negative integer; '4' and '4.0' are accepted, '4.5' is not."""
    if isinstance(value, str):
        try:
            i = int(value)
        except ValueError:
            pass
        else:
            if i < 0:
                raise InputError(f"negative value: {value!r}", path=str(path), line=line, field=field)
            return i
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise InputError(f"negative value: {value!r}", path=str(path), line=line, field=field)
        return value
    x = number(value, path, line, field)
    if not x.is_integer():
        raise InputError(f"not an integer: {value!r}", path=str(path), line=line, field=field)
    return int(x)


def gpus(value: Cell, path: Path, line: int, field: str) -> int:
    """A GPU count: an integer of at least 1 (gang size)."""
    g = integer(value, path, line, field)
    if g < 1:
        raise InputError(f"a job needs at least 1 GPU, got {value!r}", path=str(path), line=line,
                         field=field)
    return g


def text(value: Cell, path: Path, line: int, field: str) -> str:
    """A non-empty string (e.g. a job type)."""
    if is_missing(value):
        raise InputError("missing value", path=str(path), line=line, field=field)
    return str(value).strip()


def id_as_int(raw: str) -> int | None:
    """The trace's id as a job id when it is a non-negative int64, else None."""
    try:
        i = int(raw)
    except ValueError:
        return None
    return i if 0 <= i <= INT64_MAX else None


def no_jobs(path: Path, line: int, field: str) -> InputError:
    return InputError("no jobs in the trace (expected at least one job row)", path=str(path),
                      line=line, field=field)


def model_types(model: ThroughputModel) -> list[str]:
    """The model's job types in a fixed (sorted) order, so that seeded draws do not depend on it."""
    types = sorted(model.job_types())
    if not types:
        raise InputError(f"throughput model '{model.name}' lists no job types",
                         field="job_type")
    return types


#: What a trace reader does with a job the profile cannot simulate (``--unprofiled-jobs``).
UNPROFILED_POLICIES = ("refuse", "generic", "reject")


class JobTypeCheck:
    """Whether the profile can simulate each (job type, GPU count) a trace asks for, checked as the trace is
    read, by ``policy``:

    - ``refuse`` (the default): the first it cannot is an InputError naming the file, the line and the
      trace's own field (a typo such as 'resnet5O' would otherwise run at some default speed);
    - ``generic``: a type the built-in model does not know runs at reference speed, no skew (anything
      else the profile cannot simulate is still refused);
    - ``reject``: such jobs are left out of the workload, counted, and the run's summary says so.

    Calling it returns whether to keep the job; ``notes()`` says what was let through or left out.
    """

    def __init__(self, model: ThroughputModel | None, policy: str = "refuse") -> None:
        if policy not in UNPROFILED_POLICIES:
            raise InputError(f"'{policy}' is not {', '.join(UNPROFILED_POLICIES[:-1])} or {UNPROFILED_POLICIES[-1]}",
                             field="unprofiled-jobs")
        self.model, self.policy = model, policy
        self._verdict: dict[tuple[str, int], JobProblem | None] = {}
        self.generic: dict[str, int] = {}
        self.left_out: dict[tuple[str, int], list[int]] = {}  # (type, GPUs) -> [jobs, first line]

    def __call__(self, job_type: str, num_gpus: int, path: Path, line: int, type_field: str,
                 gpus_field: str) -> bool:
        if self.model is None:
            return True
        key = (job_type, num_gpus)
        if key not in self._verdict:
            self._verdict[key] = self.model.job_problem(job_type, num_gpus)
        problem = self._verdict[key]
        if problem is None:
            return True
        if self.policy == "generic" and problem.generic_ok:
            self.generic[job_type] = self.generic.get(job_type, 0) + 1
            return True
        if self.policy == "reject":
            self.left_out.setdefault(key, [0, line])[0] += 1
            return False
        raise InputError(problem.reason, path=str(path), line=line,
                         field=type_field if problem.field == "job_type" else gpus_field)

    def notes(self, path: Path | str) -> list[str]:
        """Warnings for the run's summary: types run as generic, jobs left out."""
        out = []
        if self.generic:
            shown = ", ".join(f"{t!r} ({n} job{'s' if n != 1 else ''})" for t, n in sorted(self.generic.items()))
            out.append(f"{path}: job types the profile does not know ran as generic (reference speed, no skew): "
                       f"{shown}")
        if self.left_out:
            total = sum(n for n, _ in self.left_out.values())
            shown = ", ".join(f"{t!r} on {g} GPU{'s' if g != 1 else ''} ({n}, first on line {first})"
                              for (t, g), (n, first) in sorted(self.left_out.items()))
            out.append(f"{path}: {total} job{'s' if total != 1 else ''} left out, the profile cannot simulate "
                       f"them (--unprofiled-jobs reject): {shown}")
        return out


class RateCache:
    """reference_rate per (job type, GPU count): traces repeat a few pairs many times."""

    def __init__(self, model: ThroughputModel) -> None:
        self.model = model
        self._cache: dict[tuple[str, int], float] = {}

    def __call__(self, job_type: str, num_gpus: int) -> float:
        key = (job_type, num_gpus)
        r = self._cache.get(key)
        if r is None:
            r = float(self.model.reference_rate(job_type, num_gpus))
            if not (math.isfinite(r) and r > 0):
                raise InputError(f"throughput model gives reference rate {r} for {job_type} on "
                                 f"{num_gpus} GPU(s); cannot convert a duration into work",
                                 field="job_type")
            self._cache[key] = r
        return r


class JobRows:
    """Columns of the rows read so far; ``finish`` shifts times and builds sorted JobSpecs."""

    def __init__(self) -> None:
        self.lines: list[int] = []
        self.controls: list[Controls | None] = []
        self.ids: list[int] = []
        self.names: list[str] = []
        self.submit: list[float] = []
        self.num_gpus: list[int] = []
        self.job_type: list[str] = []
        self.work: list[float] = []
        self.duration: list[float | None] = []
        self.user: list[str] = []
        self.weight: list[float] = []
        self.queue: list[str] = []
        self.priority_class: list[str] = []
        self.gpu_type: list[str | None] = []
        self.cpus: list[float | None] = []
        self.memory_mb: list[int | None] = []

    def __len__(self) -> int:
        return len(self.submit)

    def add(self, line: int, job_id: int, name: str, submit: float, num_gpus: int, job_type: str,
            work: float, duration: float | None, user: str = "", weight: float = 1.0, queue: str = "",
            priority_class: str = "normal", controls: Controls | None = None, gpu_type: str | None = None,
            cpus: float | None = None, memory_mb: int | None = None) -> None:
        self.controls.append(controls)
        self.gpu_type.append(gpu_type)
        self.cpus.append(cpus)
        self.memory_mb.append(memory_mb)
        self.lines.append(line)
        self.ids.append(job_id)
        self.names.append(name)
        self.submit.append(submit)
        self.num_gpus.append(num_gpus)
        self.job_type.append(job_type)
        self.work.append(work)
        self.duration.append(duration)
        self.user.append(user)
        self.weight.append(weight)
        self.queue.append(queue)
        self.priority_class.append(priority_class)

    def check_unique_ids(self, path: Path, field: str = "job_id") -> None:
        seen: dict[int, int] = {}
        for line, i in zip(self.lines, self.ids, strict=True):
            if i in seen:
                raise InputError(f"duplicate job id {i} (first on line {seen[i]})", path=str(path),
                                 line=line, field=field)
            seen[i] = line

    def finish(self) -> list[JobSpec]:
        """Times from the first (earliest) submission; jobs sorted by (submit_time, job_id)."""
        if not self.submit:
            raise InputError("no job left to simulate: the profile can simulate none of the trace's jobs "
                             "(--unprofiled-jobs reject left them all out)")
        t0 = min(self.submit)
        jobs = [
            JobSpec(job_id=i, submit_time=s - t0, num_gpus=g, job_type=t, work=w, duration=d, user=u,
                    priority_weight=p, name=n, queue=q, priority_class=c, controls=lc, gpu_type=gt, cpus=cp,
                    memory_mb=mb)
            for i, s, g, t, w, d, u, p, n, q, c, lc, gt, cp, mb in zip(
                self.ids, self.submit, self.num_gpus, self.job_type, self.work, self.duration,
                self.user, self.weight, self.names, self.queue, self.priority_class, self.controls,
                self.gpu_type, self.cpus, self.memory_mb, strict=True)
        ]
        jobs.sort(key=lambda j: (j.submit_time, j.job_id))
        return jobs


@contextmanager
def csv_with_header(path: Path, required: Sequence[str], optional: Sequence[str], first_field: str
                    ) -> Iterator[tuple[Iterator[tuple[int, list[str]]], dict[str, int]]]:
    """Open a CSV trace and read its header: yields the remaining (line, row) records and the column map.

    An empty file is an error at line 1 naming ``first_field``; a missing column names itself.
    """
    with open_text(path) as f:
        records = csv_rows(f, path)
        first = next(records, None)
        if first is None:
            raise no_jobs(path, 1, first_field)
        yield records, header_index(first[1], required, optional, path)
