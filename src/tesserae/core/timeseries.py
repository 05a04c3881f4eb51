"""Step series of a cluster over time (GPUs in use, jobs waiting), shared by the simulator's report
and the live server's cluster chart, and their thinning to a drawable number of points."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

#: Most points a drawn series keeps.
MAX_POINTS = 1500
#: Kinds of interval ``busy_and_waiting`` counts: a job alive (submitted, not finished), a job's run, a GPU held.
ALIVE, RUN, GPU = 0, 1, 2


def peak_sample(t: np.ndarray, columns: dict[str, np.ndarray], points: int = MAX_POINTS
                ) -> tuple[np.ndarray, dict[str, np.ndarray], bool]:
    """Beyond ``points`` samples, the maximum of each column in each of ``points`` equal time slices
    (so peaks survive), at each slice's start; else the series unchanged. Also whether it thinned."""
    if t.size <= points:
        return t, columns, False
    edges = np.linspace(t[0], t[-1], points + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
    keep = np.unique(b)
    out = {}
    for name, v in columns.items():
        peak = np.full(points, -np.inf)
        np.maximum.at(peak, b, v)
        out[name] = peak[keep]
    return edges[keep], out, True


def busy_and_waiting(runs: Iterable[tuple[int, float, float, list[int]]],
                     jobs: Iterable[tuple[int, float, float]], start: float, end: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPUs in use and jobs waiting over ``[start, end]`` as a step series (times, gpus, waiting).

    ``runs`` are ``(job, begin, stop, gpus)``; ``jobs`` are ``(job, submit, finish)`` (``inf`` while
    active). A GPU is in use while any run holds it (two packed jobs count it once); a job waits
    while it is submitted, not finished and holds no run (before its first start and after each
    preemption). Ties resolve ends before starts, in a fixed order, so the series is the same on
    every machine.
    """
    events: list[tuple[float, int, int, int]] = []  # (time, 0 an end / 1 a start, kind, job or GPU)
    for job, begin, stop, gpus in runs:
        b, s = max(begin, start), min(stop, end)
        if s <= b:
            continue
        events += [(b, 1, RUN, job), (s, 0, RUN, job)]
        for g in gpus:
            events += [(b, 1, GPU, g), (s, 0, GPU, g)]
    for job, submit, finish in jobs:
        b, s = max(submit, start), min(finish, end)
        if s > b:
            events += [(b, 1, ALIVE, job), (s, 0, ALIVE, job)]
    events = sorted(e for e in events if e[0] < end)  # what ends at the window's end shows no change
    counts: tuple[dict[int, int], dict[int, int], dict[int, int]] = ({}, {}, {})  # by kind: key -> open intervals
    alive, running, holders = counts
    waits = 0
    times, busy, waiting = [start], [0], [0]
    for time, starts, kind, key in events:
        if kind != GPU:
            was = key in alive and key not in running
        table = counts[kind]
        n = table.get(key, 0) + (1 if starts else -1)
        if n:
            table[key] = n
        else:
            table.pop(key, None)
        if kind != GPU:
            waits += (key in alive and key not in running) - was
        if time == times[-1]:
            busy[-1], waiting[-1] = len(holders), waits
        else:
            times.append(time)
            busy.append(len(holders))
            waiting.append(waits)
    if times[-1] < end:
        times.append(end)
        busy.append(busy[-1])
        waiting.append(waiting[-1])
    return np.asarray(times, dtype=float), np.asarray(busy, dtype=float), np.asarray(waiting, dtype=float)
