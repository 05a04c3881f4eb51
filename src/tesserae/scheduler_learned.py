"""The scheduler over learned throughputs, or over none: what each job looks like to the core.

:class:`LearnedScheduler` is a :class:`~tesserae.scheduler.Scheduler` whose model is a
:class:`~tesserae.profiles.learned_classes.ClassModel` and which, before each decision, shows the
policy and the placement a *view* of the job table: the same rows and state arrays (shared, not
copied), but each job's type replaced by its class key (its learned, exploration-adjusted rates,
quantized) and its reference rate by its estimated speed. The estimator
(:class:`~tesserae.profiles.learned.RateEstimator`) is fed by whoever watches the jobs run (the
simulator's observer, or the runtime's progress reports); this class only reads it, once per
decision: refresh, present, classify. The view is one object for the whole run (policies keep
per-run state keyed by the table they are given), updated in place: its key list only grows, so a
type index never changes meaning; a decision after some job's key changed is never a replay of the
last one (``Scheduler._unchanged``).

:class:`GenericScheduler` is the no-information baseline: every job is the built-in model's
``generic`` job, whatever it really is.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.placement.base import PlacementPolicy
from tesserae.profiles.learned import GENERIC, MAX_TAGS, RateEstimator
from tesserae.profiles.learned_classes import ClassKeys, ClassModel, encode
from tesserae.scheduler import Scheduler, SchedulerConfig
from tesserae.scheduler_queues import QueueStep
from tesserae.scheduling.base import SchedulingPolicy


class LearnedScheduler(Scheduler):
    """Decides on learned, per-job rates shown as class keys (see module docstring)."""

    def __init__(self, cluster: Cluster, policy: SchedulingPolicy, placement: PlacementPolicy, model: ClassModel,
                 config: SchedulerConfig | None = None, queues: QueueStep | None = None, *,
                 estimator: RateEstimator) -> None:
        super().__init__(cluster, policy, placement, model, config, queues)
        self.estimator = estimator
        self.keys = ClassKeys(len(cluster.gpu_types), MAX_TAGS)
        self._key_index: dict[str, int] = {}
        self._key_names: list[str] = []
        self._reclassified = True
        self._view: JobTable | None = None
        self._base: JobTable | None = None
        self._slot_of_row = np.empty(0, dtype=np.int64)
        self._was_active = np.zeros(0, dtype=bool)
        #: Per row, a bit per GPU type whose presented rate carried an exploration bonus at the last decision,
        #: and above them one bit for its sharing terms.
        self.bonus_of_row = np.empty(0, dtype=np.int64)
        self.refresh_seconds: list[float] = []
        self.class_counts: list[int] = []
        ref = estimator.prior_model.reference_gpu_type
        self._ref = estimator.type_index.get(ref, 0)
        #: Called with the rows seen for the first time and their table, right after they are registered
        #: (the simulator's ``learned_alone = 'given'`` tells the estimator their alone rates there).
        self.on_register: Callable[[np.ndarray, JobTable], None] | None = None

    @classmethod
    def wrap(cls, inner: Scheduler, estimator: RateEstimator) -> LearnedScheduler:
        """The learned version of a scheduler built for a ClassModel (its policy, placement, queues)."""
        if not isinstance(inner.model, ClassModel):
            raise TypeError("a learned scheduler decides on a ClassModel")
        return cls(inner.cluster, inner.policy, inner.placement, inner.model, inner.config, inner.queues,
                   estimator=estimator)

    def decide(self, now: float, table: JobTable, active: np.ndarray, previous: Mapping[int, Assignment]) -> Plan:
        view = self.view(table, active)
        return super().decide(now, view, active, previous)

    # ------------------------------------------------------------------------------ the view
    def _bind(self, table: JobTable) -> None:
        """First sight of the table: per-row arrays, and the placeholder class of rows not yet active."""
        self._base = table
        self._slot_of_row = np.full(table.n, -1, dtype=np.int64)
        self._was_active = np.zeros(table.n, dtype=bool)
        self.bonus_of_row = np.zeros(table.n, dtype=np.int64)
        view = copy.copy(table)
        placeholder = self._key_id(encode([0] * len(self.cluster.gpu_types), 0, 0, 0))
        view.type_idx = np.full(table.n, placeholder, dtype=np.int64)
        view.types = self._key_names
        view.ref_rate = np.ones(table.n)
        self._view = view
        self._reclassified = True

    def follow(self, table: JobTable) -> JobTable | None:
        """The view of ``table`` after it was re-initialised in place (the runtime's table grows as jobs
        arrive, with new arrays each decision): the view takes its new arrays, and its per-row arrays grow
        with it (the rows it had keep their place, slot and class). None before the first decision."""
        view = self._view
        if view is None or self._base is not table:
            return None
        if view.job_id is table.job_id:
            return view
        own = {"type_idx": view.type_idx, "types": view.types, "ref_rate": view.ref_rate}
        view.__dict__.update(table.__dict__)
        old, n = own["type_idx"].size, table.n
        if n > old:
            extra = n - old
            placeholder = self._key_id(encode([0] * len(self.cluster.gpu_types), 0, 0, 0))
            own["type_idx"] = np.concatenate([own["type_idx"], np.full(extra, placeholder, dtype=np.int64)])
            own["ref_rate"] = np.concatenate([own["ref_rate"], np.ones(extra)])
            self._slot_of_row = np.concatenate([self._slot_of_row, np.full(extra, -1, dtype=np.int64)])
            self._was_active = np.concatenate([self._was_active, np.zeros(extra, dtype=bool)])
            self.bonus_of_row = np.concatenate([self.bonus_of_row, np.zeros(extra, dtype=np.int64)])
        view.__dict__.update(own)
        return view

    def _key_id(self, key: str) -> int:
        """The key's index in the view's type list (appended when new: ``_key_names`` is that list)."""
        i = self._key_index.get(key)
        if i is None:
            i = self._key_index[key] = len(self._key_names)
            self._key_names.append(key)
        return i

    def _unchanged(self, table: JobTable, order: np.ndarray, advice: Any, previous: Mapping[int, Assignment]
                   ) -> dict[int, Assignment] | None:
        if self._reclassified:
            return None
        return super()._unchanged(table, order, advice, previous)

    def _place(self, *args: Any, **kwargs: Any) -> dict[int, Assignment]:
        self._reclassified = False
        return super()._place(*args, **kwargs)

    def slots_of(self, rows: np.ndarray, table: JobTable) -> np.ndarray:
        """Estimator slots of ``rows``, registering the jobs seen for the first time."""
        est = self.estimator
        slots = self._slot_of_row[rows]
        new = rows[slots < 0]
        if new.size:
            types = table.types
            declared = [types[i] for i in table.type_idx[new].tolist()]
            self._slot_of_row[new] = est.register_many(table.job_id[new], table.num_gpus[new], declared)
            added = self._slot_of_row[new]
            self.keys.reset(added)
            if self.on_register is not None:
                self.on_register(new, table)
            slots = self._slot_of_row[rows]
        return slots

    def view(self, table: JobTable, active: np.ndarray) -> JobTable:
        """The table as the policy and placement see it now (see module docstring)."""
        t0 = time.process_time()
        if self._base is not table:
            self._bind(table)
        else:
            self.follow(table)
        assert self._view is not None
        est = self.estimator
        active = np.asarray(active, dtype=np.int64)
        now_active = np.zeros(table.n, dtype=bool)
        now_active[active] = True
        gone = np.flatnonzero(self._was_active & ~now_active)
        est.finish_many(table.job_id[gone[self._slot_of_row[gone] >= 0]])
        self._was_active = now_active
        slots = self.slots_of(active, table)
        est.finished[slots] = False  # a job back from a retry's backoff is active again
        est.attained[slots] = table.attained[active]
        if est.dirty:  # whoever fed the observations normally refreshed it already
            est.refresh()
        shown = est.presented(slots)
        changed = self.keys.update(slots, shown["x"], shown["runnable"], shown["a"], shown["b"], shown["spread"],
                                   shown["tags"])
        bits = (shown["bonus"].astype(np.int64) << np.arange(est.T, dtype=np.int64)).sum(axis=1)
        bits |= shown["pair_bonus"].astype(np.int64) << est.T
        self.bonus_of_row[active] = bits
        view = self._view
        if changed.any():
            rows, sl = active[changed], slots[changed]
            # Jobs whose estimates quantize alike share a key: one string per distinct key.
            distinct, inverse = distinct_rows(np.take(self.keys.q, sl, axis=0))
            ids = np.array([self._key_id(self.keys.key_of(q)) for q in distinct], dtype=np.int64)
            view.type_idx[rows] = ids[inverse]
            self._reclassified = True
        # Absolute speed (on the reference type, without bonus): in place, no placement reads it.
        view.ref_rate[active] = np.exp(np.clip(shown["mean"][:, self._ref], -700.0, 700.0))
        self.class_counts.append(int(np.count_nonzero(np.bincount(view.type_idx[active]))) if active.size else 0)
        self.refresh_seconds.append(time.process_time() - t0)  # CPU: benchmarks compare it on loaded machines
        return view

    @property
    def view_table(self) -> JobTable | None:
        """The table as the policy and placement saw it at the last decision (None before any)."""
        return self._view

    def row_bonus(self, row: int, gpu_type: int) -> bool:
        """Whether the row's rate on that GPU type carried an exploration bonus at the last decision."""
        return bool((int(self.bonus_of_row[row]) >> gpu_type) & 1)

    def row_pair_bonus(self, row: int) -> bool:
        """Whether the row's sharing terms carried an exploration bonus at the last decision."""
        return bool((int(self.bonus_of_row[row]) >> self.estimator.T) & 1)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        r = np.asarray(self.refresh_seconds)
        c = np.asarray(self.class_counts)
        out.update({"learned_refresh_seconds_mean": float(r.mean()) if r.size else 0.0,
                    "learned_classes_mean": float(c.mean()) if c.size else 0.0,
                    "learned_classes_max": int(c.max()) if c.size else 0,
                    "learned_keys_issued": len(self._key_names)})
        return out


class GenericScheduler(Scheduler):
    """Every job is the built-in model's ``generic`` job: the scheduler knows nothing of their rates."""

    def __init__(self, cluster: Cluster, policy: SchedulingPolicy, placement: PlacementPolicy, model: Any,
                 config: SchedulerConfig | None = None, queues: QueueStep | None = None) -> None:
        super().__init__(cluster, policy, placement, model, config, queues)
        self._base: JobTable | None = None
        self._view: JobTable | None = None

    @classmethod
    def wrap(cls, inner: Scheduler) -> GenericScheduler:
        return cls(inner.cluster, inner.policy, inner.placement, inner.model, inner.config, inner.queues)

    def decide(self, now: float, table: JobTable, active: np.ndarray, previous: Mapping[int, Assignment]) -> Plan:
        if self._base is not table:
            self._base = table
            view = copy.copy(table)
            view.types = [GENERIC]
            view.type_idx = np.zeros(table.n, dtype=np.int64)
            view.ref_rate = np.array([_positive(self.model.reference_rate(GENERIC, int(k))) for k in table.num_gpus])
            self._view = view
        assert self._view is not None
        return super().decide(now, self._view, active, previous)


def distinct_rows(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(q, axis=0, return_inverse=True)`` of a 2-D integer array (the same rows in the same,
    lexicographic order, and the same inverse), by a lexsort of its columns: np.unique sorts the rows
    as structured records, about 50 times slower on the view's few thousand re-keyed rows."""
    if q.shape[0] == 0:
        return q[:0], np.zeros(0, dtype=np.int64)
    order = np.lexsort(q.T[::-1])
    ranked = q[order]
    first = np.empty(order.size, dtype=bool)
    first[0] = True
    np.any(ranked[1:] != ranked[:-1], axis=1, out=first[1:])
    inverse = np.empty(order.size, dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return ranked[first], inverse


def _positive(x: float) -> float:
    return x if math.isfinite(x) and x > 0 else 1.0
