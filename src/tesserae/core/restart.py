"""What starting, resuming or moving a job costs (DESIGN §2 "Overheads", §5).

A job that (re)starts launches its processes (start-up: interpreter, framework, CUDA context,
model build) and reads its checkpoint (model weights and optimizer state) from shared storage;
it holds its GPUs meanwhile and makes no progress. So the cost is

    restart seconds = start-up seconds + checkpoint bytes / storage bandwidth,

the same for a first start, a resume after preemption, a migration and a strategy change. It does
not depend on the GPU count: each data-parallel replica reads the checkpoint at the storage
bandwidth, in parallel with the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Storage bandwidth a (re)starting job reads its checkpoint at, gigabits per second: a 10 GbE
#: link to shared storage (1.25 GB/s). A modelling default, set per run with ``--storage-gbps``.
DEFAULT_STORAGE_GBPS = 10.0


@dataclass(frozen=True, slots=True)
class RestartCost:
    """Restart data of one job type: measured by ``tesserae profile`` or from the built-in model.

    ``save_seconds`` and ``restore_seconds`` are what the profiler measured writing and reading
    the checkpoint on its own machine (provenance; the cost uses the storage bandwidth instead);
    ``parameters`` is the model's parameter count where known.
    """

    checkpoint_bytes: float
    startup_seconds: float
    measured: bool
    source: str = ""
    save_seconds: float | None = None
    restore_seconds: float | None = None
    parameters: int | None = None

    def __post_init__(self) -> None:
        for name in ("checkpoint_bytes", "startup_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    def seconds(self, storage_gbps: float = DEFAULT_STORAGE_GBPS) -> float:
        """Start-up plus reading the checkpoint at ``storage_gbps`` gigabits per second."""
        return self.startup_seconds + transfer_seconds(self.checkpoint_bytes, storage_gbps)


def transfer_seconds(num_bytes: float, storage_gbps: float) -> float:
    """Seconds to move ``num_bytes`` at ``storage_gbps`` gigabits (10^9 bits) per second."""
    if not (math.isfinite(storage_gbps) and storage_gbps > 0):
        raise ValueError(f"storage bandwidth must be a positive number of Gbit/s, got {storage_gbps!r}")
    return num_bytes * 8.0 / (storage_gbps * 1e9)
