"""Builds the job list of a run: a trace file, or the embedded synthetic default workload."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.throughput import ThroughputModel
from tesserae.traces import generate_workload, read_trace
from tesserae.traces._fields import JobTypeCheck
from tesserae.traces.synthetic import parse_gpu_mix


@dataclass(frozen=True)
class WorkloadSpec:
    trace: Path | None = None
    format: str = "canonical"
    jobs: int = 500
    load: float = 0.8
    gpu_mix: str = "gavel"
    seed: int = 0
    #: A trace's jobs the profile cannot simulate: refuse, generic or reject (``traces._fields.JobTypeCheck``).
    unprofiled: str = "refuse"

    def __post_init__(self) -> None:
        if self.trace is None:
            parse_gpu_mix(self.gpu_mix)  # a bad mix is refused here, before any run starts
        JobTypeCheck(None, self.unprofiled)  # a bad value is refused here, before any run starts

    def describe(self) -> str:
        if self.trace is not None:
            return f"{self.trace} ({self.format})"
        return f"synthetic: {self.jobs} jobs, load {self.load}, {self.gpu_mix} GPU mix, seed {self.seed}"


def build_workload(spec: WorkloadSpec, cluster: Cluster, model: ThroughputModel,
                   notes: list[str] | None = None) -> list[JobSpec]:
    """The run's jobs; what the summary must say about them (jobs left out, types run as generic) is
    appended to ``notes``."""
    if spec.trace is not None:
        return read_trace(spec.trace, spec.format, model, seed=spec.seed, unprofiled=spec.unprofiled, notes=notes)
    return generate_workload(spec.jobs, spec.load, cluster, model, seed=spec.seed, gpu_mix=spec.gpu_mix)


def check_cluster(cluster: Cluster, model: ThroughputModel, field: str = "cluster") -> None:
    """Every GPU type of the cluster must be one the profile has data for: a typo ('a1000') would
    otherwise run at some default speed without a word."""
    for gpu_type in cluster.gpu_types:
        reason = model.gpu_problem(gpu_type)
        if reason is not None:
            raise InputError(reason, field=field)

