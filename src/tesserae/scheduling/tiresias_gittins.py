"""``tiresias-gittins``: Discretized 2D-Gittins (Tiresias, NSDI 2019; DESIGN §3).

Same queues, lists, demotions and promotions as ``tiresias-las``; at every pass each queue's list
is sorted by Gittins index, highest first, then earliest submit, keeping list order on ties, and
the sorted order persists (Tiresias' in-place ``queue.sort``). A job's index is taken at the
GPU-seconds it has attained since it last entered queue 0 (Tiresias' ``executed_time x
num_gpu``, which a promotion zeroes), for a service quantum ``D`` (default: the first queue
threshold; Tiresias' ``gittins_delta`` is 3250 with thresholds 3250, 7200), over the distribution
of job GPU-time ``S``. Two forms (``--gittins-index``):

- ``tiresias`` (default): the index Tiresias' own simulator computes (``run_sim.py``,
  ``cal_r_gittins_index`` / ``get_gittins_index``): a step function on the sample grid, each step
  the value one GPU-second before the next sample, with its formula and rounding (see
  :meth:`GittinsIndex.tiresias_grid`). Its expected-service term counts a job that ends within
  the quantum at its whole size, so the index is ``1 / (1 / G + a)`` of the definition below
  (near enough: up to its tail and rounding). That ranks jobs with more attained service lower than the
  definition does; on an overloaded 480-job trace it moves 2D-Gittins' average JCT by 15%
  (docs/reproduction/tiresias.md, Fidelity), which is why it is the default for a baseline named
  after Tiresias.
- ``paper``: the definition, exact at any ``a``:

      G(a) = P(S - a <= D | S > a) / E[min(S - a, D) | S > a]

  Over an empirical sample ``s_1 <= ... <= s_n``, with ``lo`` = the first sample above ``a`` and
  ``hi`` = the first above ``a + D``, both conditional terms share the factor ``1 / (n - lo)``:

      G(a) = (hi - lo) / (sum(s[lo:hi]) - a (hi - lo) + (n - hi) D)

Both precompute the sorted samples and their prefix sums once; a lookup is one or two
``searchsorted`` calls, O(log n) per job, vectorised over all jobs. A job that has outlived every
sample gets index 0: it goes last in its queue.

The distribution comes from ``--gittins-prior FILE`` (one GPU-time a line; a header line and
further comma-separated columns are ignored, e.g. ``yarn-gput1000.csv``, the one Tiresias'
simulator reads) or, without a prior, is learned online from the attained GPU-seconds of
completed jobs (Tiresias' simulator has no such mode). Until ``min_samples`` jobs have completed,
the order within a queue is 2D-LAS's (the list order). The learned index is rebuilt lazily at the
next decision after completions, at most once per 2% growth of the sample once it holds 1,000 jobs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import numpy as np
from pydantic import Field

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobTable
from tesserae.core.plugins import PluginOptions, RunContext
from tesserae.scheduling._tiresias_queues import DEFAULT_TICK, SERVICE_EPS, QueuesOptions, TiresiasQueues
from tesserae.scheduling.base import register

DEFAULT_MIN_SAMPLES = 10


INDEX_FORMS = ("tiresias", "paper")
DEFAULT_INDEX_FORM = "tiresias"


class GittinsIndex:
    """Gittins index of an empirical GPU-time distribution (see module docstring).

    ``__call__`` is the definition (``paper``) at any ``a``; ``lookup`` is the index a policy of
    the given ``form`` uses.
    """

    def __init__(self, samples: Sequence[float] | np.ndarray, quantum: float, form: str = DEFAULT_INDEX_FORM
                 ) -> None:
        s = np.sort(np.asarray(samples, dtype=np.float64).ravel())
        if s.size == 0:
            raise ValueError("a Gittins index needs at least one sample")
        if not (quantum > 0 and math.isfinite(quantum)):
            raise ValueError(f"the Gittins quantum must be positive and finite, got {quantum}")
        if form not in INDEX_FORMS:
            raise ValueError(f"unknown Gittins index form '{form}'; valid: {', '.join(INDEX_FORMS)}")
        self.samples = s
        self.quantum = float(quantum)
        self.form = form
        self.prefix = np.concatenate([[0.0], np.cumsum(s)])
        self._points: np.ndarray | None = None
        self._values: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.samples.size)

    def __call__(self, attained: np.ndarray | float) -> np.ndarray:
        a = np.asarray(attained, dtype=np.float64)
        s, d, n = self.samples, self.quantum, self.samples.size
        lo = np.searchsorted(s, a, side="right")
        hi = np.searchsorted(s, a + d, side="right")
        done = hi - lo
        expected = (self.prefix[hi] - self.prefix[lo]) - a * done + (n - hi) * d
        alive = lo < n
        out = np.zeros(np.broadcast(a).shape)
        np.divide(done, expected, out=out, where=alive & (expected > 0))
        return out

    def tiresias_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """(distinct samples ``u``, the index Tiresias' simulator gives a job below ``u``).

        Tiresias' ``parse_job_dist`` evaluates ``cal_r_gittins_index`` at ``u - 1`` (whole
        GPU-seconds) for every sample ``u``; ``get_gittins_index`` gives a job with attained ``a``
        the value of the first sample above ``a``. Its formula, term by term: ``lo``/``hi`` as in
        the definition, except that ``hi`` is ``n - 1`` once ``x + D`` passes the largest sample
        less one; ``p = round((hi - lo) / (n - lo), 5)``; ``e = floor((sum(s[lo:hi]) + (n - hi) D)
        / (n - lo))`` -- a job ending within the quantum counts its whole size ``s``, not ``s - x``;
        index ``round(p * 1e6 / e, 4)``.
        """
        if self._points is None:
            s, d, n = self.samples, self.quantum, self.samples.size
            u = np.unique(s)
            x = np.maximum(u - 1.0, np.concatenate([[0.0], u[:-1]]))
            lo = np.searchsorted(s, x, side="right")
            hi = np.searchsorted(s, x + d, side="right")
            hi = np.where(x + d > s[-1] - 1.0, n - 1, hi)
            alive = n - lo
            p = np.round((hi - lo) / alive, 5)
            e = np.floor(((self.prefix[hi] - self.prefix[lo]) + (n - hi) * d) / alive)
            values = np.zeros(u.size)
            np.divide(p * 1e6, e, out=values, where=e > 0)
            self._points, self._values = u, np.round(values, 4)
        assert self._values is not None
        return self._points, self._values

    def lookup(self, attained: np.ndarray) -> np.ndarray:
        """The index of each job with ``attained`` GPU-seconds (since its last reset), by ``form``."""
        if self.form == "paper":
            return self(attained)
        points, values = self.tiresias_grid()
        i = np.searchsorted(points, attained, side="right")
        return np.where(i < points.size, values[np.minimum(i, points.size - 1)], 0.0)

    def grid(self) -> tuple[np.ndarray, np.ndarray]:
        """The definition at 0 and at every distinct sample value: the points where its form changes."""
        points = np.unique(np.concatenate([[0.0], self.samples]))
        return points, self(points)


def read_gittins_prior(path: str | Path) -> np.ndarray:
    """GPU-time samples, one a line (first comma-separated field; a non-numeric first line is a header)."""
    p = Path(path)
    if not p.is_file():
        raise InputError("Gittins prior file not found", path=str(p), field="gittins-prior")
    values: list[float] = []
    first = True
    try:
        with p.open() as f:
            for line_no, raw in enumerate(f, start=1):
                text = raw.strip()
                if not text or text.startswith("#"):
                    continue
                cell = text.split(",", 1)[0].strip()
                try:
                    v = float(cell)
                except ValueError:
                    if first:
                        first = False
                        continue  # header
                    raise InputError(f"'{cell}' is not a number of GPU-seconds", path=str(p), line=line_no,
                                     field="gpu_time") from None
                first = False
                if not math.isfinite(v) or v < 0:
                    raise InputError(f"GPU-time {v} must be finite and >= 0", path=str(p), line=line_no,
                                     field="gpu_time")
                values.append(v)
    except UnicodeDecodeError as exc:
        raise InputError(f"not a text file ({exc.reason})", path=str(p)) from None
    if not values:
        raise InputError("no GPU-time samples in the file", path=str(p), field="gpu_time")
    return np.asarray(values, dtype=np.float64)


class GittinsOptions(QueuesOptions):
    """Tiresias' queues, and where the Gittins index comes from."""

    gittins_prior: str | None = Field(None, description="file of job GPU-times, one a line (default: learned "
                                      "online from completed jobs)")
    gittins_index: Literal["tiresias", "paper"] | None = Field(None, description="tiresias (the index of "
                                                               "Tiresias' simulator, the default) or paper")
    gittins_quantum: float | None = Field(None, gt=0, allow_inf_nan=False, description="service quantum D "
                                          "in GPU-seconds (default: the first queue threshold)")
    gittins_min_samples: int = Field(DEFAULT_MIN_SAMPLES, ge=1, description="completed jobs needed before a "
                                     "learned index replaces 2D-LAS order")


@register("tiresias-gittins")
class TiresiasGittins(TiresiasQueues):
    """2D-Gittins: Gittins index within each queue, from a prior or learned online."""

    Options: ClassVar[type[PluginOptions]] = GittinsOptions

    def __init__(self, queues: Sequence[float] | None = None, promote_knob: float | None = None,
                 prior: Sequence[float] | np.ndarray | None = None, quantum: float | None = None,
                 min_samples: int = DEFAULT_MIN_SAMPLES, prior_source: str | None = None,
                 index_form: str | None = None, tick: float = DEFAULT_TICK) -> None:
        super().__init__(queues, promote_knob, tick)
        self.index_form = DEFAULT_INDEX_FORM if index_form is None else index_form
        if self.index_form not in INDEX_FORMS:
            raise InputError(f"unknown Gittins index '{self.index_form}'; choose one of: {', '.join(INDEX_FORMS)}",
                             field="gittins-index")
        if quantum is None:
            quantum = float(self.thresholds[0]) if self.thresholds.size else 3600.0
        if not (quantum > 0 and math.isfinite(quantum)):
            raise InputError(f"Gittins quantum {quantum} must be positive and finite", field="gittins-quantum")
        self.quantum = float(quantum)
        self.min_samples = max(1, int(min_samples))
        self._prior = None if prior is None else GittinsIndex(prior, self.quantum, self.index_form)
        self.prior_source = prior_source if prior is not None else None

    @classmethod
    def from_options(cls, options: GittinsOptions, context: RunContext) -> Self:
        """The prior file is read here: a missing or malformed one is refused before any run."""
        path = options.gittins_prior
        return cls(queues=options.queues, promote_knob=options.promote_knob,
                   prior=None if path is None else read_gittins_prior(path), quantum=options.gittins_quantum,
                   min_samples=options.gittins_min_samples, prior_source=path, index_form=options.gittins_index,
                   tick=options.tick)

    # ------------------------------------------------------------------ learning
    def _reset_learning(self) -> None:
        self._learned: list[float] = []
        self._online: GittinsIndex | None = None
        self._built_from = 0
        self.las_fallback_decisions = 0

    def _reset(self, n: int) -> None:
        """A new table: the queues start over, and so does what was learned from its jobs."""
        super()._reset(n)
        self._reset_learning()

    def on_finish(self, table: JobTable, row: int, now: float) -> None:
        if self._prior is None:
            self._learned.append(float(table.attained[row]))

    def index(self) -> GittinsIndex | None:
        """The index in force now: the prior, or the learned one once it has enough samples."""
        if self._prior is not None:
            return self._prior
        n = len(self._learned)
        if n < self.min_samples:
            return None
        if self._online is None or (n > self._built_from and
                                    (self._built_from < 1000 or n >= self._built_from * 1.02)):
            self._online = GittinsIndex(self._learned, self.quantum, self.index_form)
            self._built_from = n
        return self._online

    # ------------------------------------------------------------------ order
    def _within_queue(self, table: JobTable, rows: np.ndarray, now: float) -> tuple[np.ndarray, ...]:
        gittins = self.index()
        if gittins is None:
            self.las_fallback_decisions += 1
            return ()
        # SERVICE_EPS: a job whose clock stopped exactly on a sample has reached it (Tiresias counts
        # whole GPU-seconds), whatever float noise the stop left.
        service = self.service_since_reset(table, rows) + SERVICE_EPS
        return (-gittins.lookup(service), table.submit[rows])

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out.update({
            "gittins_quantum": self.quantum,
            "gittins_index": self.index_form,
            "gittins_source": f"prior {self.prior_source}" if self._prior is not None else "online",
            "gittins_samples": self._prior.size if self._prior is not None else len(self._learned),
            "gittins_las_fallback_decisions": self.las_fallback_decisions,
        })
        return out
