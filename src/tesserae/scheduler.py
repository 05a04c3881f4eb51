"""One scheduling decision: order -> allocate (gangs) -> pack -> place -> Plan.

The scheduler is deterministic: the same table state, time and previous plan give the same Plan.
It keeps no wall clock and no global state; the simulator and the runtime both call ``decide``.

Minimum run quantum: a running job whose ``hold_until`` (set by the driver when it (re)started the
job) lies in the future goes ahead of the policy's order, so it keeps its GPUs whatever its priority
(``Allocator.held_first``). The walk of the order, or of each tenant queue's rows
(``scheduler_queues``), is the allocator's (``tesserae.allocator``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tesserae.allocator import Allocator
from tesserae.core.advice import TYPE_ADVICE, Advice, AdviceKind, Ran, RanReport, describe, unmet_advice
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.fences import Fences
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.core.throughput import ThroughputModel
from tesserae.fencing import fenced_place
from tesserae.placement.base import PlacementPolicy, PlacerBase, Replayable, RoundPlacer, capable
from tesserae.scheduler_queues import QueueStep
from tesserae.scheduling.base import SchedulingPolicy


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    #: Stop at the first job in priority order that does not fit (YARN-CS) instead of skipping it.
    no_backfill: bool = False


class Scheduler:
    """Composes a scheduling policy (who runs) with a placement policy (where).

    The two meet through one typed contract (``tesserae.core.advice``): the policy's ``Advice``
    goes to the placement each decision, the placement's assignments come back to the policy as a
    ``RanReport`` at the next one, and a placement that cannot honour the policy's advice is
    refused here, when the scheduler is built.
    """

    def __init__(self, cluster: Cluster, policy: SchedulingPolicy, placement: PlacementPolicy,
                 model: ThroughputModel, config: SchedulerConfig | None = None,
                 queues: QueueStep | None = None) -> None:
        self.cluster, self.policy, self.placement, self.model = cluster, policy, placement, model
        self.config = config or SchedulerConfig()
        #: Tenant queues (DESIGN §8): budgets per queue and the walk inside them; None = one global queue.
        self.queues = queues
        #: The policy's order of the latest decision (rows): what a dashboard shows as the queue.
        self.last_order: np.ndarray = np.empty(0, dtype=np.int64)
        missing = unmet_advice(policy.advises, placement.honours, len(cluster.gpu_types))
        if missing != AdviceKind.NONE:
            raise InputError(f"placement '{placement.name}' cannot honour what policy '{policy.name}' advises "
                             f"({describe(missing)}); use a placement that does, e.g. "
                             f"{_suggest(missing)}", field="placement")
        policy.bind(cluster, model)
        # The previous decision's assignments and each one's executed seconds then: the report of
        # what ran, handed to the policy at the next decision.
        self._last_time = 0.0
        self._last: dict[int, Assignment] = {}
        self._last_exec: dict[int, float] = {}
        # The inputs and result of the last placement run (table, order, previous, assignments).
        self._last_placed: tuple[JobTable, np.ndarray, dict[int, Assignment], dict[int, Assignment]] | None = None
        #: Closed GPUs and pinned jobs (``core.fences``) for the next decisions; the driver sets them
        #: (the runtime: drained nodes, unhealthy GPUs, ``--node``). None: nothing fenced.
        self.fences: Fences | None = None

    def decide(self, now: float, table: JobTable, active: np.ndarray,
               previous: Mapping[int, Assignment]) -> Plan:
        """Who runs where until the next decision, for the ``active`` (submitted, unfinished) rows."""
        if self._last:
            self.policy.credit(self._ran(now, table))
        allocator = Allocator(table, previous, now, self.config.no_backfill)
        order = allocator.held_first(self.policy.order(table, active, now))
        self.last_order = order
        advice = self.policy.advice(order)
        fences = self.fences
        if fences is not None and fences.applies(active):  # a fenced decision is never replayed
            self._last_placed = None
            types = PlacerBase(self.cluster, table, previous, self.model, advice)
            assignments = fenced_place(self.cluster, table, order, advice, previous, fences, now,
                                       self.config.no_backfill,
                                       lambda part, alloc, o, a, prev: self._place(alloc, table, o, a, prev, part),
                                       types.runnable_types)
        else:
            # Tenant queues re-divide the cluster every decision (budgets move with time), so a decision
            # with queues is never replayed.
            assignments = self._unchanged(table, order, advice, previous) if self.queues is None else None
            if assignments is None:
                assignments = self._place(allocator, table, order, advice, previous)
        pairs = sorted([(r, p) for r, a in assignments.items() if (p := a.partner) is not None and r < p])
        if self.policy.credits_what_ran:
            self._remember(now, table, assignments)
        plan = Plan.diff(now, dict(previous), assignments, pairs)
        if self.queues is not None:
            self.queues.observe(now, table, active, order, plan.assignments, plan.stopped)
        return plan

    def _place(self, allocator: Allocator, table: JobTable, order: np.ndarray, advice: Advice,
               previous: Mapping[int, Assignment], cluster: Cluster | None = None) -> dict[int, Assignment]:
        """Allocate gangs in priority order (inside each tenant queue's budget), pack, lay out; on
        ``cluster``, a part of the scheduler's (a fenced decision), or the whole of it."""
        placer = self.placement.begin(cluster or self.cluster, table, previous, self.model, advice)
        if self.queues is not None and self.queues.enforce:
            walked = self.queues.walk(allocator, placer, order)
            if cluster is None:
                self.last_order = walked
        else:
            allocator.walk(placer, order)
        return self._finish(table, order, placer, advice, previous, replayable=cluster is None)

    def _finish(self, table: JobTable, order: np.ndarray, placer: RoundPlacer, advice: Advice,
                previous: Mapping[int, Assignment], *, replayable: bool = True) -> dict[int, Assignment]:
        # Packing pairs jobs that did not fit with admitted ones (the partners share their hosts' GPUs).
        placer.pack(advice.pack_candidates())
        assignments = placer.finish()
        if replayable and capable(self.placement, Replayable):
            self._last_placed = (table, order.copy(), dict(previous), assignments)
        return assignments

    def _unchanged(self, table: JobTable, order: np.ndarray, advice: Advice, previous: Mapping[int, Assignment]
                   ) -> dict[int, Assignment] | None:
        """The last decision's assignments when nothing the placement reads has changed since, else None.

        A ``Replayable`` placement is a function of the order, the advice, the previous
        assignments and the rows' job classes (fixed per row): with the same order, advice that is
        the order alone, and the same previous assignments as the last time it ran, it would
        compute the same assignments again. Its per-round statistics are repeated instead.
        """
        last = self._last_placed
        if (last is None or last[0] is not table or advice.kinds != AdviceKind.NONE or advice.overflow is not None
                or not np.array_equal(last[1], order) or last[2] != previous):
            return None
        self.placement.repeat_last_round()
        return last[3]

    def _remember(self, now: float, table: JobTable, assignments: Mapping[int, Assignment]) -> None:
        self._last_time = now
        self._last = dict(assignments)
        if assignments:
            rows = np.fromiter(assignments, dtype=np.int64, count=len(assignments))
            self._last_exec = dict(zip(rows.tolist(), table.executed[rows].tolist(), strict=True))
        else:
            self._last_exec = {}

    def _ran(self, now: float, table: JobTable) -> RanReport:
        """What the previous decision's assignments ran until ``now``, from the table's executed time."""
        gpu_type = self.cluster.gpu_type
        jobs: dict[int, Ran] = {}
        for r, a in self._last.items():
            seconds = float(table.executed[r]) - self._last_exec[r]
            jobs[r] = Ran(int(gpu_type[a.gpus[0]]), a.partner, a.strategy, seconds,
                          seconds * int(table.num_gpus[r]))
        return RanReport(self._last_time, now, jobs)

    def summary(self) -> dict[str, Any]:
        out = {**self.policy.summary(), **self.placement.summary()}
        if self.queues is not None:
            out.update(self.queues.summary())
        return out


def _suggest(missing: AdviceKind) -> str:
    if AdviceKind.PAIRS in missing:
        return "--placement gavel --packing or --placement tesserae --packing"
    if missing & TYPE_ADVICE:
        return "--placement gavel or --placement tesserae"
    return "another placement"
