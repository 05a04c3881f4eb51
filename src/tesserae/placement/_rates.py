"""Rates per job *class* (job type, GPU count), cached across rounds.

Every figure packing and type choice need depends on job types and GPU counts only, never on job
identities: a class-level cache makes each of them one dict lookup however many jobs are active.
Placement sees profiles only through the ``ThroughputModel`` protocol (``strategy_for`` gives the
parallelism strategy a rate assumes; ``pair_fits``, whether two jobs fit in GPU memory together:
the built-in model checks its memory table, a measured table answers from its pair rates, and
the protocol's default has nothing against it).

With ``fixed_strategy`` every job keeps its best strategy alone, also next to a partner: pair rates
are the ones measured for that strategy (the ablation of the strategy choice).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tesserae.core.errors import InputError
from tesserae.core.throughput import ThroughputModel

ClassKey = tuple[str, int]

#: What a model raises for a job type, GPU count or GPU type it does not know: that placement cannot
#: run. Anything else (a model missing a method, say) is a defect and is not taken for "cannot run":
#: a catch-all here once hid a learned model without ``pair_fits`` (no learned run ever packed).
_UNKNOWN = (LookupError, ValueError, InputError)


class RateBook:
    """Cached alone and pair rates of job classes on the GPU types of one cluster."""

    def __init__(self, model: ThroughputModel, gpu_types: tuple[str, ...], fixed_strategy: bool = False) -> None:
        self.model = model
        self.gpu_types = gpu_types
        self.fixed_strategy = fixed_strategy
        self.num_types = len(gpu_types)
        #: Mixed GPU-count pairs (a large job and a smaller one on part of its GPUs) only where a
        #: measured profile has a positive pair rate for them; the built-in model is not a measurement.
        self.mixed_counts = bool(model.measured)
        self._with: dict[tuple[Any, ...], float] = {}
        self._alone: dict[ClassKey, np.ndarray] = {}
        self._prefs: dict[ClassKey, tuple[int, ...]] = {}
        self._norm: dict[ClassKey, np.ndarray] = {}
        self._pair: dict[tuple[str, int, str, int, int], tuple[float, float]] = {}
        self._strategy: dict[tuple[Any, ...], str | None] = {}

    # ------------------------------------------------------------------------------------ alone
    def _rate(self, job_type: str, n: int, gpu_type: str, partner: tuple[str, int] | None = None,
              strategy: str | None = None, partner_strategy: str | None = None) -> float:
        try:
            r = float(self.model.rate(job_type, n, gpu_type, True, partner, strategy, partner_strategy))
        except _UNKNOWN:  # unknown job type / count / GPU type in a table: it cannot run there
            return 0.0
        return r if math.isfinite(r) and r > 0.0 else 0.0

    def alone(self, job_type: str, n: int) -> np.ndarray:
        """Consolidated alone rate on each GPU type of the cluster (0.0 = cannot run there)."""
        key = (job_type, n)
        r = self._alone.get(key)
        if r is None:
            r = np.array([self._rate(job_type, n, g) for g in self.gpu_types])
            self._alone[key] = r
        return r

    def normalized(self, job_type: str, n: int) -> np.ndarray:
        """Rate on each type over the rate on the slowest type it can run on (0 where it cannot)."""
        key = (job_type, n)
        w = self._norm.get(key)
        if w is None:
            r = self.alone(job_type, n)
            pos = r[r > 0]
            w = r / pos.min() if pos.size else np.zeros_like(r)
            self._norm[key] = w
        return w

    def prefs(self, job_type: str, n: int) -> tuple[int, ...]:
        """GPU types the job can run on, fastest (highest normalized throughput) first."""
        key = (job_type, n)
        p = self._prefs.get(key)
        if p is None:
            r = self.alone(job_type, n)
            ok = np.flatnonzero(r > 0)
            p = tuple(int(t) for t in ok[np.argsort(-r[ok], kind="stable")])
            self._prefs[key] = p
        return p

    # ------------------------------------------------------------------------------------ pairs
    def can_pair_counts(self, n: int, partner_n: int) -> bool:
        return n == partner_n or (self.mixed_counts and partner_n < n)

    def pair(self, a: str, na: int, b: str, nb: int, t: int) -> tuple[float, float]:
        """(rate of a next to b, rate of b next to a) on GPU type ``t``; (0, 0) when they cannot share.

        They cannot share when either rate is 0 (the profile's out-of-memory mark, or no data), when
        the profile's memory check says they do not fit, or when the GPU counts are incompatible.
        """
        key = (a, na, b, nb, t)
        v = self._pair.get(key)
        if v is None:
            v = (0.0, 0.0)
            if self.can_pair_counts(na, nb) or self.can_pair_counts(nb, na):
                g = self.gpu_types[t]
                sa = self.strategy(a, na, None) if self.fixed_strategy else None
                sb = self.strategy(b, nb, None) if self.fixed_strategy else None
                ra = self._rate(a, na, g, (b, nb), sa, sb)
                rb = self._rate(b, nb, g, (a, na), sb, sa)
                if ra > 0 and rb > 0 and self._fits(a, na, b, nb, g):
                    v = (ra, rb)
            self._pair[key] = v
        return v

    def gain(self, a: str, na: int, b: str, nb: int, t: int) -> float:
        """tput(a|b)/tput(a) + tput(b|a)/tput(b) - 1 on GPU type ``t`` (-inf when they cannot share)."""
        ra, rb = self.pair(a, na, b, nb, t)
        if ra <= 0.0:
            return -math.inf
        sa, sb = self.alone(a, na)[t], self.alone(b, nb)[t]
        if sa <= 0 or sb <= 0:
            return -math.inf
        return ra / sa + rb / sb - 1.0

    def _fits(self, a: str, na: int, b: str, nb: int, gpu_type: str) -> bool:
        try:
            return bool(self.model.pair_fits(a, b, gpu_type, na, nb))
        except _UNKNOWN:  # a table that does not know the job types: they cannot share
            return False

    # ------------------------------------------------------------------------------- strategies
    def strategy(self, job_type: str, n: int, partner: tuple[str, int] | None) -> str | None:
        """The strategy to launch the job with: the best for its context (alone, or next to
        ``partner``), or its best alone with ``fixed_strategy``; None when the profile has none."""
        if self.fixed_strategy:
            partner = None
        key = (job_type, n, partner)
        if key not in self._strategy:
            try:
                self._strategy[key] = self.model.strategy_for(job_type, n, partner)
            except _UNKNOWN:
                self._strategy[key] = None
        return self._strategy[key]

    def rate_with(self, job_type: str, n: int, t: int, partner: tuple[str, int] | None, strategy: str | None,
                  partner_strategy: str | None) -> float:
        """Consolidated rate on type ``t`` with the given strategies (0.0 where it cannot run so)."""
        key = (job_type, n, t, partner, strategy, partner_strategy)
        r = self._with.get(key)
        if r is None:
            r = self._with[key] = self._rate(job_type, n, self.gpu_types[t], partner, strategy, partner_strategy)
        return r
