"""Restart costs in the simulator: what each job's (re)start costs, how the run reports them, and the
check that refuses a time-slicing policy whose jobs would restart round after round without progress.

A cost is either fixed (``SimConfig.restart_overhead``, or per job type) or the throughput model's
restart cost of the job type: start-up plus checkpoint bytes over the storage bandwidth
(:mod:`tesserae.core.restart`).

A policy that preempts running jobs by priority, with restart costs at or above the round length,
can restart a job every round before it makes progress. The simulator warns when any job's cost
reaches the round length and refuses to run such a policy then (:class:`InputError`) unless a
minimum run quantum is set (a (re)started job is kept running until it has run ``min_run_quantum``
times its restart cost after paying it: ``charge``) or ``allow_thrashing`` says to run it anyway.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.core.throughput import ThroughputModel
from tesserae.scheduling.base import SchedulingPolicy
from tesserae.sim.interface import SimConfig


def per_row(t: JobTable, cfg: SimConfig, model: ThroughputModel) -> np.ndarray:
    """Seconds each row's (re)start costs; 0 for rejected rows, which never start."""
    live = t.status != JobStatus.REJECTED
    if cfg.restart_cost == "fixed":
        by_type = cfg.overhead_by_type
        cost = np.array([by_type.get(t.job_type(r), cfg.restart_overhead) for r in range(t.n)]) \
            if by_type else np.full(t.n, cfg.restart_overhead)
        return np.where(live, cost, 0.0)
    cost = np.zeros(t.n)
    seconds: dict[tuple[int, int], float] = {}
    for r in np.flatnonzero(live).tolist():
        key = (int(t.type_idx[r]), int(t.num_gpus[r]))
        if key not in seconds:
            seconds[key] = model.restart_seconds(t.types[key[0]], key[1], cfg.storage_gbps)
        cost[r] = seconds[key]
    return cost


def summary(t: JobTable, cfg: SimConfig, model: ThroughputModel, overhead: np.ndarray) -> dict[str, Any]:
    """Which restart cost this run charges, its range, and whether it was measured or modelled."""
    live = np.flatnonzero(t.status != JobStatus.REJECTED)
    costs = overhead[live]
    out: dict[str, Any] = {
        "restart_cost": cfg.restart_cost,
        "restart_seconds_mean": float(costs.mean()) if costs.size else None,
        "restart_seconds_max": float(costs.max()) if costs.size else None,
        "min_run_quantum": cfg.min_run_quantum,
    }
    if cfg.restart_cost == "fixed":
        return {**out, "restart_cost_kind": "fixed (configured)"}
    types = sorted({t.job_type(r) for r in live.tolist()})
    cost_of = {jt: model.restart_cost(jt) for jt in types}
    measured = [jt for jt in types if (c := cost_of[jt]) is not None and c.measured]
    modelled = [jt for jt in types if jt not in measured]
    if not modelled:
        kind = "measured"
    elif not measured:
        kind = "model (not a measurement)"
    else:
        kind = f"mixed: measured for {len(measured)} job type(s), model (not a measurement) for {len(modelled)}"
    by_type = {jt: float(c.seconds(cfg.storage_gbps)) for jt, c in cost_of.items() if c is not None}
    return {**out, "restart_cost_kind": kind, "storage_gbps": cfg.storage_gbps,
            "restart_seconds_by_type": by_type}


def thrashing(t: JobTable, cfg: SimConfig, overhead: np.ndarray, policy: SchedulingPolicy) -> str | None:
    """The warning when a restart cost reaches the round length (None: none does); a time-slicing
    policy is refused then (InputError) unless a run quantum is set or thrashing is allowed."""
    R = cfg.round_seconds
    live = t.status != JobStatus.REJECTED
    reach = np.flatnonzero(live & (overhead >= R))
    if reach.size == 0:
        return None
    types = sorted({t.job_type(r) for r in reach.tolist()})
    shown = ", ".join(types[:5]) + (f" and {len(types) - 5} more" if len(types) > 5 else "")
    message = (f"{reach.size} of {int(live.sum())} jobs have a restart cost at or above the round length "
               f"({R:g} s; up to {float(overhead[reach].max()):g} s, job types {shown})")
    if policy.time_slicing and cfg.min_run_quantum <= 0 and not cfg.allow_thrashing:
        raise InputError(f"{message}: '{policy.name}' preempts running jobs by priority and would restart "
                         "them round after round without progress; set --min-run-quantum K (a restarted job "
                         "runs K times its restart cost before it may be preempted), a longer "
                         "--round-seconds, or --allow-thrashing to run it anyway")
    return message + ("; time-slicing policies can thrash at such costs" if cfg.min_run_quantum <= 0 else "")


def charge(t: JobTable, row: int, now: float, overhead: np.ndarray, min_run_quantum: float) -> None:
    """A (re)start of ``row`` at ``now`` (start, resume, migration, strategy change): its restart
    cost, and the minimum run quantum that protects it from preemption until it has paid off."""
    t.overhead_left[row] = overhead[row]
    if min_run_quantum > 0:
        t.hold_until[row] = now + overhead[row] * (1.0 + min_run_quantum)
