"""Each tenant queue's own ordering policy, behind the one policy the scheduler holds.

Queues that name no policy use the scheduler's; every distinct policy orders the rows of all the
queues that use it, in one call (the order within a queue is what matters: the queue step regroups
rows by queue and keeps each policy's relative order). Events, completions and summaries reach
every policy, so Tiresias' demotions and Gittins' learning work inside queues as they do alone.
Only policies that order jobs and nothing more (``SchedulingPolicy.orders_inside_queues``: no LP
over the cluster, no advice to the placement) may order a queue.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobTable
from tesserae.core.queues import QueueTree, RowQueues
from tesserae.scheduling.base import SchedulingPolicy, queue_policy_names


def check_queue_policy(name: str, where: str = "policy") -> None:
    names = queue_policy_names()
    if name not in names:
        raise InputError(f"policy '{name}' cannot order jobs inside tenant queues; choose one of: "
                         f"{', '.join(names)}", field=where)


class PerQueuePolicy(SchedulingPolicy):
    """Dispatches each row to its queue's policy; the scheduler's own policy is the first one.

    ``make`` builds the policy a queue names (with the run's options that policy declares).
    """

    def __init__(self, tree: QueueTree, default: SchedulingPolicy, make: Callable[[str], SchedulingPolicy]
                 ) -> None:
        check_queue_policy(default.name)
        self.name = default.name  # type: ignore[misc]  # the run is labelled by its main policy
        self.policies: list[SchedulingPolicy] = [default]
        names = [default.name]
        leaf_policy = np.zeros(tree.num_leaves, dtype=np.int64)
        for pos, node in enumerate(tree.leaves):
            want = next((tree.policy[a] for a in tree.ancestors[pos] if tree.policy[a] is not None), None)
            if want is None or want == default.name:
                continue
            check_queue_policy(want, f"queues.{tree.names[node]}.policy")
            if want not in names:
                names.append(want)
                self.policies.append(make(want))
            leaf_policy[pos] = names.index(want)
        self.leaf_policy = leaf_policy
        self.time_slicing = any(p.time_slicing for p in self.policies)  # type: ignore[misc]
        self.oracle = any(p.oracle for p in self.policies)  # type: ignore[misc]
        self.rows = RowQueues(tree)

    def _split(self, table: JobTable, rows: np.ndarray) -> list[np.ndarray]:
        leaf, _ = self.rows(table)
        which = self.leaf_policy[leaf[rows]]
        return [rows[which == k] for k in range(len(self.policies))]

    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        rows = np.asarray(active, dtype=np.int64)
        parts = [p.order(table, r, now) for p, r in zip(self.policies, self._split(table, rows), strict=True)]
        return np.concatenate(parts) if parts else rows

    def next_event(self, table: JobTable, active: np.ndarray, running: np.ndarray, now: float) -> float:
        act = self._split(table, np.asarray(active, dtype=np.int64))
        run = self._split(table, np.asarray(running, dtype=np.int64))
        return min((p.next_event(table, a, r, now) for p, a, r in zip(self.policies, act, run, strict=True)),
                   default=math.inf)

    def on_finish(self, table: JobTable, row: int, now: float) -> None:
        leaf, _ = self.rows(table)
        self.policies[int(self.leaf_policy[leaf[row]])].on_finish(table, row, now)

    def on_idle(self, now: float) -> bool:
        return any([p.on_idle(now) for p in self.policies])

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in reversed(self.policies):
            out.update(p.summary())
        out["queue_policies"] = sorted({p.name for p in self.policies})
        return out
