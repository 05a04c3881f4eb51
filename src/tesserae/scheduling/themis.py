"""Themis (NSDI 2020) finish-time fairness as an ordering: the job treated worst goes first.

For every runnable job, rho = T_shared / T_isolated, where

- T_isolated is the job's isolated JCT: its work at its reference rate (alone, consolidated, on
  the reference GPU type), from submission;
- T_shared is the JCT it is heading for: time in the system so far plus the remaining isolated time
  stretched by its current share, the fraction of its time in the system it has actually run
  (floored at the fair share of the cluster, G / GPUs demanded by all runnable jobs, so that a job
  that has not run yet gets a finite estimate).

Order: highest rho first (ties: earliest submit). The remaining time uses the job's true remaining
work, as ``srtf`` does: this is an oracle baseline (Themis estimates it from progress reports), and
reports label it so. Themis' auction and leases are not modelled: the round is the lease.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.throughput import ThroughputModel
from tesserae.scheduling.base import SchedulingPolicy, by_keys, register


def finish_time_fairness(table: JobTable, rows: np.ndarray, now: float, cluster_gpus: int | None) -> np.ndarray:
    """rho of each row (see module docstring)."""
    iso = table.work[rows] / table.ref_rate[rows]
    remaining = table.remaining_work(rows) / table.ref_rate[rows]
    age = np.maximum(now - table.submit[rows], 0.0)
    got = np.divide(table.executed[rows], age, out=np.zeros(rows.size), where=age > 0)
    demand = float(table.num_gpus[rows].sum())
    fair = min(1.0, cluster_gpus / demand) if cluster_gpus and demand > 0 else 1.0
    share = np.clip(np.maximum(got, fair), 1e-9, 1.0)
    return (age + remaining / share) / np.maximum(iso, 1e-9)


@register("themis")
class Themis(SchedulingPolicy):
    oracle = True
    time_slicing = True

    def __init__(self) -> None:
        self.cluster_gpus: int | None = None

    def bind(self, cluster: Cluster, model: ThroughputModel) -> None:
        """Scheduler hook: the fair share needs the cluster size."""
        self.cluster_gpus = cluster.num_gpus

    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        rho = finish_time_fairness(table, active, now, self.cluster_gpus)
        return by_keys(active, -rho, table.submit[active], table.job_id[active])

    def summary(self) -> dict[str, Any]:
        return {"oracle": True}
