"""How the scheduler sees learned rates: jobs grouped into classes, each a self-describing key.

The scheduler core and the placements key everything by job type (``ThroughputModel.rate(job
type, ...)``) and cache by it, across rounds: rates per class, pair gains per pair of classes,
type assignments per set of classes (``placement/_rates.py``, ``placement/_packing.py``, Gavel's
per-class rates). Learned rates are per job, so in learned mode each job is shown to the scheduler
under a *class key* that encodes its presented estimates, quantized:

    ~<q_1>,...,<q_T>/<a>,<b>,<s>[|<tag>.<tag>...]

``q_t`` is the log-rate on GPU type t relative to the job's best type, in steps of ``rate_step``
(``x``: it cannot run there); ``a`` the log pair factor it suffers next to anyone (the pair mean
included) and ``b`` the pressure it puts on a partner, in steps of ``pair_step``; ``s`` its log
spread factor in steps of ``spread_step``; the tags name pairs the estimator vetoed (measured slower
than the two jobs alone: Gandiva's introspection) on one GPU type (tag mod the number of types), and
two classes with a common tag cannot share GPUs of that type. Jobs with near-equal estimates share a key, so the
class-level solvers stay as small as with a profile; and since a key *is* its rates,
:class:`ClassModel` answers for any key ever issued without state, and every cache keyed by job
type stays valid for the whole run. Rates are relative (1.0 on the job's best type): every
placement decision depends on ratios only (normalised throughput, pair gains, Gavel's normalised
LP); a job's absolute speed is shown separately (the view's ``ref_rate``).

:class:`ClassKeys` quantizes with hysteresis: a job's key changes only when an estimate moves
``hysteresis`` of a step past the edge of its current bucket, so noisy estimates do not
reshuffle classes (and invalidate the scheduler's replay of an unchanged round) every round.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from tesserae.core.restart import RestartCost
from tesserae.profiles.restart_model import RestartSeconds

PREFIX = "~"
#: Quantization steps (log units): rates and pair terms to about 10%, the spread factor to a factor 1.65
#: (it only tells Tiresias' placement whether a job must be consolidated).
RATE_STEP, PAIR_STEP, SPREAD_STEP = 0.1, 0.1, 0.5
HYSTERESIS = 0.25
#: Stands for "cannot run on this GPU type" in the quantized rates.
UNRUNNABLE = -(1 << 30)
#: Bounds of the quantized values (keys stay short; estimates are bounded far inside them anyway).
Q_MIN, Q_MAX = -200, 200


class Decoded(NamedTuple):
    rates: np.ndarray  # relative rate per GPU type (0: cannot run there)
    a: float  # log pair factor suffered (pair mean included)
    b: float  # log pressure on a partner
    spread: float  # spread factor (<= 1)
    tags: frozenset[int]  # vetoed pairs it is in


def encode(q: np.ndarray | list[int], qa: int, qb: int, qs: int, tags: np.ndarray | list[int] = ()) -> str:
    rates = ",".join("x" if int(v) == UNRUNNABLE else str(int(v)) for v in q)
    named = sorted(int(t) for t in tags if int(t) >= 0)
    suffix = "|" + ".".join(map(str, named)) if named else ""
    return f"{PREFIX}{rates}/{int(qa)},{int(qb)},{int(qs)}{suffix}"


class ClassModel(RestartSeconds):
    """A ThroughputModel whose job types are class keys (see module docstring). Stateless: one
    instance serves a whole run, and it answers for every key the same way forever."""

    measured = False

    def __init__(self, gpu_types: tuple[str, ...], reference_gpu_type: str | None = None, pair_floor: float = 0.02,
                 rate_step: float = RATE_STEP, pair_step: float = PAIR_STEP, spread_step: float = SPREAD_STEP) -> None:
        self.name = "learned"
        self._gpu_types = tuple(gpu_types)
        self._index = {g: i for i, g in enumerate(self._gpu_types)}
        self.reference_gpu_type = reference_gpu_type if reference_gpu_type in self._index else self._gpu_types[0]
        self.pair_floor = pair_floor
        self.steps = (rate_step, pair_step, spread_step)
        self.decode = lru_cache(maxsize=65536)(self._decode)

    def _decode(self, key: str) -> Decoded:
        if not key.startswith(PREFIX):
            raise KeyError(f"{key!r} is not a learned class key")
        body, _, tag_text = key[len(PREFIX):].partition("|")
        rates_text, _, rest = body.partition("/")
        parts = rates_text.split(",")
        if len(parts) != len(self._gpu_types):
            raise KeyError(f"{key!r} does not have {len(self._gpu_types)} GPU types")
        rs, ps, ss = self.steps
        rates = np.array([0.0 if p == "x" else math.exp(rs * int(p)) for p in parts])
        qa, qb, qs = (int(v) for v in rest.split(","))
        tags = frozenset(int(v) for v in tag_text.split(".")) if tag_text else frozenset()
        return Decoded(rates, ps * qa, ps * qb, math.exp(min(ss * qs, 0.0)), tags)

    def rate(self, job_type: str, num_gpus: int, gpu_type: str, consolidated: bool = True,
             partner: tuple[str, int] | None = None, strategy: str | None = None,
             partner_strategy: str | None = None) -> float:
        """The class's relative rate; next to a partner class, times exp(a + b_partner) (within [floor, 1])."""
        t = self._index.get(gpu_type)
        if t is None:
            return 0.0
        c = self.decode(job_type)
        r = float(c.rates[t])
        if r <= 0.0:
            return 0.0
        if not consolidated:
            r *= c.spread
        if partner is not None:
            p = self.decode(partner[0])
            if p.rates[t] <= 0.0 or (c.tags and not c.tags.isdisjoint(p.tags)
                                     and any(x % len(self._gpu_types) == t for x in c.tags & p.tags)):
                return 0.0
            r *= min(1.0, max(self.pair_floor, math.exp(c.a + p.b)))
        return r

    def pair_fits(self, a: str, b: str, gpu_type: str, num_gpus: int | None = None,
                  partner_num_gpus: int | None = None) -> bool:
        """Memory is not modelled: a pair that does not fit is learned by running it (a stall, then a
        veto), so the pair rates (0 when vetoed or not runnable) decide alone. Without this method the
        placement took every pair of classes as not fitting and never packed on learned rates."""
        return True

    def strategy_for(self, job_type: str, num_gpus: int, partner: tuple[str, int] | None = None) -> str | None:
        return None  # strategies are not learned: each job runs with its own default

    def reference_rate(self, job_type: str, num_gpus: int) -> float:
        return self.rate(job_type, num_gpus, self.reference_gpu_type)

    def skew(self, job_type: str) -> float | None:
        """Tiresias' skew as the built-in model relates it to the spread slowdown: 1 / spread - 1."""
        return 1.0 / self.decode(job_type).spread - 1.0

    def restart_cost(self, job_type: str) -> RestartCost | None:
        return None  # restart costs are charged by the simulator or measured by the runtime, not learned

    def job_types(self) -> list[str]:
        return []

    def gpu_types(self) -> list[str]:
        return list(self._gpu_types)


class ClassKeys:
    """Per estimator slot, the quantized estimates behind its current key (hysteresis, see module docstring)."""

    def __init__(self, num_types: int, max_tags: int = 4, rate_step: float = RATE_STEP, pair_step: float = PAIR_STEP,
                 spread_step: float = SPREAD_STEP, hysteresis: float = HYSTERESIS) -> None:
        self.T = num_types
        self.max_tags = max_tags
        self.steps = np.array([rate_step] * num_types + [pair_step, pair_step, spread_step])
        self.hysteresis = hysteresis
        self.width = num_types + 3 + max_tags
        self.q = np.zeros((0, self.width), dtype=np.int64)
        self.set = np.zeros(0, dtype=bool)

    def _ensure(self, cap: int) -> None:
        if cap > self.q.shape[0]:
            grow = max(cap, 2 * self.q.shape[0], 64)
            q = np.zeros((grow, self.width), dtype=np.int64)
            q[: self.q.shape[0]] = self.q
            s = np.zeros(grow, dtype=bool)
            s[: self.set.size] = self.set
            self.q, self.set = q, s

    def reset(self, slots: np.ndarray) -> None:
        """Slots reused by other jobs start without a key."""
        self._ensure(int(slots.max()) + 1 if slots.size else 0)
        self.set[slots] = False

    def update(self, slots: np.ndarray, x: np.ndarray, runnable: np.ndarray, a: np.ndarray, b: np.ndarray,
               spread: np.ndarray, tags: np.ndarray) -> np.ndarray:
        """Requantize ``slots``; returns the mask of those whose key changed (or is new). Only the rows whose
        key changed are written back (the view re-classifies only those)."""
        self._ensure(int(slots.max()) + 1 if slots.size else 0)
        T, n = self.T, self.T + 3
        values = np.empty((slots.size, n))
        best = np.where(runnable, x, -np.inf).max(axis=1, keepdims=True)
        values[:, :T] = np.where(runnable, x - np.where(np.isfinite(best), best, 0.0), 0.0)
        values[:, T], values[:, T + 1], values[:, T + 2] = a, b, spread
        values /= self.steps
        np.clip(values, Q_MIN, Q_MAX, out=values)
        old = np.take(self.q, slots, axis=0)
        head = old[:, :n].astype(np.float64)
        fresh = ~self.set[slots]
        moved = np.abs(values - head) > 0.5 + self.hysteresis
        moved[fresh] = True
        new = np.where(moved, np.rint(values), head).astype(np.int64)
        new[:, :T][~runnable] = UNRUNNABLE
        # Tags: sorted (-1 padding first); only rows carrying one need sorting.
        tagged = _any_column(tags >= 0)
        sorted_tags = np.full(tags.shape, -1, dtype=np.int64)
        if tagged.any():
            sorted_tags[tagged] = np.sort(tags[tagged], axis=1)
        changed = fresh | _any_column(new != old[:, :n]) | _any_column(sorted_tags != old[:, n:])
        w = slots[changed]
        self.q[w, :n] = new[changed]
        self.q[w, n:] = sorted_tags[changed]
        self.set[slots] = True
        return changed

    def key(self, slot: int) -> str:
        return self.key_of(self.q[slot])

    def key_of(self, q: np.ndarray) -> str:
        """The key of one row of quantized values (rates per type, a, b, spread, tags)."""
        return encode(q[: self.T], int(q[self.T]), int(q[self.T + 1]), int(q[self.T + 2]), q[self.T + 3:])

    def relative_rates(self, slot: int) -> np.ndarray:
        """The presented relative rate per type of the slot's current key (for reports)."""
        q = self.q[slot, : self.T]
        return np.where(q == UNRUNNABLE, 0.0, np.exp(self.steps[: self.T] * np.where(q == UNRUNNABLE, 0, q)))


def _any_column(mask: np.ndarray) -> np.ndarray:
    """``mask.any(axis=1)`` of a tall, narrow boolean array, a column at a time: NumPy's reduction along a short
    axis costs several times the comparisons that made the mask (tens of thousands of rows, a few columns)."""
    out = mask[:, 0].copy() if mask.shape[1] else np.zeros(mask.shape[0], dtype=bool)
    for j in range(1, mask.shape[1]):
        out |= mask[:, j]
    return out
