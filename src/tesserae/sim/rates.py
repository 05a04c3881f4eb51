"""How fast a job runs where it is placed, in the simulator: its class's rate from the model for
the placement (GPU type, consolidated or spread over nodes, alone or next to a partner, the
parallelism strategies both were launched with), times the job's own factor. Lookups are cached
per job class and placement shape; a placement the model gives no rate stalls the job when the
scheduler decides on other rates than the truth's, and is a bug otherwise."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import runnable
from tesserae.sim.interface import STALL_RATE


class PlacementRates:
    """The rates of one run's jobs (``model`` is the truth they progress at)."""

    def __init__(self, table: JobTable, cluster: Cluster, model: ThroughputModel, *, hidden: bool) -> None:
        self.table, self.cluster, self.model = table, cluster, model
        #: The scheduler decides on other rates than these: a placement without a rate stalls the job.
        self.hidden = hidden
        #: Each job's factor on its class's rates (jobs of one type differ).
        self.factor = np.ones(table.n)
        #: Runs placed where the truth gives no rate (only when it is hidden from the scheduler).
        self.stalled_runs = 0
        self._rate_cache: dict[tuple[Any, ...], float] = {}
        # The strategy each running job was launched with (the plan's, else the model's choice) matters
        # only when some job of the run has strategies in the profile.
        self._strategy_cache: dict[tuple[Any, ...], str | None] = {}
        t = table
        classes = set(zip(t.type_idx.tolist(), t.num_gpus.tolist(), strict=True))
        self.strategies = any(model.strategy_for(t.types[ti], k) is not None for ti, k in classes)
        self._gpu_node: list[int] = cluster.gpu_node.tolist()
        self._type_node_size = {ti: int(cluster.node_num_gpus[cluster.node_type == ti].max())
                                for ti in range(len(cluster.gpu_types))}

    def strategy_of(self, a: Assignment) -> str | None:
        """The strategy the job runs with: the plan's, else the one the model assumes for its context."""
        if a.strategy is not None:
            return a.strategy
        t = self.table
        partner = None if a.partner is None else (int(t.type_idx[a.partner]), int(t.num_gpus[a.partner]))
        key = (int(t.type_idx[a.row]), int(t.num_gpus[a.row]), partner)
        if key not in self._strategy_cache:
            p = None if partner is None else (t.types[partner[0]], partner[1])
            self._strategy_cache[key] = self.model.strategy_for(t.types[key[0]], key[1], p)
        return self._strategy_cache[key]

    def class_rate(self, a: Assignment, strategy: str | None = None, partner_strategy: str | None = None) -> float:
        t, c = self.table, self.cluster
        k = len(a.gpus)
        ti = int(c.gpu_type[a.gpus[0]])
        node_of = self._gpu_node
        nodes = len({node_of[g] for g in a.gpus})
        consolidated = nodes <= math.ceil(k / self._type_node_size[ti])
        partner = None if a.partner is None else (int(t.type_idx[a.partner]), int(t.num_gpus[a.partner]))
        key = (int(t.type_idx[a.row]), k, ti, consolidated, partner, strategy, partner_strategy)
        rate = self._rate_cache.get(key)
        if rate is None:
            p = None if partner is None else (t.types[partner[0]], partner[1])
            rate = self.model.rate(t.types[key[0]], k, c.gpu_types[ti], consolidated, p, strategy, partner_strategy)
            if not rate > 0:
                if not self.hidden:
                    raise RuntimeError(f"placement gave job {t.job_id[a.row]} a placement with rate {rate}")
                rate = 0.0
            self._rate_cache[key] = rate
        return rate

    def job_rate(self, a: Assignment, strategy: str | None = None, partner_strategy: str | None = None) -> float:
        """The job's own rate on ``a``: its class's true rate times its factor (a stall where that is 0)."""
        rate = self.class_rate(a, strategy, partner_strategy) * self.factor[a.row]
        if rate > 0:
            return float(rate)
        self.stalled_runs += 1
        return STALL_RATE


def never_progress(t: JobTable, cluster: Cluster, model: ThroughputModel) -> np.ndarray:
    """The rows no GPU type of ``cluster`` gives a rate (larger than the cluster: not looked at)."""
    out = np.zeros(t.n, dtype=bool)
    for ti, k in set(zip(t.type_idx.tolist(), t.num_gpus.tolist(), strict=True)):
        if k <= cluster.num_gpus and not any(runnable(model, t.types[ti], k, g) for g in cluster.gpu_types):
            out |= (t.type_idx == ti) & (t.num_gpus == k)
    return out
