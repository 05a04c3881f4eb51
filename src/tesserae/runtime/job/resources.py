"""Resource requests beyond a GPU count: a GPU type, CPUs and memory per job.

- **GPU type** (``gpu_type``): the job runs only on GPUs of that type. The scheduler honours it
  through the placement (``PlacerBase.runnable_types``); a placement that chooses types by
  throughput (``tesserae``, ``gavel``) refuses such a job at submission.
- **CPUs and memory** (``cpus``, ``memory_mb``): the job is told (``TESSERAE_CPUS``,
  ``TESSERAE_MEMORY_MB``, and ``OMP_NUM_THREADS`` unless it sets its own), and its run's cgroup
  gets ``cpu.max`` and ``memory.max`` where the server may set them (the cgroup's ``cpu`` and
  ``memory`` controllers enabled for the server's subtree). Elsewhere they are accounted only: the
  requests are stored, shown and summed (``tesserae usage``: CPU-hours), but not enforced, and the
  scheduler does not place jobs by CPUs or memory.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Largest requests: 4096 cores, 64 TiB.
MAX_CPUS = 4096.0
MAX_MEMORY_MB = 64 * 1024 * 1024
#: The CFS period the CPU quota is written with (microseconds).
CPU_PERIOD_US = 100_000
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)
_MIB = {"": 1.0, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024}


def parse_memory(text: str) -> int:
    """MiB from ``512M``, ``16G``, ``1.5GiB``, ``2T`` or a bare number of MiB."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"'{text}' is not a memory size: use 512M, 16G or 1.5G")
    mib = math.ceil(float(m.group(1)) * _MIB[m.group(2).lower()])
    if not 1 <= mib <= MAX_MEMORY_MB:
        raise ValueError(f"'{text}': a job's memory is 1 MiB to {MAX_MEMORY_MB // (1024 * 1024)} TiB")
    return mib


def env_for(job: Mapping[str, Any]) -> dict[str, str]:
    """The variables that tell a job its CPU and memory requests (a stored job row)."""
    keys = job.keys()
    env: dict[str, str] = {}
    cpus = job["cpus"] if "cpus" in keys else None
    if cpus is not None:
        env["TESSERAE_CPUS"] = f"{float(cpus):g}"
        env["OMP_NUM_THREADS"] = str(max(1, math.floor(float(cpus))))
    if "memory_mb" in keys and job["memory_mb"] is not None:
        env["TESSERAE_MEMORY_MB"] = str(int(job["memory_mb"]))
    return env


def limit_cgroup(cgroup: str | Path, cpus: float | None, memory_mb: int | None) -> list[str]:
    """Write ``cpu.max`` / ``memory.max`` of a run's cgroup; the requests it could not enforce (a
    controller not enabled there), by name."""
    path = Path(cgroup)
    missed = []
    for name, wanted, value in (("cpus", cpus, None if cpus is None else
                                 f"{max(1000, round(float(cpus) * CPU_PERIOD_US))} {CPU_PERIOD_US}"),
                                ("memory", memory_mb, None if memory_mb is None else str(int(memory_mb) << 20))):
        if wanted is None:
            continue
        target = path / ("cpu.max" if name == "cpus" else "memory.max")
        try:  # the file exists only where the controller is enabled: never created here
            fd = os.open(target, os.O_WRONLY | os.O_NOFOLLOW)
        except OSError:
            missed.append(name)
            continue
        try:
            os.write(fd, (value or "").encode())
        except OSError:
            missed.append(name)
        finally:
            os.close(fd)
    return missed
