"""Builders shared by the tests: jobs and specs, one hand-built decision, toy profiles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import Cluster, parse_cluster_spec
from tesserae.core.jobs import JobSpec, JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.core.throughput import ThroughputModel
from tesserae.profiles.default_model import DefaultModel
from tesserae.profiles.table_model import TableModel
from tesserae.scheduler import Scheduler


def job(job_id: int, submit: float, gpus: int, duration: float, job_type: str = "resnet50") -> JobSpec:
    """A job that runs ``duration`` seconds on the built-in model (1 iteration = 1 s)."""
    return JobSpec(job_id, float(submit), gpus, job_type, float(duration), float(duration))


def spec(job_id: int, gpus: int, job_type: str = "resnet50", work: float = 1000.0, submit: float = 0.0
         ) -> JobSpec:
    return JobSpec(job_id, submit + job_id * 1e-3, gpus, job_type, work, work)


def decide(cluster: str | Cluster, jobs: Sequence[JobSpec], previous: Mapping[int, Sequence[int]] | None = None,
           *, placement: str = "tesserae", policy: str = "fifo", packing: bool = False,
           model: ThroughputModel | None = None, partners: Mapping[int, int] | None = None
           ) -> tuple[Plan, Scheduler, JobTable]:
    """One decision at t=0 with rows = job order; ``previous`` maps rows to the GPUs they held."""
    cl = parse_cluster_spec(cluster) if isinstance(cluster, str) else cluster
    model = model or DefaultModel()
    table = JobTable(list(jobs))
    table.set_reference_rates(model)
    table.status[:] = JobStatus.QUEUED
    prev: dict[int, Assignment] = {}
    for r, g in (previous or {}).items():
        table.status[r] = JobStatus.RUNNING
        prev[r] = Assignment(r, tuple(sorted(g)), (partners or {}).get(r))
    sched = build_scheduler(cl, model, RunSpec(policy=policy, placement=placement, packing=packing))
    plan = sched.decide(0.0, table, np.arange(table.n), prev)
    return plan, sched, table


def nodes_of(cluster: Cluster, gpus: Sequence[int]) -> set[int]:
    return {int(cluster.gpu_node[g]) for g in gpus}


def toy_model(pairs: Mapping[tuple[str, str], tuple[float, float]], types: Sequence[str] = ("A", "B", "C", "D"),
              gpu: str = "v100", counts: Sequence[int] = (1,)) -> TableModel:
    """Every type runs at 1 it/s alone; ``pairs[(a, b)] = (rate of a, rate of b)`` when sharing."""
    alone = {(t, n, gpu, True): 1.0 for t in types for n in counts}
    table = {(a, n, gpu, True, b, n): v for (a, b), v in pairs.items() for n in counts}
    return TableModel(name="toy", reference_gpu_type=gpu, alone=alone, pairs=table, measured=True)
