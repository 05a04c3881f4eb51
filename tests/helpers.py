"""Small builders for tests: jobs with durations on the built-in model (1 iteration = 1 s)."""

from __future__ import annotations

from tesserae.core.jobs import JobSpec


def job(job_id: int, submit: float, gpus: int, duration: float, job_type: str = "resnet50") -> JobSpec:
    return JobSpec(job_id, float(submit), gpus, job_type, float(duration), float(duration))
