"""The built-in throughput model for traces that carry only durations (DESIGN §5, point 3).

It is a MODEL, not a measurement, and every report says so. One iteration = one second of the
job on the reference GPU type (v100), consolidated and alone, whatever its GPU count: a trace
duration therefore converts to work one to one. Other GPU types run faster or slower by a
per-type factor; a job spread over several nodes slows by 1 / (1 + spread_coefficient * skew),
so communication-heavy (high-skew) models suffer most; two jobs sharing GPUs each run at
``share_factor`` of their alone speed, if their memory fits together. Restart costs come from the
built-in table of parameter counts (:mod:`tesserae.profiles.restart_model`), overridable per job
type (``checkpoint_bytes``) and for all (``startup_seconds``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tesserae.core.restart import RestartCost
from tesserae.core.throughput import JobProblem, ThroughputModel
from tesserae.profiles.families import model_family
from tesserae.profiles.restart_model import BLOX, COMMON, GAVEL, STARTUP_SECONDS, RestartSeconds, builtin_restart_cost

#: The parameter-count tables the built-in model reads restart costs from, first match wins.
SIZE_TABLES = (COMMON, GAVEL, BLOX)

#: A job type every model of this kind accepts: reference speed, no skew, no memory data.
GENERIC_JOB_TYPE = "generic"
#: Jobs sharing GPUs each run at this fraction of their alone speed (when no profile says otherwise).
DEFAULT_SHARE_FACTOR = 0.6
# Largest-tensor share of the parameters (Tiresias' skew), from the Tiresias paper's profiles.
TIRESIAS_SKEW: dict[str, float] = {
    "vgg19": 0.72, "vgg16": 0.74, "vgg11": 0.77, "alexnet": 0.61, "resnet50": 0.11,
    "resnet101": 0.075, "resnet152": 0.06, "inception3": 0.14, "inception4": 0.044,
}
# Rough training footprints (GB) at the batch sizes those profiles used; a model parameter.
DEFAULT_MEMORY_GB: dict[str, float] = {
    "vgg19": 11.0, "vgg16": 10.0, "vgg11": 8.0, "alexnet": 4.0, "resnet50": 9.0,
    "resnet101": 12.0, "resnet152": 14.0, "inception3": 10.0, "inception4": 13.0,
}
DEFAULT_GPU_SPEED: dict[str, float] = {
    "k80": 0.3, "p100": 0.6, "t4": 0.55, "v100": 1.0, "a10": 0.9, "a100": 2.0, "l40s": 2.2,
    "h100": 3.0, "h200": 3.3,
}
DEFAULT_GPU_MEMORY_GB: dict[str, float] = {
    "k80": 12.0, "p100": 16.0, "t4": 16.0, "v100": 32.0, "a10": 24.0, "a100": 80.0, "l40s": 48.0,
    "h100": 80.0, "h200": 141.0,
}


class DefaultModelConfig(BaseModel):
    """Every knob of the built-in model; load overrides from JSON with ``--profile FILE``."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field("default-model", pattern="^default-model$")
    reference_gpu_type: str = "v100"
    gpu_speed: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_GPU_SPEED))
    gpu_memory_gb: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_GPU_MEMORY_GB))
    skew: dict[str, float] = Field(default_factory=lambda: dict(TIRESIAS_SKEW))
    memory_gb: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_MEMORY_GB))
    spread_coefficient: float = Field(1.0, ge=0.0)
    share_factor: float = Field(DEFAULT_SHARE_FACTOR, gt=0.0, le=1.0)
    unknown_gpu_speed: float = Field(1.0, gt=0.0)
    #: Start-up seconds of every job type (restart cost = start-up + checkpoint bytes / storage bandwidth).
    startup_seconds: float = Field(STARTUP_SECONDS, ge=0.0, allow_inf_nan=False)
    #: Checkpoint bytes per job type, over the built-in table's.
    checkpoint_bytes: dict[str, Annotated[float, Field(ge=0.0, allow_inf_nan=False)]] = Field(default_factory=dict)


class DefaultModel(RestartSeconds, ThroughputModel):
    """Built-in model (see module docstring). Unknown job types run at reference speed, skew 0."""

    measured = False

    def __init__(self, config: DefaultModelConfig | None = None) -> None:
        self.config = config or DefaultModelConfig()
        self.name = "default-model"
        self.reference_gpu_type = self.config.reference_gpu_type

    def _speed(self, gpu_type: str) -> float:
        return self.config.gpu_speed.get(gpu_type, self.config.unknown_gpu_speed)

    def rate(self, job_type: str, num_gpus: int, gpu_type: str, consolidated: bool = True,
             partner: tuple[str, int] | None = None, strategy: str | None = None,
             partner_strategy: str | None = None) -> float:
        """The model has no parallelism strategies: ``strategy`` and ``partner_strategy`` are ignored."""
        r = self._speed(gpu_type) / self._speed(self.reference_gpu_type)
        if not consolidated:
            r /= 1.0 + self.config.spread_coefficient * (self.skew(job_type) or 0.0)
        if partner is not None:
            if not self.pair_fits(job_type, partner[0], gpu_type):
                return 0.0
            r *= self.config.share_factor
        return r

    def reference_rate(self, job_type: str, num_gpus: int) -> float:
        return 1.0

    def strategy_for(self, job_type: str, num_gpus: int, partner: tuple[str, int] | None = None) -> str | None:
        return None

    def skew(self, job_type: str) -> float | None:
        return self.config.skew.get(job_type)

    def memory_gb(self, job_type: str) -> float | None:
        return self.config.memory_gb.get(job_type)

    def pair_fits(self, a: str, b: str, gpu_type: str, num_gpus: int | None = None,
                  partner_num_gpus: int | None = None) -> bool:
        """Whether the two jobs' memory (the configured table, per job type) fits the GPU's; unknown: yes."""
        cap = self.config.gpu_memory_gb.get(gpu_type)
        ma, mb = self.memory_gb(a), self.memory_gb(b)
        if cap is None or ma is None or mb is None:
            return True
        return ma + mb <= cap

    def restart_cost(self, job_type: str) -> RestartCost | None:
        """The configured checkpoint bytes of the job type, else the built-in table's (a model either way)."""
        startup = self.config.startup_seconds
        size = self.config.checkpoint_bytes.get(job_type)
        if size is not None:
            return RestartCost(size, startup, measured=False, source="model: default-model configuration")
        return builtin_restart_cost(job_type, SIZE_TABLES, startup_seconds=startup)

    def job_types(self) -> list[str]:
        return sorted(self.config.skew)

    def known_job_types(self) -> list[str]:
        """Every job type the model has data for (a skew, a memory footprint or a parameter count), and
        ``generic``; a name is matched by its model family ('ResNet-50 (batch size 16)' is resnet50)."""
        c = self.config
        return sorted({*c.skew, *c.memory_gb, *c.checkpoint_bytes, *(k for t in SIZE_TABLES for k in t),
                       GENERIC_JOB_TYPE})

    def job_problem(self, job_type: str, num_gpus: int) -> JobProblem | None:
        """An unknown job type (a typo, or a model the built-in tables lack) would silently run at reference
        speed with no skew: refused, unless the run asks for that (``generic_ok``)."""
        known = self.known_job_types()
        if model_family(job_type) in {model_family(k) for k in known}:
            return None
        return JobProblem("job_type", f"unknown job type {job_type!r}: the built-in model knows "
                          f"{', '.join(known)} ('{GENERIC_JOB_TYPE}': reference speed, no skew); "
                          "--unprofiled-jobs generic runs unknown types as generic", generic_ok=True)

    def gpu_types(self) -> list[str]:
        return sorted(self.config.gpu_speed)

    def gpu_problem(self, gpu_type: str) -> str | None:
        if gpu_type in self.config.gpu_speed:
            return None
        return (f"GPU type {gpu_type!r} is not known to the built-in model (it knows {', '.join(self.gpu_types())}); "
                "a default-model profile (--profile FILE.json) can add it to gpu_speed")
