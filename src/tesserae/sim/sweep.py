"""Sweeps: many (configuration, seed, load) simulations, run here (in this process, or in several
processes, one per core) or spread over a Ray cluster.

A task's result depends only on its inputs (the simulator is deterministic), so a sweep run on
Ray or in several processes gives exactly the results of the same sweep run in one process. The
driver builds each workload once and ships it, with the throughput model, through Ray's object
store: workers need the package installed, not the trace or profile files.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tesserae.config import RunSpec
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec, JobStatus, Outcome
from tesserae.core.throughput import ThroughputModel
from tesserae.heap import keep_freed_memory
from tesserae.sim.metrics import job_records
from tesserae.sim.runner import simulate
from tesserae.sim.workload import WorkloadSpec, build_workload


@dataclass(frozen=True)
class SweepPoint:
    run: RunSpec
    seed: int
    load: float | None  # None for a trace (its load is what it is)


@dataclass
class PointResult:
    """What a sweep point brings back: plain data, cheap to ship between processes."""

    point: SweepPoint
    summary: dict[str, Any]
    jobs: list[dict[str, Any]]
    timeline: dict[str, np.ndarray]
    jct: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0))


def run_point(point: SweepPoint, specs: Sequence[JobSpec], cluster: Cluster, model: ThroughputModel,
              window: tuple[int, int] | None = None) -> PointResult:
    result, summary = simulate(specs, cluster, model, point.run, seed=point.seed, window=window)
    t = result.table
    done = (t.status == JobStatus.DONE) & (t.outcome == Outcome.COMPLETED)
    return PointResult(point, summary, job_records(result), result.timeline, t.finish[done] - t.submit[done])


def local_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def run_sweep(points: Sequence[SweepPoint], workload: WorkloadSpec, cluster: Cluster, model: ThroughputModel, *,
              window: tuple[int, int] | None = None, ray_address: str | None = None,
              on_done: Callable[[PointResult], None] | None = None, workers: int = 1) -> list[PointResult]:
    """Run every point; results come back in the order of ``points``. ``workers`` > 1 runs the points in
    that many processes here (fresh interpreters: nothing of this process's threads is inherited)."""
    workloads: dict[tuple[int, float | None], list[JobSpec]] = {}
    notes: dict[tuple[int, float | None], list[str]] = {}
    for p in points:
        key = (p.seed, p.load)
        if key not in workloads:
            wl = replace(workload, seed=p.seed, load=workload.load if p.load is None else p.load)
            notes[key] = []
            workloads[key] = build_workload(wl, cluster, model, notes[key])

    def done(res: PointResult) -> None:
        res.summary["warnings"] = [*res.summary.get("warnings", []), *notes[(res.point.seed, res.point.load)]]
        if on_done:
            on_done(res)

    if ray_address is None and workers > 1 and len(points) > 1:
        return _run_in_processes(points, workloads, cluster, model, window, workers, done)
    if ray_address is None:
        out = []
        for p in points:
            res = run_point(p, workloads[(p.seed, p.load)], cluster, model, window)
            done(res)
            out.append(res)
        return out
    return _run_on_ray(points, workloads, cluster, model, window, ray_address, done)


def _run_in_processes(points: Sequence[SweepPoint], workloads: dict[tuple[int, float | None], list[JobSpec]],
                      cluster: Cluster, model: ThroughputModel, window: tuple[int, int] | None, workers: int,
                      done: Callable[[PointResult], None]) -> list[PointResult]:
    out: list[PointResult | None] = [None] * len(points)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(points)), mp_context=context,
                             initializer=keep_freed_memory) as pool:
        futures = {pool.submit(run_point, p, workloads[(p.seed, p.load)], cluster, model, window): i
                   for i, p in enumerate(points)}
        for f in as_completed(futures):
            res = f.result()
            done(res)
            out[futures[f]] = res
    return [r for r in out if r is not None]


def _run_on_ray(points: Sequence[SweepPoint], workloads: dict[tuple[int, float | None], list[JobSpec]],
                cluster: Cluster, model: ThroughputModel, window: tuple[int, int] | None, address: str,
                on_done: Callable[[PointResult], None] | None) -> list[PointResult]:
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'tesserae[ray]'", field="ray") from None
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=None if address == "local" else address, ignore_reinit_error=True,
                     include_dashboard=False, log_to_driver=False)
        except ConnectionError as e:
            raise InputError(f"cannot reach the Ray cluster at '{address}': {e}", field="ray") from None
    try:
        remote = ray.remote(num_cpus=1)(run_point)
        cluster_ref, model_ref = ray.put(cluster), ray.put(model)
        spec_refs = {k: ray.put(v) for k, v in workloads.items()}
        futures = [remote.remote(p, spec_refs[(p.seed, p.load)], cluster_ref, model_ref, window) for p in points]
        index = {f: i for i, f in enumerate(futures)}
        results: list[PointResult | None] = [None] * len(futures)
        pending = list(futures)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            res = ray.get(ready[0])
            results[index[ready[0]]] = res
            if on_done:
                on_done(res)
        return [r for r in results if r is not None]
    finally:
        if started_here:
            ray.shutdown()
