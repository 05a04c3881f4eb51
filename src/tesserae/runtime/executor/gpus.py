"""This machine's GPUs: from NVML (``nvidia-ml-py``, imported lazily) or declared virtual GPUs.

The local executor turns them into a ``Cluster`` (one node per GPU type: a machine rarely has
more than one) whose global GPU ids map back to CUDA device indices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tesserae.core.cluster import DEFAULT_GPU_TYPE, Cluster, Node
from tesserae.core.errors import InputError

# Longest names first: 'a100' before 'a10', 'h200' before 'h20'.
_KNOWN_TYPES = ("gh200", "h200", "h100", "h800", "a100", "a800", "l40s", "l40", "l4", "a10g", "a10", "a30",
                "a40", "v100", "p100", "t4", "k80")
NO_NVML_HINT = ("on a machine without NVIDIA GPUs, start the server with --virtual-gpus N "
                "(processes then get fake GPU ids)")


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU: ``device`` is what goes into CUDA_VISIBLE_DEVICES for it."""

    device: str
    gpu_type: str
    name: str
    memory_gb: float | None = None
    virtual: bool = False


def gpu_type_of(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; unknown names -> a lowercase slug of the name."""
    low = name.lower().replace("-", " ")
    for t in _KNOWN_TYPES:
        if re.search(rf"(?<![a-z0-9]){t}(?![a-z0-9])", low):
            return t
    slug = re.sub(r"[^a-z0-9]+", "-", low.removeprefix("nvidia ")).strip("-")
    return slug or "gpu"


def virtual_gpus(count: int, gpu_type: str = DEFAULT_GPU_TYPE) -> list[Gpu]:
    """``count`` virtual GPUs of ``gpu_type``, or of several types: ``v100:2,k80:2`` (counts adding up to
    ``count``)."""
    if count < 1:
        raise InputError("--virtual-gpus must be at least 1", field="virtual-gpus")
    if ":" not in gpu_type:
        return [Gpu(str(i), gpu_type.lower(), f"virtual {gpu_type}", None, True) for i in range(count)]
    types: list[str] = []
    for part in gpu_type.split(","):
        name, _, n = part.strip().partition(":")
        if not name or not n.isdigit() or int(n) < 1:
            raise InputError(f"'{part.strip()}' is not TYPE:COUNT (e.g. v100:2,k80:2)", field="gpu-type")
        types += [name.lower()] * int(n)
    if len(types) != count:
        raise InputError(f"the counts of '{gpu_type}' add up to {len(types)}, not --virtual-gpus {count}",
                         field="gpu-type")
    return [Gpu(str(i), t, f"virtual {t}", None, True) for i, t in enumerate(types)]


def nvml_gpus() -> list[Gpu]:
    """The GPUs NVML sees, or an InputError that says to use --virtual-gpus."""
    try:
        import pynvml  # provided by the nvidia-ml-py package
    except ImportError:
        raise InputError("NVML is not available: the nvidia-ml-py package is not installed "
                         f"(pip install nvidia-ml-py, the 'gpu' extra of tesserae); {NO_NVML_HINT}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise InputError(f"NVML could not start ({e}; is an NVIDIA driver installed?); {NO_NVML_HINT}") from None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            out.append(Gpu(str(i), gpu_type_of(name), name, round(mem, 1)))
    except pynvml.NVMLError as e:
        raise InputError(f"NVML failed while listing GPUs ({e}); {NO_NVML_HINT}") from None
    finally:
        pynvml.nvmlShutdown()
    if not out:
        raise InputError(f"NVML found no GPUs; {NO_NVML_HINT}")
    return out


def discover(virtual: int | None, virtual_type: str = DEFAULT_GPU_TYPE) -> list[Gpu]:
    return virtual_gpus(virtual, virtual_type) if virtual is not None else nvml_gpus()


def machine_cluster(gpus: list[Gpu]) -> tuple[Cluster, list[Gpu]]:
    """A one-machine Cluster (a node per GPU type) and the GPUs in global-id order."""
    by_type: dict[str, list[Gpu]] = {}
    for g in gpus:
        by_type.setdefault(g.gpu_type, []).append(g)
    nodes, ordered = [], []
    for i, (t, group) in enumerate(by_type.items()):
        nodes.append(Node(i, t, len(group), 0, len(ordered)))
        ordered.extend(group)
    return Cluster(nodes), ordered
