"""The last step of a Tesserae decision: from each job's GPUs and partner to its Assignment.

- ``kept_gpus``: which continuing jobs may keep their GPUs (those that stay on their GPU type; of
  two that shared GPUs last round and both run alone now, the first in priority).
- ``Assigner.write``: every host's Assignment from the layout's GPUs, and its partner's on (a
  subset of) the same GPUs, with the parallelism strategy each launches with: the best for its
  context (alone, or next to that partner), except that a running job keeps its strategy unless
  the new one is faster by more than the switch gain (a strategy change relaunches the job). A job
  on the GPUs, partner and strategy it had keeps its Assignment object (``Shortcuts.reuse_kept``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.placement._classes import class_index
from tesserae.placement._rates import RateBook


def kept_gpus(hosts: list[int], prev: Mapping[int, Assignment], type_of: Mapping[int, int], one_type: bool,
              gpu_type: np.ndarray) -> dict[int, tuple[int, ...]]:
    """The GPUs each continuing host keeps if its layout allows (see module docstring)."""
    keep: dict[int, tuple[int, ...]] = {}
    claimed: set[int] = set()
    host_set = set(hosts)
    for r in hosts:
        a = prev.get(r)
        if a is None or (not one_type and int(gpu_type[a.gpus[0]]) != type_of[r]):
            continue
        if a.partner is not None and a.partner in host_set:
            if a.partner in claimed:
                continue
            claimed.add(r)
        keep[r] = a.gpus
    return keep


class Assigner:
    """Writes one decision's Assignments (see module docstring)."""

    def __init__(self, cluster: Cluster, book: RateBook, switch_gain: float, reuse_kept: bool) -> None:
        self.cluster, self.book = cluster, book
        #: A running job changes strategy only if the new one is this much faster.
        self.switch_gain = switch_gain
        self.reuse_kept = reuse_kept

    def write(self, table: JobTable, hosts: list[int], sizes: list[int], gpus: Mapping[int, tuple[int, ...]],
              partner: Mapping[int, int], prev: Mapping[int, Assignment]) -> tuple[dict[int, Assignment], int]:
        """Every host's and partner's Assignment (hosts in order, each partner after its host), and
        how many continuing jobs are on other GPUs than before."""
        out: dict[int, Assignment] = {}
        types, num_gpus, type_idx = table.types, table.num_gpus, table.type_idx
        moved = 0
        # A job alone on the GPUs it held alone, with the strategy it has alone, keeps its Assignment
        # (``keep_or_assign``'s first case, checked here without a call: most jobs, each round).
        rows = np.asarray(hosts, dtype=np.int64)
        host_ti = type_idx[rows].astype(np.int64)
        reuse = self.reuse_kept
        host_alone = self.alone_strategies(table, rows) if reuse else [None] * len(hosts)
        for r, ti, k, s in zip(hosts, host_ti.tolist(), sizes, host_alone, strict=True):
            g = gpus[r]
            old = prev.get(r)
            if (reuse and old is not None and old.gpus is g and old.partner is None and old.strategy == s
                    and r not in partner):
                out[r] = old
                continue
            p = partner.get(r)
            cls = (types[ti], k)
            pc = None if p is None else (types[int(type_idx[p])], int(num_gpus[p]))
            out[r] = self.keep_or_assign(r, cls, g, p, pc, old)
            moved += old is not None and old.gpus != g
            if p is not None:
                kp = pc[1]  # type: ignore[index]
                old = prev.get(p)
                pg = g
                if kp < len(pg):
                    pg = old.gpus if old is not None and set(old.gpus) <= set(pg) and len(old.gpus) == kp \
                        else pg[:kp]
                out[p] = self.keep_or_assign(p, pc, pg, r, cls, old)
                moved += old is not None and old.gpus != pg
        return out, moved

    def alone_strategies(self, table: JobTable, rows: np.ndarray) -> list[str | None]:
        """The strategy of each row alone: one lookup per job class, spread to the rows by NumPy."""
        classes, of_class = class_index(table, rows)
        by_class = np.empty(len(classes), dtype=object)
        for i, c in enumerate(classes):
            by_class[i] = self.book.strategy(c.job_type, c.num_gpus, None)
        return by_class[of_class].tolist()

    def keep_or_assign(self, row: int, cls: tuple[str, int], gpus: tuple[int, ...], partner: int | None,
                       partner_cls: tuple[str, int] | None, old: Assignment | None) -> Assignment:
        """``assignment``, except that a job on the same GPUs with the same partner and strategy keeps
        its Assignment object without the strategy-switch check (``assignment`` would return it too)."""
        strategy = self.book.strategy(cls[0], cls[1], partner_cls)
        if (self.reuse_kept and old is not None and old.partner == partner and (old.gpus is gpus or old.gpus == gpus)
                and old.strategy == strategy):
            return old
        return self.assignment(row, gpus, partner, old, cls, partner_cls, strategy)

    def assignment(self, row: int, gpus: tuple[int, ...], partner: int | None, old: Assignment | None,
                   cls: tuple[str, int], pc: tuple[str, int] | None, strategy: str | None) -> Assignment:
        """The job's Assignment; ``strategy`` is the book's for (``cls`` next to ``pc``)."""
        jt, k = cls
        if (old is not None and old.strategy is not None and strategy is not None and old.strategy != strategy
                and old.gpus == gpus):
            # Changing strategy relaunches the job: keep the running one unless the new one pays.
            t = int(self.cluster.gpu_type[gpus[0]])
            ps = None if pc is None else self.book.strategy(pc[0], pc[1], (jt, k))
            keep = self.book.rate_with(jt, k, t, pc, old.strategy, ps)
            best = self.book.rate_with(jt, k, t, pc, strategy, ps)
            if keep > 0 and best <= keep * (1.0 + self.switch_gain):
                strategy = old.strategy
        if old is not None and old.gpus == gpus and old.partner == partner and old.strategy == strategy:
            return old
        return Assignment(row, gpus, partner, strategy)
