"""The cells of a Slurm accounting dump (``sacct --parsable2``): times, durations, TRES lists, states.

Each parser takes one cell's text and raises :class:`InputError` naming the file, line and field
when it cannot read it; "no value" (an empty cell, ``Unknown``, ``None``) is ``None``, for the
caller to decide what it means (a job that never started has no ``Start``).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, tzinfo
from pathlib import Path

from tesserae.core.errors import InputError

#: What sacct prints where a time or a value is not known.
NO_VALUE = frozenset({"", "unknown", "none", "n/a", "invalid"})
_UNIT = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}
_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)[cn]?$", re.IGNORECASE)
_EPOCH = datetime(1970, 1, 1)
_PER_GPU = re.compile(r"_\d+$")
_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


def missing(text: str) -> bool:
    return not text or text.strip().lower() in NO_VALUE


def timestamp(text: str, zone: tzinfo, path: Path, line: int, field: str) -> float | None:
    """Seconds since the Unix epoch of a sacct time: ``YYYY-MM-DDTHH:MM:SS`` read in ``zone`` (an offset
    in the text wins), or a number of epoch seconds (``SLURM_TIME_FORMAT=%s``); None for no value."""
    t = text.strip()
    if t.isdigit():
        return float(t)
    if t.lower() in NO_VALUE:
        return None
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise InputError(f"bad time {text!r}; expected YYYY-MM-DDTHH:MM:SS (sacct's default format) or epoch "
                         "seconds", path=str(path), line=line, field=field) from None
    if dt.tzinfo is not None:
        return dt.timestamp()
    if zone is UTC:
        return (dt - _EPOCH).total_seconds()
    return dt.replace(tzinfo=zone).timestamp()


def duration(text: str, path: Path, line: int, field: str) -> float | None:
    """Seconds of a sacct duration: ``[D-]HH:MM:SS``, ``MM:SS``, or a whole number of seconds
    (``ElapsedRaw``); None for no value."""
    t = text.strip()
    if t.isdigit():
        return float(t)
    if t.lower() in NO_VALUE:
        return None
    m = _DURATION.match(t)
    if m is None:
        raise InputError(f"bad duration {text!r}; expected [D-]HH:MM:SS or seconds", path=str(path), line=line,
                         field=field)
    days, hours, minutes, seconds = m.groups()
    return int(days or 0) * 86400.0 + int(hours or 0) * 3600.0 + int(minutes) * 60.0 + float(seconds)


def memory_mb(text: str, path: Path, line: int, field: str) -> int | None:
    """MiB of a sacct memory amount (``16G``, ``4000M``, ``2Gn``; no unit: MiB); None for no value or 0."""
    t = text.strip()
    if t.lower() in NO_VALUE:
        return None
    m = _MEM.match(t)
    if m is None:
        raise InputError(f"bad memory amount {text!r}; expected a number with K, M, G, T or P", path=str(path),
                         line=line, field=field)
    mb = float(m.group(1)) * _UNIT[m.group(2).upper()]
    return max(1, math.ceil(mb)) if mb > 0 else None


def tres(text: str, path: Path, line: int, field: str, _cache: dict[str, Tres] = {}) -> Tres:  # noqa: B006
    """The parsed TRES list ``text`` (a dump repeats a few lists many times: each is parsed once)."""
    got = _cache.get(text)
    if got is None:
        got = Tres(text, path, line, field)
        if len(_cache) < 100_000:
            _cache[text] = got
    return got


class Tres:
    """One TRES list (``cpu=4,mem=16G,node=1,gres/gpu=2,gres/gpu:a100=2``): GPUs, their type, CPUs, memory.

    A type ending in ``_N`` is one GPU of a node whose every GPU is its own GRES type (``a100_0``,
    ``a100_1``: how Tesserae's Slurm executor pins runs to GPUs, docs/slurm.md): its model is the
    part before (``a100``).
    """

    __slots__ = ("cpus", "gpu_type", "gpus", "memory_mb", "nodes")

    def __init__(self, text: str, path: Path, line: int, field: str) -> None:
        self.gpus: int | None = None
        self.gpu_type: str | None = None
        self.cpus: float | None = None
        self.memory_mb: int | None = None
        self.nodes: int | None = None
        if missing(text):
            return
        typed: dict[str, int] = {}
        for item in text.split(","):
            key, sep, value = item.partition("=")
            key = key.strip().lower()
            if not sep or not key:
                raise InputError(f"bad TRES entry {item!r} in {text!r}; expected NAME=VALUE,...", path=str(path),
                                 line=line, field=field)
            if key == "gres/gpu":
                self.gpus = _count(value, text, path, line, field)
            elif key.startswith("gres/gpu:"):  # a per-GPU type (a100_3, docs/slurm.md) counts as its model
                model = _PER_GPU.sub("", key.removeprefix("gres/gpu:"))
                typed[model] = typed.get(model, 0) + _count(value, text, path, line, field)
            elif key == "cpu":
                self.cpus = float(_count(value, text, path, line, field)) or None
            elif key == "mem":
                self.memory_mb = memory_mb(value, path, line, field)
            elif key == "node":
                self.nodes = _count(value, text, path, line, field)
        typed = {t: n for t, n in typed.items() if n > 0}
        if self.gpus is None and typed:
            self.gpus = sum(typed.values())
        if len(typed) == 1:  # GPUs of one type; several types in one job have no single type
            self.gpu_type = next(iter(typed))


NO_TRES = Tres("", Path(), 0, "")


def _count(value: str, text: str, path: Path, line: int, field: str) -> int:
    v = value.strip()
    if not v.isdigit():
        raise InputError(f"bad TRES count {value!r} in {text!r}; expected a whole number", path=str(path), line=line,
                         field=field)
    return int(v)


# ---------------------------------------------------------------------------------------------- states
#: How a job's record ended, by sacct's state (its first word: ``CANCELLED by 1234``).
COMPLETED = "completed"
FAILED = "failed"
TIMED_OUT = "timed-out"
CANCELLED = "cancelled"
RESTARTED = "restarted"  # an attempt Slurm ended and requeued (preemption, requeue): not the job's end
UNFINISHED = "unfinished"  # still pending, running or suspended when the dump was taken
OTHER = "other"  # revoked (a federated sibling): never this cluster's job

STATES: dict[str, str] = {
    "COMPLETED": COMPLETED,
    "FAILED": FAILED, "NODE_FAIL": FAILED, "OUT_OF_MEMORY": FAILED, "BOOT_FAIL": FAILED,
    "TIMEOUT": TIMED_OUT, "DEADLINE": TIMED_OUT,
    "CANCELLED": CANCELLED, "PREEMPTED": CANCELLED,
    "REQUEUED": RESTARTED, "REQUEUE_FED": RESTARTED, "REQUEUE_HOLD": RESTARTED, "RESIZING": RESTARTED,
    "PENDING": UNFINISHED, "RUNNING": UNFINISHED, "SUSPENDED": UNFINISHED, "COMPLETING": UNFINISHED,
    "CONFIGURING": UNFINISHED, "STOPPED": UNFINISHED, "SIGNALING": UNFINISHED, "STAGE_OUT": UNFINISHED,
    "SPECIAL_EXIT": FAILED, "REVOKED": OTHER,
}


def state(text: str, path: Path, line: int, field: str = "State") -> tuple[str, str]:
    """(sacct's state word, what it means: one of the constants above)."""
    word = text.strip().split(" ", 1)[0].rstrip("+").upper()
    kind = STATES.get(word)
    if kind is None:
        raise InputError(f"unknown job state {text!r} (known: {', '.join(sorted(STATES))})", path=str(path),
                         line=line, field=field)
    return word, kind
