"""Reading a ``simulate`` or ``compare`` output folder, and explaining why a job waited.

A folder is a ``simulate`` run (``summary.json``, ``jobs.csv``, ``timeline.csv`` at its top) or a
``compare`` output (one such run per subfolder, two levels deep for a sweep, and ``compare.csv``).
Every file is read as untrusted input: a missing file, a missing column or a value that is not a
number is an ``InputError`` naming the file, the line and the field.

``explain`` answers "why did job 123 wait?" from the run's own records: the free GPUs at each
decision while it waited (from ``timeline.csv``), the jobs submitted after it that started first
(from ``jobs.csv``), its preemptions, and what the same job did in the other runs.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tesserae.core.errors import InputError

JOB_NUMERIC = ("job_id", "num_gpus", "submit_time", "first_start", "finish_time", "jct", "queueing_delay",
               "preemptions", "migrations", "gpu_seconds", "slowdown")
TIMELINE_COLUMNS = ("time", "gpus_in_use", "queued", "running")
#: Largest CSV field the readers accept (a hostile file cannot make one huge cell).
MAX_FIELD = 1 << 16
#: Jobs listed as examples in an explanation.
EXAMPLES = 5


@dataclass
class Run:
    """One run folder: its summary and, read on first use, its jobs and timeline columns."""

    key: str
    path: Path
    summary: dict[str, Any]
    _jobs: dict[str, np.ndarray] | None = field(default=None, repr=False)
    _names: list[str] | None = field(default=None, repr=False)
    _timeline: dict[str, np.ndarray] | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return str(self.summary.get("label") or self.summary.get("policy") or self.key)

    @property
    def group(self) -> str:
        """Runs with the same workload (seed and load) are compared with each other."""
        seed, load = self.summary.get("seed"), self.summary.get("load")
        parts = [f"seed {seed}" if seed is not None else "", f"load {load}" if load is not None else ""]
        return ", ".join(p for p in parts if p) or "all runs"

    @property
    def cluster_gpus(self) -> int:
        v = self.summary.get("cluster_gpus")
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else 0

    def jobs(self) -> dict[str, np.ndarray]:
        if self._jobs is None:
            self._jobs, self._names = read_jobs(self.path / "jobs.csv")
        return self._jobs

    def names(self) -> list[str]:
        self.jobs()
        assert self._names is not None
        return self._names

    def timeline(self) -> dict[str, np.ndarray]:
        if self._timeline is None:
            self._timeline = read_timeline(self.path / "timeline.csv")
        return self._timeline


def _csv_rows(path: Path, required: tuple[str, ...]) -> tuple[list[str], Any, Any]:
    if not path.is_file():
        raise InputError("missing: a run folder has summary.json, jobs.csv and timeline.csv", path=str(path))
    csv.field_size_limit(MAX_FIELD)
    f = path.open(newline="", encoding="utf-8", errors="replace")
    reader = csv.reader(f)
    header = next(reader, None)
    if header is None:
        f.close()
        raise InputError("the file is empty", path=str(path), line=1)
    missing = [c for c in required if c not in header]
    if missing:
        f.close()
        raise InputError(f"missing column(s) {', '.join(missing)}", path=str(path), line=1, field=missing[0])
    return header, reader, f


def _number(text: str, path: Path, line: int, name: str, blank_ok: bool) -> float:
    if text == "" and blank_ok:
        return math.nan
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"'{text[:40]}' is not a number", path=str(path), line=line, field=name) from None
    if math.isnan(v) and not blank_ok:
        raise InputError("NaN where a number is needed", path=str(path), line=line, field=name)
    return v


def read_jobs(path: Path) -> tuple[dict[str, np.ndarray], list[str]]:
    """jobs.csv as float columns (blank = NaN: never started or never finished) and the names."""
    header, reader, f = _csv_rows(path, JOB_NUMERIC)
    idx = {c: header.index(c) for c in JOB_NUMERIC}
    name_i = header.index("name") if "name" in header else None
    cols: dict[str, list[float]] = {c: [] for c in JOB_NUMERIC}
    names: list[str] = []
    with f:
        for line, row in enumerate(reader, 2):
            if not row:
                continue
            if len(row) != len(header):
                raise InputError(f"{len(row)} fields where the header has {len(header)}", path=str(path), line=line)
            for c, i in idx.items():
                cols[c].append(_number(row[i], path, line, c, c not in ("job_id", "num_gpus", "submit_time")))
            names.append(row[name_i][:200] if name_i is not None else "")
    return {c: np.asarray(v, dtype=np.float64) for c, v in cols.items()}, names


def read_timeline(path: Path) -> dict[str, np.ndarray]:
    header, reader, f = _csv_rows(path, TIMELINE_COLUMNS)
    idx = {c: header.index(c) for c in TIMELINE_COLUMNS}
    cols: dict[str, list[float]] = {c: [] for c in TIMELINE_COLUMNS}
    with f:
        for line, row in enumerate(reader, 2):
            if not row:
                continue
            if len(row) != len(header):
                raise InputError(f"{len(row)} fields where the header has {len(header)}", path=str(path), line=line)
            for c, i in idx.items():
                cols[c].append(_number(row[i], path, line, c, False))
    out = {c: np.asarray(v, dtype=np.float64) for c, v in cols.items()}
    if out["time"].size > 1 and (np.diff(out["time"]) < 0).any():
        bad = int(np.flatnonzero(np.diff(out["time"]) < 0)[0]) + 3
        raise InputError("times go backwards", path=str(path), line=bad, field="time")
    return out


def read_summary(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path=str(path)) from None
    except ValueError as e:
        raise InputError(f"not valid JSON ({e})", path=str(path)) from None
    if not isinstance(doc, dict):
        raise InputError("not a JSON object", path=str(path))
    return doc


def find_runs(folder: Path) -> tuple[str, list[Run]]:
    """(kind, runs) of an output folder: ``simulate`` (one run) or ``compare`` (in compare.csv's
    order when it is there, else by folder name)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("not a folder (give the --out folder of simulate or compare)", path=str(folder))
    if (folder / "summary.json").is_file():
        return "simulate", [Run(".", folder, read_summary(folder / "summary.json"))]
    paths = sorted({*folder.glob("*/summary.json"), *folder.glob("*/*/summary.json")})
    if not paths:
        raise InputError("holds no summary.json: not an output folder of simulate or compare", path=str(folder))
    runs = [Run(p.parent.relative_to(folder).as_posix(), p.parent, read_summary(p)) for p in paths]
    order = _compare_order(folder / "compare.csv")
    if order:
        def rank(r: Run) -> tuple[int, str]:
            key = (r.label, str(r.summary.get("seed")), str(r.summary.get("load")))
            return (order.get(key, len(order)), r.key)

        runs.sort(key=rank)
    return "compare", runs


def _compare_order(path: Path) -> dict[tuple[str, str, str], int]:
    if not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        rows = list(csv.DictReader(f))
    out: dict[tuple[str, str, str], int] = {}
    for i, row in enumerate(rows):
        key = (row.get("label") or "", _norm(row.get("seed")), _norm(row.get("load")))
        out.setdefault(key, i)
    return out


def _norm(text: str | None) -> str:
    """compare.csv writes None as '' and numbers as Python prints them; match str() of the JSON."""
    if text in (None, ""):
        return "None"
    try:
        v = float(text)  # type: ignore[arg-type]
    except ValueError:
        return str(text)
    return str(int(v)) if v.is_integer() and "." not in str(text) else str(v)


# ----------------------------------------------------------------------------- why did it wait?
def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def explain(runs: list[Run], run: Run, job_id: int) -> dict[str, Any]:
    """Facts and plain sentences on why ``job_id`` waited in ``run`` (KeyError if it is not there)."""
    jobs = run.jobs()
    hits = np.flatnonzero(jobs["job_id"] == job_id)
    if hits.size == 0:
        raise KeyError(job_id)
    i = int(hits[0])
    g = int(jobs["num_gpus"][i])
    submit, first, finish = float(jobs["submit_time"][i]), float(jobs["first_start"][i]), float(jobs["finish_time"][i])
    started = math.isfinite(first)
    wait_end = first if started else (float(np.nanmax(jobs["finish_time"])) if np.isfinite(jobs["finish_time"]).any()
                                     else submit)
    total = run.cluster_gpus
    facts: dict[str, Any] = {
        "job_id": job_id, "name": run.names()[i], "run": run.key, "label": run.label, "gpus": g,
        "cluster_gpus": total, "submit_time": submit, "first_start": _finite(first), "finish_time": _finite(finish),
        "first_start_delay": (first - submit) if started else None, "jct": _finite(float(jobs["jct"][i])),
        # every wait (before the first start and after each preemption); None for a job that did not end
        "waited": _finite(float(jobs["queueing_delay"][i])),
        "preemptions": int(jobs["preemptions"][i]) if math.isfinite(jobs["preemptions"][i]) else 0,
        "migrations": int(jobs["migrations"][i]) if math.isfinite(jobs["migrations"][i]) else 0,
        "gpu_seconds": _finite(float(jobs["gpu_seconds"][i])),
    }
    # Time stopped after the first start (preempted): JCT minus the time it held its GPUs.
    if facts["waited"] is not None and started:
        facts["waited_after_start"] = max(0.0, facts["waited"] - (first - submit))
    else:
        facts["waited_after_start"] = None
    tl = run.timeline()
    t = tl["time"]
    during = (t >= submit) & (t < wait_end) if started else (t >= submit)
    facts["decisions_while_waiting"] = int(during.sum())
    if during.any() and total:
        free = total - tl["gpus_in_use"][during]
        enough = free >= g
        facts["max_free_gpus"] = int(free.max())
        facts["decisions_with_enough_free"] = int(enough.sum())
        facts["first_enough_free_time"] = float(t[during][np.argmax(enough)]) if enough.any() else None
        facts["max_queued"] = int(tl["queued"][during].max())
    else:
        facts.update(max_free_gpus=None, decisions_with_enough_free=0, first_enough_free_time=None, max_queued=None)
    before = np.flatnonzero(t <= submit)
    facts["queued_at_submit"] = int(tl["queued"][before[-1]]) if before.size else None
    later = t[t >= submit]
    facts["first_decision_after_submit"] = float(later[0]) if later.size else None
    # Jobs that arrived after it and started before it: the policy put them ahead (or they fit).
    others = np.flatnonzero((jobs["submit_time"] > submit) & np.isfinite(jobs["first_start"])
                            & (jobs["first_start"] < (first if started else math.inf)))
    others = others[np.argsort(jobs["first_start"][others], kind="stable")]
    facts["overtaken_by"] = int(others.size)
    facts["overtaken_smaller"] = int((jobs["num_gpus"][others] < g).sum())
    facts["overtaken_examples"] = [{"job_id": int(jobs["job_id"][k]), "gpus": int(jobs["num_gpus"][k]),
                                    "submit_time": float(jobs["submit_time"][k]),
                                    "first_start": float(jobs["first_start"][k])} for k in others[:EXAMPLES]]
    facts["elsewhere"] = []
    for other in runs:
        if other is run or other.group != run.group:
            continue
        oj = other.jobs()
        hit = np.flatnonzero(oj["job_id"] == job_id)
        if hit.size:
            k = int(hit[0])
            facts["elsewhere"].append({"run": other.key, "label": other.label,
                                       "waited": _finite(float(oj["queueing_delay"][k])),
                                       "jct": _finite(float(oj["jct"][k]))})
    facts["sentences"] = sentences(facts)
    return facts


def _h(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = abs(seconds)
    if s < 120:
        return f"{seconds:.0f} s"
    if s < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def sentences(f: dict[str, Any]) -> list[str]:
    """The explanation in words, from the facts (plain text: the page shows it as text)."""
    out: list[str] = []
    g, total = f["gpus"], f["cluster_gpus"]
    if f["first_start_delay"] is None:
        out.append(f"Job {f['job_id']} ({g} GPUs) never started in this run: it was rejected (larger than the "
                   "cluster, or no GPU type can run it) or still waiting when the run ended.")
    elif f["first_start_delay"] <= 0:
        out.append(f"Job {f['job_id']} ({g} GPUs) started as soon as it arrived: it did not wait.")
    else:
        out.append(f"Job {f['job_id']} ({g} GPU{'s' if g != 1 else ''}) waited {_h(f['first_start_delay'])} from its "
                   f"submission (t = {_h(f['submit_time'])}) to its first start.")
    if f["queued_at_submit"]:
        out.append(f"When it arrived, {f['queued_at_submit']} job(s) were already waiting.")
    first_decision = f["first_decision_after_submit"]
    if first_decision is not None and first_decision > f["submit_time"] and f["first_start_delay"]:
        out.append(f"The first decision after its arrival came {_h(first_decision - f['submit_time'])} later "
                   "(decisions happen at round boundaries unless the run is event-driven).")
    n = f["decisions_while_waiting"]
    if n and total:
        if f["decisions_with_enough_free"] == 0:
            out.append(f"At none of the {n} decisions while it waited were {g} GPUs free (at most "
                       f"{f['max_free_gpus']} of {total}): the cluster was too full for it.")
        else:
            out.append(f"At {f['decisions_with_enough_free']} of the {n} decisions while it waited, {g} or more GPUs "
                       f"were free (first at t = {_h(f['first_enough_free_time'])}), yet it did not start: the policy "
                       "ranked other jobs first, or the placement found no layout for it (fragmentation, or the "
                       "free GPUs were of a type its profile cannot use).")
    if f["overtaken_by"]:
        ex = ", ".join(f"{e['job_id']} ({e['gpus']} GPU{'s' if e['gpus'] != 1 else ''})"
                       for e in f["overtaken_examples"])
        out.append(f"{f['overtaken_by']} job(s) submitted after it started before it "
                   f"({f['overtaken_smaller']} of them smaller), e.g. {ex}: the policy put them ahead, or they "
                   "fitted into GPUs too few for this job (backfill).")
    if f["preemptions"]:
        out.append(f"After it started it was preempted {f['preemptions']} time(s)"
                   + (f" and stood stopped {_h(f['waited_after_start'])} in total" if f["waited_after_start"] else "")
                   + ".")
    if f["waited"] is not None and f["waited_after_start"]:
        out.append(f"Every wait counted (before its first start and after each preemption): {_h(f['waited'])}.")
    if f["migrations"]:
        out.append(f"It was migrated {f['migrations']} time(s) (each costs the restart overhead).")
    for e in f["elsewhere"]:
        out.append(f"Under {e['label']} the same job waited {_h(e['waited'])} in all (JCT {_h(e['jct'])}).")
    return out
