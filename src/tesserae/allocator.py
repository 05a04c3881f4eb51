"""The allocator of one decision: which gangs the placer is offered, in which order (DESIGN §3).

The policy orders the runnable jobs; the allocator walks that order and admits each gang that
fits what is left (skip and continue: smaller jobs behind may fit, as in Tiresias; or, without
backfill, stop at the first that does not). Two facts about the previous round shape every walk,
and are taken once per decision here:

- the rows that ran last round (a placer that keeps running jobs in place admits the leading run
  of them at once: ``keep_running_prefix``, for a ``BulkKeeper``);
- the rows *held*: running jobs inside their minimum run quantum (``hold_until`` in the future),
  which go ahead of the policy's order and keep their GPUs (``held_first``).

``Scheduler`` walks the whole order here (``walk``); with tenant queues, ``QueueStep`` walks each
queue's rows and calls the same prefix and masks. Both call down into this object; it calls
nothing above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

import numpy as np

from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.placement.base import BulkAdmitter, BulkKeeper, RoundPlacer, capable

#: Seconds by which a hold must outlast ``now`` to count (a hold ending now has ended).
HOLD_EPS = 1e-9
#: Rows of the order the walk converts to Python at a time.
_WALK_CHUNK = 256


class Allocator:
    """One decision's view of the previous round, and the walk of an order through a placer."""

    def __init__(self, table: JobTable, previous: Mapping[int, Assignment], now: float, no_backfill: bool) -> None:
        self.table, self.previous, self.now, self.no_backfill = table, previous, now, no_backfill
        #: Rows that ran last round.
        self.ran = np.fromiter(previous, dtype=np.int64, count=len(previous))
        #: Rows that ran last round and are inside their minimum run quantum.
        self.held = self.ran[table.hold_until[self.ran] > now + HOLD_EPS] if self.ran.size else self.ran

    # ------------------------------------------------------------------ masks over table rows
    @cached_property
    def _ran_mask(self) -> np.ndarray:
        mask = np.zeros(self.table.n, dtype=bool)
        mask[self.ran] = True
        return mask

    @cached_property
    def _held_mask(self) -> np.ndarray:
        mask = np.zeros(self.table.n, dtype=bool)
        mask[self.held] = True
        return mask

    def ran_last(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` ran last round."""
        return self._ran_mask[rows] if self.ran.size else np.zeros(rows.size, dtype=bool)

    def is_held(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` are held (running, inside their minimum run quantum)."""
        return self._held_mask[rows] if self.held.size else np.zeros(rows.size, dtype=bool)

    # ------------------------------------------------------------------ the order
    def held_first(self, order: np.ndarray) -> np.ndarray:
        """``order`` with the held jobs moved to the front.

        They keep their relative order; held jobs the policy left out (Gavel orders only whom it runs)
        follow them in the previous plan's order. They all ran last round, so their gangs fit.
        """
        held = self.held
        if held.size == 0:
            return order
        ordered = np.isin(order, held)
        left_out = held[~np.isin(held, order)]
        return np.concatenate([order[ordered], left_out, order[~ordered]])

    # ------------------------------------------------------------------ admission
    def keep_running_prefix(self, placer: RoundPlacer, order: np.ndarray) -> int:
        """Admit in bulk the leading run of ``order`` that ran last round, where the placer can.

        Until the first new job in priority order nothing can have taken a running job's GPUs, so a
        placer that keeps running jobs in place (``BulkKeeper``) admits that whole prefix exactly as
        one by one. Returns how many leading rows it admitted (0 for any other placer).
        """
        if self.ran.size == 0 or order.size == 0 or not capable(placer, BulkKeeper):
            return 0
        ran = self.ran_last(order)
        n = int(order.size if ran.all() else np.argmin(ran))
        return placer.keep_running(order[:n]) if n else 0

    def walk(self, placer: RoundPlacer, order: np.ndarray) -> None:
        """Admit each gang in ``order`` that fits (skip and continue, or stop: no backfill)."""
        gangs = self.table.num_gpus[order]
        no_backfill = self.no_backfill
        start = self.keep_running_prefix(placer, order)
        if not no_backfill and capable(placer, BulkAdmitter):
            placer.admit_in_order(order[start:])
            return
        # Smallest gang at or after each position: the walk ends once nothing behind can fit.
        suffix_min = np.minimum.accumulate(gangs[::-1])[::-1] if order.size else gangs
        # In chunks: the walk often stops early, and a long queue is not turned into a list each time.
        for lo in range(start, order.size, _WALK_CHUNK):
            hi = lo + _WALK_CHUNK
            for row, gang, least in zip(order[lo:hi].tolist(), gangs[lo:hi].tolist(), suffix_min[lo:hi].tolist(),
                                        strict=True):
                free = placer.free
                if least > free:
                    return
                if (gang > free or not placer.try_admit(row)) and no_backfill:
                    return
