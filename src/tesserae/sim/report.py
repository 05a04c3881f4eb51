"""Writes a run's output folder: summary.json, jobs.csv and timeline.csv."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

from tesserae.sim.engine import SimResult
from tesserae.sim.metrics import JOB_COLUMNS, QUEUE_COLUMNS, job_records


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file behind."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_run(out: Path, result: SimResult, summary: dict[str, Any]) -> None:
    write_run_files(out, job_records(result), result.timeline, summary)


def write_run_files(out: Path, jobs: list[dict[str, Any]], timeline: dict[str, Any], summary: dict[str, Any]) -> None:
    """The run folder from plain data (as a sweep brings it back from another process)."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".jobs.csv.tmp"
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(jobs[0]) if jobs else JOB_COLUMNS)  # + outcome, retries
        w.writeheader()
        for rec in jobs:
            w.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()})
    os.replace(tmp, out / "jobs.csv")
    tl = timeline
    lines = ["time,gpus_in_use,queued,running"]
    lines += [f"{t:.3f},{int(g)},{int(q)},{int(r)}" for t, g, q, r in
              zip(tl["time"], tl["gpus_in_use"], tl["queued"], tl["running"], strict=True)]
    atomic_write_text(out / "timeline.csv", "\n".join(lines) + "\n")
    if summary.get("queues"):
        write_queue_csv(out / "queues.csv", summary["queues"])
    atomic_write_text(out / "summary.json", json.dumps(_clean(summary), indent=2, sort_keys=False) + "\n")


def write_queue_csv(path: Path, queues: list[dict[str, Any]]) -> None:
    """One row per tenant queue (the summary's ``queues``), in QUEUE_COLUMNS order."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=QUEUE_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for q in queues:
            w.writerow({k: ("" if v is None else v) for k, v in q.items()})
    os.replace(tmp, path)
