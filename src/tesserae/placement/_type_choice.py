"""Which GPU type each admitted job runs on, on a cluster of several types.

Admission gives each job a type greedily (the advised one, or where it ran, or its fastest with
room). Once every job is admitted, one of two assignments revisits that choice:

- ``by_throughput`` (DESIGN §4.3, policies without type advice): the jobs of each class (job type,
  GPU count, type it ran on) are spread over type slots to maximise the sum of normalised
  throughput (``_hetero.assign_types``); a running job's throughput elsewhere counts at
  (1 - switch penalty), so it moves only when the gain pays for the restart. The greedy choice is
  kept when the solve does no better. Reports the chosen, type-blind and greedy throughputs.
- ``by_shares`` (DESIGN §4.4, policies with per-type shares realised over rounds, Gavel's X): the
  policy's units and each type's use are kept, and which unit runs where is chosen so that each
  unit's deficit against X stays within a band with as few type switches as possible
  (``_shares``). Reports how many units left the policy's type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from tesserae.core.advice import Advice, Unit
from tesserae.placement import _hetero, _shares
from tesserae.placement._admitted import AdmittedJobs


class RanClass(NamedTuple):
    """Jobs of one class that ran on one type last round (-1: did not run): interchangeable here."""

    job_type: str
    num_gpus: int
    ran_on: int


class ThroughputFigures(NamedTuple):
    """Normalised throughput summed over the admitted jobs: as chosen, type-blind, as admitted."""

    chosen: float
    blind: float
    greedy: float


#: ``_hetero.assign_types`` (sizes, counts, weight, allowed, capacity, class keys), memoised by the caller.
SolveTypes = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[RanClass]],
                      np.ndarray | None]


def type_capacity(jobs: AdmittedJobs) -> np.ndarray:
    """GPUs of each type of the cluster."""
    c = jobs.cluster
    return np.array([c.gpus_by_type[t] for t in c.gpu_types], dtype=np.int64)


def by_throughput(jobs: AdmittedJobs, switch_penalty: float, solve: SolveTypes) -> ThroughputFigures:
    """Re-assign every admitted job's type (``jobs.type_of``) by throughput (see module docstring)."""
    T = len(jobs.cluster.gpu_types)
    cap = type_capacity(jobs)
    book, type_of = jobs.book, jobs.type_of
    classes: dict[RanClass, list[int]] = {}
    for r in jobs.hosts:
        classes.setdefault(RanClass(*jobs.job_class(r), jobs.previous_type(r)), []).append(r)
    keys = list(classes)
    sizes = np.array([c.num_gpus for c in keys], dtype=np.int64)
    counts = np.array([len(classes[c]) for c in keys], dtype=np.int64)
    norm = np.array([book.normalized(c.job_type, c.num_gpus) for c in keys]).reshape(len(keys), T)
    stay = 1.0 - switch_penalty
    weight = norm.copy()
    for i, c in enumerate(keys):
        if c.ran_on >= 0:
            weight[i, np.arange(T) != c.ran_on] *= stay
    allowed = norm > 0
    current = np.zeros((len(keys), T), dtype=np.int64)
    for i, c in enumerate(keys):
        for r in classes[c]:
            current[i, type_of[r]] += 1
    x = solve(sizes, counts, weight, allowed, cap, keys)
    if x is None or (x * weight).sum() < (current * weight).sum() - 1e-9:
        x = current
    for i, c in enumerate(keys):
        cur = c.ran_on
        # The highest-priority jobs of the class get the best types; a running job stays on ties.
        order = sorted(range(T), key=lambda t, i=i, cur=cur: (-weight[i, t], t != cur, t))
        slots = [t for t in order for _ in range(int(x[i, t]))]
        for r, t in zip(classes[c], slots, strict=True):
            type_of[r] = t
    return ThroughputFigures(*_chosen_and_blind(jobs, cap), float((current * norm).sum()))


def _chosen_and_blind(jobs: AdmittedJobs, cap: np.ndarray) -> tuple[float, float]:
    """Normalised throughput of the chosen types, and of the type-blind reference: the same jobs, in
    priority order, each on the first type (cluster order) with room."""
    hosts, T = jobs.hosts, len(jobs.cluster.gpu_types)
    rows = np.asarray(hosts)
    hnorm = np.array([jobs.book.normalized(*jobs.job_class(r)) for r in hosts]).reshape(len(hosts), T)
    blind = _hetero.type_blind(jobs.table.num_gpus[rows], hnorm > 0, cap)
    blind_w = float(hnorm[np.flatnonzero(blind >= 0), blind[blind >= 0]].sum())
    chosen_w = float(sum(hnorm[i, jobs.type_of[r]] for i, r in enumerate(hosts)))
    return chosen_w, blind_w


def by_shares(jobs: AdmittedJobs, advice: Advice, pair_of: Mapping[int, int], round_seconds: float,
              tolerance_rounds: float, restart_overhead: float) -> tuple[int, int]:
    """Re-assign the admitted units' types (``jobs.type_of`` of each unit's host) to track the
    policy's per-type shares (see module docstring); returns (units moved off the advised type, units)."""
    book, T = jobs.book, len(jobs.cluster.gpu_types)
    host_set = set(jobs.hosts)
    units: list[tuple[int, Unit, tuple[int, ...]]] = []  # (host row, unit key, member rows)
    for h in jobs.hosts:
        o = pair_of.get(h)
        if o is not None and o not in host_set:
            units.append((h, (min(h, o), max(h, o)), (h, o)))
        else:
            units.append((h, h, (h,)))
    L = advice.round_seconds or round_seconds
    tol = tolerance_rounds * L
    m = len(units)
    deficit = np.zeros((m, T))
    shares = np.zeros((m, T))
    switched = np.zeros((m, T))
    allowed = np.zeros((m, T), dtype=bool)
    advised = np.empty(m, dtype=np.int64)
    sizes = np.empty(m, dtype=np.int64)
    for j, (h, key, members) in enumerate(units):
        advised[j] = jobs.type_of[h]
        sizes[j] = int(jobs.table.num_gpus[h])
        x = advice.shares.get(key)
        d = advice.deficit.get(key)
        if x is None or d is None:
            allowed[j, advised[j]] = True  # no allocation to track: the policy's type
            continue
        shares[j], deficit[j] = x / max(float(x.sum()), 1e-12), d
        if len(members) == 1:
            allowed[j] = book.alone(*jobs.job_class(h)) > 0
        else:
            (a, ka), (b, kb) = jobs.job_class(members[0]), jobs.job_class(members[1])
            allowed[j] = [book.pair(a, ka, b, kb, t)[0] > 0 for t in range(T)]
        allowed[j, advised[j]] = True
        for r in members:
            p = jobs.previous_type(r)
            if p >= 0:
                switched[j] += np.arange(T) != p
    w = _shares.share_weights(deficit, shares, L, tol, switched, restart_overhead, advised, allowed)
    chosen = _shares.assign_usage(w, sizes, advised)
    for j, (h, _, _) in enumerate(units):
        jobs.type_of[h] = int(chosen[j])
    return int((chosen != advised).sum()), len(units)
