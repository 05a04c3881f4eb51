"""The embedded default workload: a synthetic trace with the distributions of the literature.

Arrivals are Poisson; the rate is set so that the *offered load* (GPU-seconds demanded per second
of arrivals, over the cluster's GPUs) is ``load`` in expectation:
``lambda = load * cluster.num_gpus / E[num_gpus * duration]``, with ``E[num_gpus * duration] =
E[num_gpus] * E[duration]`` (drawn independently) computed in closed form, not from the sample.
GPU counts follow Gavel's (1/2/4/8 GPUs with p 0.7/0.1/0.15/0.05) or Blox's (0.6/0.3/0.09/0.01)
mix, or a custom one written ``1:0.7,2:0.3`` (GPU count: probability), capped at the cluster's GPU
count so that every job can run. Durations are Philly-like
(Gavel, Blox): 60 * 10^U(1.5, 3) s with probability 0.8, else 60 * 10^U(3, 4) s. Job types are
uniform over the model's job types (sorted), and work = duration x the model's reference rate.

Everything is drawn from ``numpy.random.default_rng(seed)`` in a fixed order (gaps, GPU counts,
long/short choice, exponents, types), so one seed gives one workload, the same on every CPU (no
BLAS, no SIMD-dependent NumPy function on the way).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.throughput import ThroughputModel
from tesserae.traces._fields import RateCache, model_types

GPU_MIXES: dict[str, dict[int, float]] = {
    "gavel": {1: 0.7, 2: 0.1, 4: 0.15, 8: 0.05},
    "blox": {1: 0.6, 2: 0.3, 4: 0.09, 8: 0.01},
}

# Philly-like durations: (probability, low exponent, high exponent) of 60 * 10^U(low, high) seconds.
DURATION_MODELS: dict[str, tuple[tuple[float, float, float], ...]] = {
    "philly": ((0.8, 1.5, 3.0), (0.2, 3.0, 4.0)),
}
DURATION_SCALE = 60.0


MIX_HELP = "gavel, blox, or GPU-count:probability pairs such as 1:0.7,2:0.3"


def parse_gpu_mix(text: str) -> dict[int, float]:
    """A named mix (``gavel``, ``blox``) or a custom one, ``1:0.7,2:0.3``; errors name the bad entry."""
    name = text.strip()
    if name in GPU_MIXES:
        return dict(GPU_MIXES[name])
    if ":" not in name:
        raise InputError(f"unknown GPU mix '{text}'; expected {MIX_HELP}", field="gpu-mix")
    mix: dict[int, float] = {}
    for entry in name.split(","):
        count_text, sep, prob_text = entry.strip().partition(":")
        try:
            count = int(count_text)
        except ValueError:
            count = 0
        if count < 1:
            raise InputError(f"entry '{entry.strip()}': '{count_text.strip()}' is not a GPU count (an integer >= 1); "
                             f"expected {MIX_HELP}", field="gpu-mix")
        try:
            prob = float(prob_text) if sep else math.nan
        except ValueError:
            prob = math.nan
        if not (math.isfinite(prob) and 0 < prob <= 1):
            raise InputError(f"entry '{entry.strip()}': '{prob_text.strip()}' is not a probability in (0, 1]; "
                             f"expected {MIX_HELP}", field="gpu-mix")
        if count in mix:
            raise InputError(f"entry '{entry.strip()}': GPU count {count} appears twice", field="gpu-mix")
        mix[count] = prob
    total = sum(mix.values())
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise InputError(f"the probabilities of '{text}' sum to {total:g}, not 1", field="gpu-mix")
    return mix


def gpu_mix_distribution(mix: str | Mapping[int, float], cluster_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """(GPU counts capped at the cluster size, probabilities) of a named or explicit mix."""
    if isinstance(mix, str):
        mix = parse_gpu_mix(mix)
    counts = np.array(list(mix.keys()), dtype=np.int64)
    probs = np.array(list(mix.values()), dtype=np.float64)
    if len(counts) == 0 or (counts < 1).any() or not np.isfinite(probs).all() or (probs < 0).any() \
            or not math.isclose(probs.sum(), 1.0, abs_tol=1e-9):
        raise InputError("a GPU mix maps GPU counts >= 1 to probabilities summing to 1", field="gpu-mix")
    return np.minimum(counts, cluster_gpus), probs / probs.sum()


def expected_duration(duration: str = "philly") -> float:
    """Mean of the duration model, from E[10^U(a, b)] = (10^b - 10^a) / ((b - a) ln 10)."""
    parts = _duration_model(duration)
    return DURATION_SCALE * sum(p * (10**b - 10**a) / ((b - a) * math.log(10)) for p, a, b in parts)


def _duration_model(name: str) -> tuple[tuple[float, float, float], ...]:
    if name not in DURATION_MODELS:
        raise InputError(f"unknown duration model '{name}'; valid: {', '.join(DURATION_MODELS)}",
                         field="duration")
    return DURATION_MODELS[name]


def arrival_rate(load: float, cluster: Cluster, mix: str | Mapping[int, float] = "gavel",
                 duration: str = "philly") -> float:
    """Jobs per second that offer ``load`` to ``cluster`` in expectation."""
    counts, probs = gpu_mix_distribution(mix, cluster.num_gpus)
    # Summed by NumPy's add.reduce in a fixed order, not `counts @ probs` (BLAS: its order depends on the CPU).
    mean_gpu_seconds = float(np.add.reduce(counts * probs)) * expected_duration(duration)
    return load * cluster.num_gpus / mean_gpu_seconds


def _has_data(model: ThroughputModel, job_type: str, gpus: int, cluster: Cluster) -> bool:
    """Whether the profile has a positive rate for this job on some GPU type of the cluster."""
    for gpu_type in (model.reference_gpu_type, *cluster.gpu_types):
        try:
            if model.rate(job_type, gpus, gpu_type, True) <= 0:
                return False
        except InputError:
            return False
    return True


def _runnable_types(type_idx: np.ndarray, num_gpus: np.ndarray, types: list[str], cluster: Cluster,
                    model: ThroughputModel, u: np.ndarray) -> np.ndarray:
    """Redraw (uniformly, from ``u``) the types a measured profile has no data for at a job's GPU count.

    The built-in model runs every type at every count, so the first draw stands unchanged; with a
    measured profile (Gavel's has no 2-GPU k80 data for some models, say) a job only gets a type
    that the profile measured for its GPU count on the reference type and every type of the cluster.
    """
    out = type_idx.copy()
    for g in np.unique(num_gpus).tolist():
        ok = [i for i, t in enumerate(types) if _has_data(model, t, int(g), cluster)]
        if len(ok) == len(types):
            continue
        if not ok:
            raise InputError(f"the profile '{model.name}' has no job type measured on {g} GPUs of every GPU type "
                             f"of the cluster ({', '.join(cluster.gpu_types)}); "
                             f"{_measured_counts_hint(model, types, cluster)}", field="gpu-mix")
        sel = num_gpus == g
        bad = sel & ~np.isin(type_idx, ok)
        out[bad] = np.asarray(ok)[(u[bad] * len(ok)).astype(np.int64)]
    return out


def _measured_counts_hint(model: ThroughputModel, types: list[str], cluster: Cluster) -> str:
    """What to do instead: the GPU counts (powers of two up to the cluster's size) that the profile has."""
    sizes = [1 << k for k in range(cluster.num_gpus.bit_length()) if 1 << k <= cluster.num_gpus]
    counts = [g for g in sizes if any(_has_data(model, t, g, cluster) for t in types)]
    if not counts:
        return "the profile measured none of 1, 2, 4, ... GPUs there: simulate on a cluster of its GPU type"
    mix = ",".join(f"{g}:{p:g}" for g, p in zip(counts, _even_split(len(counts)), strict=True))
    return (f"it measured jobs on {', '.join(map(str, counts))} GPU(s): generate only those, e.g. with --gpu-mix "
            f"{mix}, or profile more GPU counts (tesserae profile --gpus 1,2,...)")


def _even_split(n: int) -> list[float]:
    """n probabilities with 2 decimals that sum to exactly 1."""
    cents = [100 // n + (1 if k < 100 % n else 0) for k in range(n)]
    return [c / 100 for c in cents]


def generate_workload(num_jobs: int, load: float, cluster: Cluster, model: ThroughputModel, seed: int,
                      gpu_mix: str | Mapping[int, float] = "gavel",
                      duration: str = "philly") -> list[JobSpec]:
    """``num_jobs`` synthetic jobs (ids 0..n-1, first arrival at 0) offering ``load`` to ``cluster``."""
    if isinstance(num_jobs, bool) or not isinstance(num_jobs, int | np.integer) or num_jobs < 0:
        raise InputError(f"number of jobs must be a non-negative integer, got {num_jobs!r}", field="jobs")
    if not (isinstance(load, int | float) and math.isfinite(load) and load > 0):
        raise InputError(f"load must be a positive number, got {load!r}", field="load")
    counts, probs = gpu_mix_distribution(gpu_mix, cluster.num_gpus)
    parts = _duration_model(duration)
    types = model_types(model)
    n = int(num_jobs)
    if n == 0:
        return []
    lam = arrival_rate(load, cluster, gpu_mix, duration)

    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / lam, size=n - 1)
    submit = np.concatenate(([0.0], np.cumsum(gaps)))
    num_gpus = rng.choice(counts, size=n, p=probs)
    part_p = np.array([p for p, _, _ in parts])
    part = rng.choice(len(parts), size=n, p=part_p / part_p.sum())
    lo = np.array([a for _, a, _ in parts])[part]
    hi = np.array([b for _, _, b in parts])[part]
    # The C library's pow, one value at a time: NumPy's vectorised power differs in the last bit by
    # SIMD level (AVX-512 or not), and the workload must not depend on the CPU that generates it.
    durations = DURATION_SCALE * np.array([10.0 ** u for u in rng.uniform(lo, hi).tolist()], dtype=np.float64)
    type_idx = rng.integers(len(types), size=n)
    type_idx = _runnable_types(type_idx, num_gpus, types, cluster, model, rng.random(n))

    rate = RateCache(model)
    return [
        JobSpec(job_id=i, submit_time=s, num_gpus=g, job_type=types[t], work=d * rate(types[t], g),
                duration=d, name=str(i))
        for i, (s, g, d, t) in enumerate(zip(submit.tolist(), num_gpus.tolist(), durations.tolist(),
                                             type_idx.tolist(), strict=True))
    ]

