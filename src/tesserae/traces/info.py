"""Summary of a trace: what a user checks before simulating it (``tesserae trace-info``).

Durations are the trace's own when known; jobs that carry only work (Gavel) get work / the
model's reference rate when a model is given, and are counted as ``unknown`` otherwise (they
then count in neither the quantiles nor the GPU-seconds). The offered load on a cluster is total
GPU-seconds / (cluster GPUs x span), span = last submission - first submission: the load the
arrivals offer while they last, the quantity the synthetic generator targets. Jobs asking more
GPUs than the cluster has are counted: the simulator rejects them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobSpec
from tesserae.core.throughput import ThroughputModel

QUANTILES = {"p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95, "p99": 0.99}


def job_durations(jobs: Sequence[JobSpec], model: ThroughputModel | None = None) -> np.ndarray:
    """Seconds per job (alone, consolidated, reference GPU); NaN where unknown."""
    out = np.full(len(jobs), np.nan)
    cache: dict[tuple[str, int], float] = {}
    for k, j in enumerate(jobs):
        if j.duration is not None:
            out[k] = j.duration
        elif model is not None:
            key = (j.job_type, j.num_gpus)
            if key not in cache:
                cache[key] = float(model.reference_rate(j.job_type, j.num_gpus))
            r = cache[key]
            if r > 0:
                out[k] = j.work / r
    return out


def trace_info(jobs: Sequence[JobSpec], cluster: Cluster | None = None,
               model: ThroughputModel | None = None) -> dict[str, Any]:
    """Job count, GPU-count mix, duration quantiles, GPU-seconds, span and (with a cluster) load."""
    n = len(jobs)
    gpus = np.fromiter((j.num_gpus for j in jobs), dtype=np.int64, count=n)
    submit = np.fromiter((j.submit_time for j in jobs), dtype=np.float64, count=n)
    dur = job_durations(jobs, model)
    known = ~np.isnan(dur)

    counts = Counter(gpus.tolist())
    mix = {g: {"count": c, "share": c / n} for g, c in sorted(counts.items())}
    if known.any():
        d = dur[known]
        stats: dict[str, float | int | None] = {"min": float(d.min())}
        stats.update({k: float(np.quantile(d, q)) for k, q in QUANTILES.items()})
        stats.update({"max": float(d.max()), "mean": float(d.mean())})
    else:
        stats = {k: None for k in ("min", *QUANTILES, "max", "mean")}
    stats["known"] = int(known.sum())
    stats["unknown"] = int(n - known.sum())

    gpu_seconds = float((gpus[known] * dur[known]).sum())
    first = float(submit.min()) if n else None
    last = float(submit.max()) if n else None
    span = float(submit.max() - submit.min()) if n else 0.0
    info: dict[str, Any] = {
        "jobs": n,
        "gpu_mix": mix,
        "duration": stats,
        "gpu_seconds": gpu_seconds,
        "first_submit": first,
        "last_submit": last,
        "span": span,
        "job_types": dict(sorted(Counter(j.job_type for j in jobs).items())),
    }
    if cluster is not None:
        too_big = gpus > cluster.num_gpus
        info["cluster"] = {
            "description": cluster.describe(),
            "gpus": cluster.num_gpus,
            "offered_load": gpu_seconds / (cluster.num_gpus * span) if span > 0 else None,
            "too_large": int(too_big.sum()),
            "too_large_job_ids": [jobs[k].job_id for k in np.flatnonzero(too_big).tolist()],
            "larger_than_a_node": int((gpus > cluster.max_node_gpus).sum()),
        }
    return info
