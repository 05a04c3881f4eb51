"""Reader for a Slurm site's own history: ``sacct --parsable2`` dumps (``tesserae trace import slurm``).

A dump is a header of field names and one record per line, ``|``-separated (``--parsable2``).
Required fields: ``JobID`` or ``JobIDRaw``, ``State``, ``Submit``, ``Start``, ``End`` and
``AllocTRES`` or ``ReqTRES``; read when present: ``JobIDRaw``, ``ElapsedRaw``/``Elapsed``,
``AllocCPUS``, ``NNodes``, ``User``, ``Account``, ``Partition``, ``JobName``. ``SACCT_FORMAT`` is
what ``--sacct`` asks for (``JobName`` last, so that a ``|`` in a job's name cannot shift a field).

- **Times.** ``Submit``/``Start``/``End`` in sacct's format (``YYYY-MM-DDTHH:MM:SS``) are read in
  an explicit time zone (``zone``; ``--sacct`` runs sacct with ``TZ=UTC``), an offset in the text
  wins, epoch seconds are taken as they are (``SLURM_TIME_FORMAT=%s``). Submission times become
  seconds from the first submission, as in every reader.
- **Jobs.** One job per ``JobIDRaw`` (the id; ``JobID`` is kept as the job's ``name``, e.g. an
  array task ``123_4`` or a heterogeneous component ``123+0``). Steps (``123.batch``,
  ``123.0``, ``123.extern``) are left out: a job's allocation is its record. Records repeated for a
  requeued job (``--duplicates``) are its attempts, in file order.
- **GPUs.** Count and type from ``AllocTRES`` (what it ran on: ``gres/gpu=4``,
  ``gres/gpu:a100=4``), else ``ReqTRES``. With ``keep_requested_types`` a type asked for in
  ``ReqTRES`` becomes the job's ``gpu_type`` (the only type it may run on; placements that choose
  types themselves, ``tesserae`` and ``gavel``, refuse such jobs), otherwise it is not a constraint.
  CPUs and memory (MiB) from the same lists.
- **Work.** The job's run time (``ElapsedRaw``, else ``Elapsed``, else ``End - Start``; at least
  1 s, as Slurm counts whole seconds) summed over its attempts, times the model's rate for its job
  type on the GPUs it ran on (their type when the model knows it, else the reference type;
  spread when it ran on several nodes): replayed on the same GPUs it runs as long as it did.
- **Job types.** ``JobName`` when it names one of the model's job types, else drawn as the
  Philly reader draws them: with ``types = sorted(model.job_types())`` and
  ``rng = numpy.random.default_rng(seed)``, the k-th imported job's draw is
  ``rng.integers(len(types), size=n)[k]``.
- **Tenant queue** (``queue_by``): the ``account`` (default), the ``partition``, both
  (``partition.account``), the ``user`` (``queue`` empty: the user's queue) or none. ``--queue-config
  derived`` then gives one queue per name with guarantees from its share of GPU time, as
  Philly's virtual clusters get.
- **How it ended** (the final record's ``State``), in the lifecycle columns of ``traces.controls``:
  ``COMPLETED`` completes; ``FAILED``/``NODE_FAIL``/``OUT_OF_MEMORY``/``BOOT_FAIL`` fail after
  their run time (``failures``/``fail_after``); ``TIMEOUT``/``DEADLINE`` reach a time limit equal
  to their run time; ``CANCELLED`` and a final ``PREEMPTED`` are cancelled after their run time
  (``cancel_after``). Earlier attempts that failed are failures retried at once (``retries``,
  ``fail_after`` their mean run time, backoff 0); earlier attempts Slurm requeued (``REQUEUED``,
  ``PREEMPTED``) add their run time to the job's work. A job that did not complete had more work
  than it did, how much is unknown: its work is twice what it could do before its recorded end on
  the model's fastest GPU type, so that the recorded end comes first wherever it runs.
- **Left out, and counted** (``SlurmImport.left_out``, printed by the import): steps, jobs that
  never started (cancelled or failed while waiting: no ``Start``, or no ``AllocTRES``), jobs still
  pending or running when the dump was taken (no end yet), jobs without GPUs, and revoked
  federation siblings.

Anything else that cannot be read (a missing column, a bad time, a TRES list, an unknown state,
the same job twice with no requeue between) is an ``InputError`` naming the file, line and field.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

from tesserae.core.errors import InputError
from tesserae.core.jobs import Controls, JobSpec
from tesserae.core.throughput import ThroughputModel
from tesserae.traces import slurm_fields as sf
from tesserae.traces._fields import INT64_MAX, JobRows, check_file, model_types, no_jobs

#: The fields ``--sacct`` asks for, in this order (``JobName`` last: it is the only free text).
SACCT_FORMAT = ("JobIDRaw", "JobID", "State", "Submit", "Start", "End", "ElapsedRaw", "AllocTRES", "ReqTRES",
                "AllocCPUS", "NNodes", "User", "Account", "Partition", "JobName")
QUEUE_BY = ("account", "partition", "partition.account", "user", "none")
_KNOWN = tuple(f.lower() for f in (*SACCT_FORMAT, "Elapsed"))
_REQUIRED = ("state", "submit", "start", "end")

#: Why a record is not a job of the imported trace (``SlurmImport.left_out``).
STEPS = "steps (a job's allocation is its record)"
NEVER_STARTED = "never started (cancelled or failed while waiting)"
UNFINISHED = "still pending or running when the dump was taken (no end yet)"
NO_GPUS = "without GPUs"
REVOKED = "revoked (a federation sibling)"


@dataclass
class SlurmImport:
    """The imported jobs (``JobSpec``s, sorted by submission) and how many records were left out, and why."""

    jobs: list[JobSpec]
    left_out: Counter[str] = field(default_factory=Counter)
    records: int = 0
    zone: str = "UTC"


@dataclass(slots=True)
class _Attempt:
    line: int
    word: str
    kind: str
    submit: float | None
    start: float | None
    seconds: float | None  # run time, None when it never ran


@dataclass(slots=True)
class _Job:
    raw_id: str
    job_id_text: str
    attempts: list[_Attempt]
    tres: sf.Tres
    req: sf.Tres
    cpus: float | None
    nodes: int | None
    user: str
    account: str
    partition: str
    name: str


def zone_of(name: str) -> tzinfo:
    """An IANA time zone (``Europe/Berlin``) or ``UTC``; an unknown one is an error on ``--timezone``."""
    if name.strip().upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"unknown time zone '{name}' (an IANA name such as UTC or Europe/Berlin)",
                         field="timezone") from None


def _lines(p: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line; bytes that are not UTF-8 name their line."""
    try:
        f = open(p, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        raise InputError(f"cannot open: {e.strerror or e}", path=str(p)) from None
    with f:
        for n, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8-sig" if n == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise InputError("not UTF-8 text", path=str(p), line=n) from None
            if text.strip():
                yield n, text


def _header(p: Path, line: int, text: str) -> dict[str, int]:
    if "|" not in text:
        raise InputError("not a 'sacct --parsable2' dump: the header has no '|' between field names", path=str(p),
                         line=line)
    names = [h.strip().lower() for h in text.split("|")]
    col = {n: i for i, n in enumerate(names) if n in _KNOWN}
    if "jobidraw" not in col and "jobid" not in col:
        raise InputError("missing field 'JobID' (or 'JobIDRaw')", path=str(p), line=line, field="JobID")
    for name in _REQUIRED:
        if name not in col:
            raise InputError(f"missing field '{name.capitalize()}' (sacct --format {','.join(SACCT_FORMAT)})",
                             path=str(p), line=line, field=name.capitalize())
    if "alloctres" not in col and "reqtres" not in col:
        raise InputError("missing field 'AllocTRES' (or 'ReqTRES'): the GPUs of each job", path=str(p), line=line,
                         field="AllocTRES")
    return col


class _Cols:
    """Where each field is in a record (None: absent), read once from the header."""

    def __init__(self, col: dict[str, int]) -> None:
        g = col.get
        self.jobid, self.raw = g("jobid", col.get("jobidraw")), g("jobidraw", col.get("jobid"))
        self.raw_field = "JobIDRaw" if "jobidraw" in col else "JobID"
        self.state, self.submit, self.start, self.end = col["state"], col["submit"], col["start"], col["end"]
        self.elapsed = [(i, label) for name, label in (("elapsedraw", "ElapsedRaw"), ("elapsed", "Elapsed"))
                        if (i := g(name)) is not None]
        self.alloc, self.req, self.cpus, self.nodes = g("alloctres"), g("reqtres"), g("alloccpus"), g("nnodes")
        self.user, self.account, self.partition, self.name = g("user"), g("account"), g("partition"), g("jobname")


def _records(p: Path) -> tuple[_Cols, Iterator[tuple[int, list[str]]]]:
    lines = _lines(p)
    first = next(lines, None)
    if first is None:
        raise no_jobs(p, 1, "JobID")
    col = _header(p, *first)
    width = len(first[1].split("|"))
    last_is_name = col.get("jobname") == width - 1

    def rows() -> Iterator[tuple[int, list[str]]]:
        for n, text in lines:
            cells = text.split("|")
            if len(cells) != width:
                if len(cells) > width and last_is_name:  # a '|' in the job's name (the last field)
                    cells = [*cells[:width - 1], "|".join(cells[width - 1:])]
                else:
                    raise InputError(f"{len(cells)} fields where the header has {width} (a '|' in a value?)",
                                     path=str(p), line=n)
            yield n, cells

    return _Cols(col), rows()


def _run_seconds(cells: list[str], c: _Cols, start: float, end_text: str, kind: str, zone: tzinfo, p: Path,
                 line: int) -> float | None:
    """The record's run time: ElapsedRaw, else Elapsed, else End - Start (None: still running)."""
    for i, label in c.elapsed:
        s = sf.duration(cells[i], p, line, label)
        if s is not None:
            return s
    end = sf.timestamp(end_text, zone, p, line, "End")
    if end is not None:
        if end < start:
            raise InputError(f"ends before it starts ({end_text!r} < {cells[c.start]!r})", path=str(p), line=line,
                             field="End")
        return end - start
    if kind not in (sf.UNFINISHED, sf.RESTARTED):
        raise InputError("a job that started and ended has no End (nor Elapsed)", path=str(p), line=line, field="End")
    return None


def _read(p: Path, zone: tzinfo, left_out: Counter[str]) -> tuple[list[_Job], int]:
    jobs: dict[str, _Job] = {}
    records = 0
    c, rows = _records(p)
    for line, cells in rows:
        records += 1
        text_id = cells[c.jobid].strip()  # type: ignore[index]
        raw = cells[c.raw].strip()  # type: ignore[index]
        if "." in text_id or "." in raw:
            left_out[STEPS] += 1
            continue
        word, kind = sf.state(cells[c.state], p, line)
        submit = sf.timestamp(cells[c.submit], zone, p, line, "Submit")
        start = sf.timestamp(cells[c.start], zone, p, line, "Start")
        if c.alloc is not None and sf.missing(cells[c.alloc]):
            start = None  # never allocated (Slurm gives a job cancelled while waiting a Start equal to its End)
        seconds = None if start is None else _run_seconds(cells, c, start, cells[c.end], kind, zone, p, line)
        attempt = _Attempt(line, word, kind, submit, start, seconds)
        job = jobs.get(raw)
        if job is not None:
            prev = job.attempts[-1]
            if prev.kind not in (sf.RESTARTED, sf.FAILED) and prev.word != "PREEMPTED":
                raise InputError(f"job {text_id} appears twice (first on line {job.attempts[0].line}) without being "
                                 f"requeued in between (its earlier record is {prev.word})", path=str(p), line=line,
                                 field=c.raw_field)
            job.attempts.append(attempt)
            if start is not None:  # the resources of the latest attempt that ran
                _resources(job, cells, c, p, line)
            continue
        job = _Job(raw, text_id, [attempt], sf.NO_TRES, sf.NO_TRES, None, None,
                   "" if c.user is None else cells[c.user].strip(),
                   "" if c.account is None else cells[c.account].strip(),
                   "" if c.partition is None else cells[c.partition].strip(),
                   "" if c.name is None else cells[c.name].strip())
        _resources(job, cells, c, p, line)
        jobs[raw] = job
    return list(jobs.values()), records


def _whole(cells: list[str], i: int | None, p: Path, line: int, field: str) -> int | None:
    """A whole-number cell (None when absent or empty)."""
    if i is None:
        return None
    v = cells[i]
    if v.isdigit():
        return int(v)
    v = v.strip()
    if not v or sf.missing(v):
        return None
    if not v.isdigit():
        raise InputError(f"not a whole number: {v!r}", path=str(p), line=line, field=field)
    return int(v)


def _resources(job: _Job, cells: list[str], c: _Cols, p: Path, line: int) -> None:
    if c.alloc is not None:
        job.tres = sf.tres(cells[c.alloc], p, line, "AllocTRES")
    if c.req is not None:
        job.req = sf.tres(cells[c.req], p, line, "ReqTRES")
    cpus = _whole(cells, c.cpus, p, line, "AllocCPUS")
    if cpus:
        job.cpus = float(cpus)
    nodes = _whole(cells, c.nodes, p, line, "NNodes")
    if nodes is not None:
        job.nodes = nodes


def _job_id(job: _Job, p: Path) -> int:
    if not job.raw_id.isascii() or not job.raw_id.isdigit():  # (int() would read '12_3' as 123)
        what = "an array task" if "_" in job.raw_id else "a heterogeneous job component" if "+" in job.raw_id else \
            "not a number"
        raise InputError(f"job id {job.raw_id!r} is {what}: add JobIDRaw to the fields (sacct --format JobIDRaw,...)",
                         path=str(p), line=job.attempts[0].line, field="JobIDRaw")
    i = int(job.raw_id)
    if i > INT64_MAX:
        raise InputError(f"job id {job.raw_id!r} is out of range", path=str(p), line=job.attempts[0].line,
                         field="JobIDRaw")
    return i


def _queue(job: _Job, queue_by: str) -> str:
    if queue_by == "account":
        return job.account
    if queue_by == "partition":
        return job.partition
    if queue_by == "partition.account":
        return ".".join(x for x in (job.partition, job.account) if x)
    return ""


def _controls(job: _Job, ran: list[_Attempt], total: float) -> Controls | None:
    """The job's end and its earlier failures, as lifecycle controls (see the module docstring)."""
    final = job.attempts[-1]
    failed = [max(1.0, a.seconds or 0.0) for a in ran if a.kind == sf.FAILED and a is not final]
    kind = final.kind
    if kind == sf.FAILED:
        if final.seconds is not None:
            failed.append(max(1.0, final.seconds))
        if not failed:  # failed while waiting after earlier restarts: its end is that of its last run
            return Controls(cancel_after=total)
        return Controls(retries=len(failed) - 1, retry_backoff=0.0, failures=len(failed),
                        fail_after=sum(failed) / len(failed))
    base = {"retries": len(failed), "retry_backoff": 0.0, "failures": len(failed),
            "fail_after": sum(failed) / len(failed) if failed else None}
    if kind == sf.TIMED_OUT:
        return Controls(time_limit=total, **base)  # type: ignore[arg-type]
    if kind == sf.CANCELLED:
        return Controls(cancel_after=total, **base)  # type: ignore[arg-type]
    return Controls(**base) if failed else None  # type: ignore[arg-type]


def read_slurm_import(path: str | Path, model: ThroughputModel, seed: int = 0, *, zone: str = "UTC",
                      queue_by: str = "account", gpu_type: str | None = None,
                      keep_requested_types: bool = False) -> SlurmImport:
    """Jobs of a sacct dump and what was left out (see the module docstring). ``gpu_type``: the type of
    GPUs a record does not type (``gres/gpu=4`` on a site without GRES types)."""
    if queue_by not in QUEUE_BY:
        raise InputError(f"'{queue_by}' is not one of {', '.join(QUEUE_BY)}", field="queue")
    p = check_file(path)
    tz = zone_of(zone)
    left_out: Counter[str] = Counter()
    raw_jobs, records = _read(p, tz, left_out)
    types = model_types(model)
    known_types = {t.lower(): t for t in types}
    known_gpus = {t.lower() for t in model.gpu_types()}
    kept: list[tuple[_Job, list[_Attempt], float, int]] = []
    for job in raw_jobs:
        final = job.attempts[-1]
        ran = job.attempts if len(job.attempts) == 1 and final.start is not None else \
            [a for a in job.attempts if a.start is not None]
        if final.kind == sf.OTHER:
            left_out[REVOKED] += 1
        elif final.kind in (sf.UNFINISHED, sf.RESTARTED):
            left_out[UNFINISHED] += 1
        elif not ran:
            left_out[NEVER_STARTED] += 1
        else:
            g = job.tres.gpus if job.tres.gpus is not None else job.req.gpus
            if not g:
                left_out[NO_GPUS] += 1
                continue
            kept.append((job, ran, max(1.0, sum(a.seconds or 0.0 for a in ran)), g))
    if not kept:
        raise InputError("no job of the dump ran on GPUs (left out: " + (", ".join(
            f"{n} {why}" for why, n in left_out.items()) or "nothing") + ")", path=str(p), field="AllocTRES")
    drawn = np.random.default_rng(seed).integers(len(types), size=len(kept)).tolist()
    rates: dict[tuple[str, int, str | None, bool], float] = {}
    fastest: dict[tuple[str, int], float] = {}
    rows = JobRows()
    for k, (job, ran, total, g) in enumerate(kept):
        job_type = known_types.get(job.name.lower(), types[drawn[k]])
        ran_on = (job.tres.gpu_type or gpu_type or "").lower()
        ran_on = ran_on if ran_on in known_gpus else model.reference_gpu_type
        spread = (job.nodes or job.tres.nodes or 1) > 1
        key = (job_type, g, ran_on, spread)
        rate = rates.get(key)
        if rate is None:
            rate = rates[key] = float(model.rate(job_type, g, ran_on, consolidated=not spread))
            if not rate > 0 or rate == float("inf"):
                raise InputError(f"the throughput model gives rate {rate} for {job_type} on {g} {ran_on} GPU(s); "
                                 "cannot convert the run time into work", path=str(p), line=job.attempts[0].line,
                                 field="AllocTRES")
        controls = _controls(job, ran, total)
        work = total * rate
        if job.attempts[-1].kind != sf.COMPLETED:  # its end is its record's, not its work's (see above)
            top = fastest.get((job_type, g))
            if top is None:
                top = fastest[(job_type, g)] = max(rate, *(float(model.rate(job_type, g, t)) for t in known_gpus))
            work = 2.0 * total * top
        first = job.attempts[0]
        submits = [a.submit for a in job.attempts if a.submit is not None]
        if not submits:
            raise InputError("no Submit time", path=str(p), line=first.line, field="Submit")
        wanted = job.req.gpu_type.lower() if job.req.gpu_type and keep_requested_types else None
        rows.add(first.line, _job_id(job, p), job.job_id_text, min(submits), g, job_type, work, total,
                 user=job.user, queue=_queue(job, queue_by), controls=controls, gpu_type=wanted,
                 cpus=job.tres.cpus or job.cpus or job.req.cpus, memory_mb=job.tres.memory_mb or job.req.memory_mb)
    rows.check_unique_ids(p, field="JobIDRaw")
    return SlurmImport(rows.finish(), left_out, records, zone)


def read_slurm(path: str | Path, model: ThroughputModel, seed: int = 0) -> list[JobSpec]:
    """The jobs of a sacct dump read with the defaults (UTC, accounts as queues): ``--format slurm``."""
    return read_slurm_import(path, model, seed).jobs
