"""The throughput-model interface: how fast a job type runs on a given placement."""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

from tesserae.core.restart import DEFAULT_STORAGE_GBPS, RestartCost


class JobProblem(NamedTuple):
    """Why a model cannot simulate a job: the field at fault (``job_type`` or ``num_gpus``), the reason,
    and whether the model could still run it as a job of reference speed (``--unprofiled-jobs generic``)."""

    field: str
    reason: str
    generic_ok: bool = False


@runtime_checkable
class ThroughputModel(Protocol):
    """Answers rate(job type, GPU count, GPU type, consolidated?, partner?) in iterations/second.

    ``partner`` is the (job type, GPU count) of the job sharing the same GPUs, or None when alone.
    A rate of 0.0 for a pair means the two cannot share (out of memory, or no data for the pair).
    ``strategy`` is the parallelism strategy the job was launched with and ``partner_strategy`` the
    partner's (a pipeline-parallel job's layer split changes its own speed and its partner's); None
    means the model's own choice for that context, :meth:`strategy_for`. Models without strategies
    ignore both.

    A model subclasses this protocol explicitly to inherit its defaults (``pair_fits``).
    """

    name: str
    measured: bool  # False for built-in models: reports label them "model, not measurement"
    reference_gpu_type: str

    def rate(self, job_type: str, num_gpus: int, gpu_type: str, consolidated: bool = True,
             partner: tuple[str, int] | None = None, strategy: str | None = None,
             partner_strategy: str | None = None) -> float: ...

    def strategy_for(self, job_type: str, num_gpus: int, partner: tuple[str, int] | None = None) -> str | None:
        """The strategy ``rate`` assumes when given none (alone or next to ``partner``); None if none."""
        ...

    def reference_rate(self, job_type: str, num_gpus: int) -> float:
        """Consolidated, alone, on the reference GPU type: converts trace durations into work."""
        ...

    def skew(self, job_type: str) -> float | None:
        """Largest tensor / all parameters (Tiresias); None when unknown."""
        ...

    def restart_cost(self, job_type: str) -> RestartCost | None:
        """Checkpoint bytes and start-up seconds of the job type (measured or modelled); None if unknown."""
        ...

    def restart_seconds(self, job_type: str, num_gpus: int, storage_gbps: float = DEFAULT_STORAGE_GBPS) -> float:
        """What starting, resuming, moving or re-launching the job costs (s); InputError if unknown."""
        ...

    def pair_fits(self, a: str, b: str, gpu_type: str, num_gpus: int | None = None,
                  partner_num_gpus: int | None = None) -> bool:
        """Whether jobs of types ``a`` and ``b`` (with these GPU counts, where given) fit in the memory of
        ``gpu_type`` together. The default, for a model without memory data: nothing against it (its
        pair rates still decide whether they can share)."""
        return True

    def job_types(self) -> list[str]: ...

    def gpu_types(self) -> list[str]: ...

    def job_problem(self, job_type: str, num_gpus: int) -> JobProblem | None:
        """Why this model cannot simulate a job of this type on this many GPUs (None: it can). The
        default, for a model that answers every lookup: nothing against it."""
        return None

    def gpu_problem(self, gpu_type: str) -> str | None:
        """Why this model cannot run jobs on ``gpu_type`` (None: it can): a type it has no data for."""
        types = self.gpu_types()
        if gpu_type in types:
            return None
        return f"GPU type {gpu_type!r} is not in profile {self.name} (it has {', '.join(types)})"
