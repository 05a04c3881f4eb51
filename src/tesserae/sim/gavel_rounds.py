"""Gavel's rounds in the simulator (only the Gavel baselines use them): each running job runs one
micro-task of floor(rate x (round - overhead)) iterations (Gavel's ``int(throughput *
time_per_iteration)``), or what it has left, and then waits for the round to end. Both members of a
pair keep their paired rate for the whole micro-task, and a pair's micro-task (its jobs' completion
time too) ends when its slower member's does, as in Gavel."""

from __future__ import annotations

import numpy as np


def micro_tasks(rows: np.ndarray, partner: np.ndarray, rate: np.ndarray, remaining: np.ndarray,
                overhead: np.ndarray, round_seconds: float) -> tuple[np.ndarray, ...]:
    """One round's micro-tasks of the running ``rows`` (``partner``: each row's partner, -1 alone):
    (iterations run, restart overhead paid, seconds each job computes, seconds until its unit's
    micro-task ends)."""
    paid = np.minimum(overhead, round_seconds)
    budget = round_seconds - paid
    full = rate * budget
    steps = np.where(full >= 1.0, np.floor(full), full)
    steps = np.minimum(steps, remaining)
    dur = paid + steps / rate
    unit_end = dur.copy()
    pos = {int(r): i for i, r in enumerate(rows.tolist())}
    for i, p in enumerate(partner.tolist()):
        if p >= 0 and p in pos:
            unit_end[i] = max(dur[i], dur[pos[p]])
    return steps, paid, dur, unit_end
