"""Builds the job list of a run: a trace file, or the embedded synthetic default workload."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobSpec
from tesserae.core.throughput import ThroughputModel
from tesserae.traces import generate_workload, read_trace
from tesserae.traces.synthetic import parse_gpu_mix


@dataclass(frozen=True)
class WorkloadSpec:
    trace: Path | None = None
    format: str = "canonical"
    jobs: int = 500
    load: float = 0.8
    gpu_mix: str = "gavel"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.trace is None:
            parse_gpu_mix(self.gpu_mix)  # a bad mix is refused here, before any run starts

    def describe(self) -> str:
        if self.trace is not None:
            return f"{self.trace} ({self.format})"
        return f"synthetic: {self.jobs} jobs, load {self.load}, {self.gpu_mix} GPU mix, seed {self.seed}"


def build_workload(spec: WorkloadSpec, cluster: Cluster, model: ThroughputModel) -> list[JobSpec]:
    if spec.trace is not None:
        return read_trace(spec.trace, spec.format, model, seed=spec.seed)
    return generate_workload(spec.jobs, spec.load, cluster, model, seed=spec.seed, gpu_mix=spec.gpu_mix)
