"""Learned throughputs: each job's rates estimated from its own progress (DESIGN §5, issue 25).

A profile is a prior, not the truth. :class:`RateEstimator` keeps, per *job*, an estimate of its
rate on every GPU type of the cluster (consolidated, alone), of how much it slows when spread over
more nodes than it needs, and of how it shares GPUs with a partner, each with an uncertainty and
a flag saying whether it was measured or comes from a prior. Observations are iterations over the
seconds the job actually computed (its restart time and stalls left out by whoever reports them):
``observe``. The prior of a job is, in order: a measured profile's entry for its declared type;
its family's fit (jobs of the same declared type and GPU count, when ``hints``); the population's
fit over every measured job; the built-in model. The fits and the posteriors are recomputed by
``refresh`` (the model and its arithmetic: :mod:`tesserae.profiles._learned_fit`).

Observations are job-written, so hostile. One that is not a finite positive rate, that is absurdly
large, too short, from a superseded run, or inconsistent with what the job showed before is
refused and counted, and changes nothing. A job can lie within the bounds; then what it can do is
bounded: its estimates stay within ``ratio_bound`` of its prior's speed-up between GPU types and
its pair factors within [``pair_floor``, 1] (no job looks faster next to a partner than alone),
and it weighs at most one job's worth, less when far from the others, in the shared fits.

Exploration is optimism under uncertainty, bounded and counted: ``presented`` adds
``explore_bonus`` standard deviations to a job's rate on a GPU type it was never measured on, but
only while the GPU-seconds it has spent exploring (``note_run``) stay within ``explore_budget`` of
the GPU-seconds it has run; within the same budget, a job never measured next to a partner gets the
bonus on its sharing terms (an exploratory pair, undone by a veto if it measures badly).

The state is JSON-safe and bounded (``to_state``/``from_state``): every active job plus at most
``max_finished`` finished ones (they keep informing the shared fits), each with at most
``max_partners`` partner entries.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tesserae.core.throughput import ThroughputModel
from tesserae.profiles import _learned_fit as fit
from tesserae.profiles.default_model import DEFAULT_SHARE_FACTOR, DefaultModel

STATE_FORMAT = "tesserae-learned-1"
#: Veto tags a job carries at most (its most recent vetoed pairs).
MAX_TAGS = 4
GENERIC = "generic"
#: Reasons an observation is refused (counted per reason, never applied).
REJECTIONS = ("unknown job", "unknown partner", "unknown GPU type", "not a number", "negative", "too short",
              "absurd", "stale run", "inconsistent")


@dataclass(frozen=True, slots=True)
class LearnedConfig:
    """Knobs of the estimator; the defaults are the ones the simulator's ``learned`` mode uses."""

    #: Pool jobs of one declared type and GPU count into a family (the type is a hint, never a table).
    hints: bool = True
    #: Exploration GPU-seconds a job may spend per GPU-second it has run.
    explore_budget: float = 0.1
    #: Optimism on a never-measured GPU type, in standard deviations of its estimate.
    explore_bonus: float = 2.0
    #: Seconds one exploration run lasts (the round length): a job explores only if its budget holds one.
    probe_seconds: float = 300.0
    #: Finished jobs kept for the shared fits (the oldest go first).
    max_finished: int = 4096
    #: Partner entries kept per job (the least recently observed go first).
    max_partners: int = 16
    #: Relative observation noise assumed before any is measured (then pooled from repeats).
    noise: float = 0.05
    #: A job's rate on one GPU type stays within this factor of its prior's shape around its own scale.
    ratio_bound: float = 4.0
    #: Lowest pair factor (rate next to a partner / rate alone); the highest is 1.
    pair_floor: float = 0.02
    #: Observations over fewer computed seconds than this are too short to mean anything.
    min_seconds: float = 5.0
    #: No job runs faster than this (iterations/s): above it an observation is absurd.
    max_rate: float = 1e9
    #: A rate this many times off the job's current estimate (once it has one) is absurd.
    absurd_factor: float = 1000.0
    #: A rate this many times off what the job showed before on the same placement is inconsistent.
    inconsistent_factor: float = 100.0

    def __post_init__(self) -> None:
        checks = (("explore_budget", self.explore_budget >= 0), ("explore_bonus", self.explore_bonus >= 0),
                  ("probe_seconds", self.probe_seconds > 0), ("max_finished", self.max_finished >= 0),
                  ("max_partners", self.max_partners >= 1), ("noise", 0 < self.noise < 1),
                  ("ratio_bound", self.ratio_bound >= 1), ("pair_floor", 0 < self.pair_floor < 1),
                  ("min_seconds", self.min_seconds >= 0), ("max_rate", self.max_rate > 0),
                  ("absurd_factor", self.absurd_factor > 1), ("inconsistent_factor", self.inconsistent_factor > 1))
        for name, ok in checks:
            value = getattr(self, name)
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise ValueError(f"learned estimator: {name} = {value!r} is out of range")


@dataclass(frozen=True, slots=True)
class Estimate:
    """One rate estimate: iterations/s, its log-space sd, measured or a prior, and where the prior came from."""

    rate: float
    sd: float
    measured: bool
    source: str


class RateEstimator:
    """Per-job rate estimates learned from progress (see module docstring)."""

    def __init__(self, gpu_types: Sequence[str], prior_model: ThroughputModel | None = None,
                 config: LearnedConfig | None = None) -> None:
        if not gpu_types or len(set(gpu_types)) != len(gpu_types):
            raise ValueError("learned estimator: GPU types must be distinct and at least one")
        self.gpu_types = tuple(gpu_types)
        self.type_index = {g: i for i, g in enumerate(self.gpu_types)}
        self.prior_model = prior_model if prior_model is not None else DefaultModel()
        self.config = config or LearnedConfig()
        T = len(self.gpu_types)
        self.T = T
        self.accepted = 0
        self.rejected: Counter[str] = Counter()
        self.stalls = 0
        self.ignored = 0  # accepted but carrying nothing the model uses (spread and paired at once)
        self._stamp = 0
        self._slot: dict[int, int] = {}
        self._prior_cache: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, bool, float, float]] = {}
        self._grow_slots(64)
        self._grow_pairs(64)
        self._pair_of: dict[tuple[int, int, int], int] = {}
        # slot -> its pair entries (as the job), and the entries naming it as the partner; an index may
        # be stale (dropped, or reused by another pair): ``_entries`` filters.
        self._partners: dict[int, list[int]] = {}
        self._as_partner: dict[int, list[int]] = {}
        self._done: deque[tuple[int, int]] = deque()  # finished (slot, job id), oldest first
        self._families: dict[tuple[str, int], int] = {}
        self._family_names: list[tuple[str, int]] = []
        generic, _, _, share, _ = self._prior_of(GENERIC, 1)
        self.mu0 = generic
        self.sigma0 = fit.prior_covariance(T)
        self.pop_mu = self.mu0.copy()
        self.pop_sigma = self.sigma0.copy()
        self.pair_mu0 = math.log(share)
        self.pair_mu, self.pair_var = self.pair_mu0, fit.PAIR_MEAN_SD**2
        self.tau2 = self.config.noise**2
        #: Within a family: a job's log-rates around the family's mean (see ``_learned_fit``).
        self.within = fit.prior_covariance(T, fit.WITHIN_SCALE_SD, fit.WITHIN_SHAPE_SD)
        self._fam_mu = np.zeros((0, T))  # the family mean's posterior mean
        self._fam_sigma = np.zeros((0, T, T))  # prior of a new member: within + the mean's covariance
        self._fam_lam = np.zeros((0, T, T))  # the family mean's posterior precision ...
        self._fam_eta = np.zeros((0, T))  # ... and precision-weighted mean (members' leave-one-out from them)
        self._fam_w = np.zeros(0)  # members measured
        self._fam_a = np.zeros(0)
        self._fam_b = np.zeros(0)
        self._fam_sp = np.zeros(0)
        self._fam_n = np.zeros(0)
        self._fit_w = np.zeros(self._cap)
        self.refreshes = 0
        self._dirty = True
        self._forget_due = False
        self._vetoed: dict[tuple[int, int], int] = {}  # (slot, slot) -> veto tag
        self._tags: dict[int, list[int]] = {}  # slot -> veto tags it carries
        self._next_tag = 0
        self.vetoes = 0
        self._ss = 0.0  # pooled within-entry sum of squares of log-rates (observation noise)
        self._dof = 0.0

    # ------------------------------------------------------------------------------ storage
    def _grow_slots(self, cap: int) -> None:
        T = self.T
        old = getattr(self, "_cap", 0)
        self._cap = cap

        def grow(name: str, shape: tuple[int, ...], fill: float | int | bool, dtype: Any) -> None:
            new = np.full((cap, *shape), fill, dtype=dtype)
            if old:
                new[:old] = getattr(self, name)
            setattr(self, name, new)

        grow("ids", (), -1, np.int64)
        grow("alive", (), False, bool)
        grow("finished", (), False, bool)
        grow("stamp", (), 0, np.int64)
        grow("n", (), 1, np.int64)
        grow("fam", (), -1, np.int64)
        grow("profiled", (), False, bool)
        grow("shape", (T,), 0.0, np.float64)
        grow("runnable", (T,), True, bool)
        grow("run", (), -1, np.int64)
        grow("cnt", (T,), 0.0, np.float64)
        grow("s1", (T,), 0.0, np.float64)
        grow("s2", (T,), 0.0, np.float64)
        grow("spc", (T,), 0.0, np.float64)
        grow("sps", (T,), 0.0, np.float64)
        grow("attained", (), 0.0, np.float64)
        grow("explored", (), 0.0, np.float64)
        grow("probes", (), 0, np.int64)
        grow("shared", (), False, bool)  # observed next to a partner (either side) at least once
        grow("m", (T,), 0.0, np.float64)
        grow("P", (T, T), 0.0, np.float64)
        grow("a_m", (), 0.0, np.float64)
        grow("a_v", (), fit.PAIR_SD**2, np.float64)
        grow("b_m", (), 0.0, np.float64)
        grow("b_v", (), fit.PAIR_SD**2, np.float64)
        grow("sp_prior", (), 0.0, np.float64)
        grow("sp_m", (), 0.0, np.float64)
        grow("sp_v", (), fit.SPREAD_SD**2, np.float64)
        grow("_fit_w", (), 0.0, np.float64)
        grow("fitted", (), False, bool)
        grow("_info", (T, T), 0.0, np.float64)
        grow("_infoy", (T,), 0.0, np.float64)
        if old == 0:
            self.declared: list[str | None] = []
            self._free_slots: list[int] = []
        self.declared.extend([None] * (cap - old))
        self._free_slots.extend(range(cap - 1, old - 1, -1))

    def _grow_pairs(self, cap: int) -> None:
        old = getattr(self, "_pcap", 0)
        self._pcap = cap
        for name, fill, dtype in (("pj", -1, np.int64), ("pp", -1, np.int64), ("pt", 0, np.int64),
                                  ("pc", 0.0, np.float64), ("ps1", 0.0, np.float64), ("ps2", 0.0, np.float64),
                                  ("pstall", 0.0, np.float64),
                                  ("pstamp", 0, np.int64), ("palive", False, bool)):
            new = np.full(cap, fill, dtype=dtype)
            if old:
                new[:old] = getattr(self, name)
            setattr(self, name, new)
        self._free_pairs: list[int] = [*getattr(self, "_free_pairs", []), *range(cap - 1, old - 1, -1)]

    def _prior_of(self, declared: str, n: int) -> tuple[np.ndarray, np.ndarray, bool, float, float]:
        """(log-rate shape over the cluster's types, runnable mask, from a measured profile?, pair factor,
        log spread factor)."""
        key = (declared, n)
        hit = self._prior_cache.get(key)
        if hit is not None:
            return hit
        model = self.prior_model
        rates = np.array([_safe_rate(model, declared, n, g) for g in self.gpu_types])
        profiled = model.measured and bool((rates > 0).any())
        if not (rates > 0).any():
            rates = np.array([_safe_rate(model, GENERIC, n, g) for g in self.gpu_types])
            if not (rates > 0).any():
                rates = np.ones(self.T)
            profiled = False
        runnable = rates > 0 if profiled else np.ones(self.T, dtype=bool)
        shape = np.log(np.where(rates > 0, rates, rates[rates > 0].min()))
        # The built-in model's pair factor; any other prior: the built-in model's default one.
        share = model.config.share_factor if isinstance(model, DefaultModel) else DEFAULT_SHARE_FACTOR
        out = (shape, runnable, profiled, float(share), self._spread_prior(declared, n))
        self._prior_cache[key] = out
        return out

    def _spread_prior(self, declared: str, n: int) -> float:
        g = self.prior_model.reference_gpu_type if self.prior_model.reference_gpu_type in self.type_index \
            else self.gpu_types[0]
        together = _safe_rate(self.prior_model, declared, n, g)
        spread = _safe_rate(self.prior_model, declared, n, g, consolidated=False)
        if together > 0 and spread > 0:
            return float(np.clip(math.log(spread / together), math.log(0.05), 0.0))
        return 0.0

    # ------------------------------------------------------------------------------ jobs
    def register(self, job_id: int, num_gpus: int, declared_type: str | None = None) -> int:
        """A job the estimator should know (idempotent); ``declared_type`` is a hint for its prior.
        Returns its slot (the row of its figures in the estimator's arrays)."""
        return int(self.register_many([job_id], [num_gpus], [declared_type])[0])

    def register_many(self, job_ids: Sequence[int] | np.ndarray, num_gpus: Sequence[int] | np.ndarray,
                      declared_types: Sequence[str | None]) -> np.ndarray:
        """``register`` of many jobs at once (what a decision with a thousand arrivals needs); their slots."""
        ids = [int(j) for j in job_ids]
        out = np.array([self._slot.get(j, -1) for j in ids], dtype=np.int64)
        new = np.flatnonzero(out < 0)
        # the same id twice in one call: the first one registers it
        seen: dict[int, int] = {}
        keep = [i for i in new.tolist() if seen.setdefault(ids[i], i) == i]
        if not keep:
            return np.array([self._slot[j] for j in ids], dtype=np.int64)
        k = len(keep)
        while len(self._free_slots) < k:
            self._grow_slots(self._cap * 2)
        slots = np.array(self._free_slots[-k:][::-1], dtype=np.int64)
        del self._free_slots[-k:]
        self._reset_slots(slots)
        jid = np.array([ids[i] for i in keep], dtype=np.int64)
        n = np.maximum(np.asarray(num_gpus, dtype=np.int64)[keep], 1)
        declared = [declared_types[i] for i in keep]
        self._slot.update(zip(jid.tolist(), slots.tolist(), strict=True))
        self.ids[slots], self.alive[slots], self.n[slots] = jid, True, n
        self.stamp[slots] = self._stamp + 1 + np.arange(k)
        self._stamp += k
        groups: dict[tuple[str | None, int], list[int]] = {}
        for i, (d, c) in enumerate(zip(declared, n.tolist(), strict=True)):
            groups.setdefault((d, c), []).append(i)
        prof_cov = fit.prior_covariance(self.T, fit.PROFILE_SD, fit.PROFILE_SD)
        for (d, c), members in groups.items():
            sl = slots[members]
            shape, runnable, profiled, _, spread = self._prior_of(d or GENERIC, c)
            self.shape[sl], self.runnable[sl], self.profiled[sl] = shape, runnable, profiled
            self.sp_prior[sl] = self.sp_m[sl] = spread
            for s in sl.tolist():
                self.declared[s] = d
            f = -1
            if self.config.hints and d and not profiled:
                f = self._families.get((d, c), -1)
                if f < 0:
                    f = self._families[(d, c)] = len(self._family_names)
                    self._family_names.append((d, c))
                    self._grow_families()
            self.fam[sl] = f
            # Until the next refresh, the job's estimate is its prior.
            if profiled:
                self.m[sl], self.P[sl] = shape, prof_cov
            elif f >= 0:
                self.m[sl], self.P[sl] = self._fam_mu[f], self._fam_sigma[f]
            else:
                self.m[sl], self.P[sl] = self.pop_mu, self.pop_sigma
        return np.array([self._slot[j] for j in ids], dtype=np.int64)

    def _reset_slots(self, slots: np.ndarray) -> None:
        for name in ("cnt", "s1", "s2", "spc", "sps", "m", "P", "attained", "explored", "a_m", "b_m", "_fit_w",
                     "_info", "_infoy"):
            getattr(self, name)[slots] = 0.0
        self.finished[slots] = False
        self.fitted[slots] = False
        self.fam[slots] = -1
        self.run[slots] = -1
        self.probes[slots] = 0
        self.shared[slots] = False
        self.a_v[slots] = self.b_v[slots] = fit.PAIR_SD**2
        self.sp_v[slots] = fit.SPREAD_SD**2

    def _grow_families(self) -> None:
        F = len(self._family_names)
        add = F - self._fam_mu.shape[0]
        if add <= 0:
            return
        p_inv = np.linalg.inv(self.pop_sigma)
        self._fam_mu = np.vstack([self._fam_mu, np.tile(self.pop_mu, (add, 1))])
        self._fam_sigma = np.concatenate([self._fam_sigma, np.tile(self.pop_sigma + self.within, (add, 1, 1))])
        self._fam_lam = np.concatenate([self._fam_lam, np.tile(p_inv, (add, 1, 1))])
        self._fam_eta = np.vstack([self._fam_eta, np.tile(p_inv @ self.pop_mu, (add, 1))])
        for name in ("_fam_w", "_fam_a", "_fam_b", "_fam_sp", "_fam_n"):
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(add)]))

    def _touch(self, s: int) -> None:
        self._stamp += 1
        self.stamp[s] = self._stamp

    def known(self, job_id: int) -> bool:
        return int(job_id) in self._slot

    def slot(self, job_id: int) -> int:
        return self._slot[int(job_id)]

    def start_run(self, job_id: int, run: int) -> None:
        """The job's current run (a fence): reports of earlier runs are stale from now on."""
        s = self._slot.get(int(job_id))
        if s is not None:
            self.run[s] = max(int(self.run[s]), int(run))

    def finish(self, job_id: int) -> None:
        """The job ended: it keeps informing the shared fits until ``max_finished`` newer ones push it out."""
        self.finish_many([job_id])


    def finish_many(self, job_ids: Sequence[int] | np.ndarray) -> None:
        """``finish`` of many jobs at once, in the order given."""
        get = self._slot.get
        slots = np.array([get(int(j), -1) for j in job_ids], dtype=np.int64)
        slots = slots[slots >= 0]
        slots = slots[~self.finished[slots]]
        if slots.size == 0:
            return
        slots = slots[np.unique(slots, return_index=True)[1]] if slots.size > 1 else slots
        self.finished[slots] = True
        self.stamp[slots] = self._stamp + 1 + np.arange(slots.size)
        self._stamp += slots.size
        self._done.extend(zip(slots.tolist(), self.ids[slots].tolist(), strict=True))
        self._drop_tags(slots)
        self._forget_due = True  # the next refresh forgets the oldest finished jobs beyond ``max_finished``

    def _forget(self) -> None:
        """Evict the oldest finished jobs beyond ``max_finished`` (at a refresh, off the decision's path)."""
        extra = len(self._done) - self.config.max_finished
        if extra <= 0:
            return
        old = np.array([self._done.popleft() for _ in range(extra)], dtype=np.int64).reshape(-1, 2)
        s, j = old[:, 0], old[:, 1]
        valid = s[self.alive[s] & self.finished[s] & (self.ids[s] == j)]
        if valid.size:
            self._evict(valid)

    def _evict(self, slots: np.ndarray) -> None:
        for j in self.ids[slots].tolist():
            del self._slot[j]
        self.alive[slots] = False
        self.ids[slots] = -1
        self._free_slots.extend(slots.tolist())
        for s in slots.tolist():
            self._partners.pop(s, None)
            self._as_partner.pop(s, None)
        gone = np.zeros(self._cap, dtype=bool)
        gone[slots] = True
        live = np.flatnonzero(self.palive)
        dead = live[gone[self.pj[live]] | gone[self.pp[live]]]
        if dead.size:
            self._drop_pairs(dead)

    def note_run(self, job_id: int, gpu_seconds: float, exploring: bool = False) -> None:
        """GPU-seconds the job ran (all of them), and whether they were an exploration run."""
        s = self._slot.get(int(job_id))
        if s is None or not (math.isfinite(gpu_seconds) and gpu_seconds > 0):
            return
        self.attained[s] += gpu_seconds
        if exploring:
            self.explored[s] += gpu_seconds

    def note_probe(self, job_id: int) -> None:
        s = self._slot.get(int(job_id))
        if s is not None:
            self.probes[s] += 1

    # ------------------------------------------------------------------------------ observations
    def observe(self, job_id: int, iterations: float, seconds: float, gpu_type: str, consolidated: bool = True,
                partner: int | None = None, run: int | None = None) -> str | None:
        """One progress report: ``iterations`` over ``seconds`` of computing on ``gpu_type``. Returns None
        when it was taken, else why it was refused (also counted in ``rejected``)."""
        why = self._check(job_id, iterations, seconds, gpu_type, partner, run)
        if why is not None:
            self.rejected[why] += 1
            return why
        s = self._slot[int(job_id)]
        t = self.type_index[gpu_type]
        if iterations == 0:  # a stall: nothing computed in all that time
            self._touch(s)
            self._dirty = True
            self.stalls += 1
            if partner is None:
                return None
            y = float(self.m[s, t]) + math.log(self.config.pair_floor)
            self._add_pair(s, self._slot[int(partner)], t, y, stall=True)
            return None
        y = math.log(float(iterations) / float(seconds))
        why = self._plausible(s, t, y, consolidated, partner)
        if why is not None:
            self.rejected[why] += 1
            return why
        self._touch(s)
        self._dirty = True
        self.accepted += 1
        if partner is not None:
            if not consolidated:
                self.ignored += 1
                return None
            self._add_pair(s, self._slot[int(partner)], t, y)
        elif consolidated:
            self._welford(float(self.cnt[s, t]), float(self.s1[s, t]), y)
            self.cnt[s, t] += 1.0
            self.s1[s, t] += y
            self.s2[s, t] += y * y
        else:
            self.spc[s, t] += 1.0
            self.sps[s, t] += y
        return None

    def _check(self, job_id: int, iterations: float, seconds: float, gpu_type: str, partner: int | None,
               run: int | None) -> str | None:
        try:
            s = self._slot.get(int(job_id))
        except (TypeError, ValueError, OverflowError):
            return "unknown job"
        if s is None:
            return "unknown job"
        try:
            it, sec = float(iterations), float(seconds)
        except (TypeError, ValueError, OverflowError):
            return "not a number"
        if not (math.isfinite(it) and math.isfinite(sec)):
            return "not a number"
        if it < 0 or sec < 0:
            return "negative"
        if sec < max(self.config.min_seconds, 1e-9):
            return "too short"
        if it / sec > self.config.max_rate:
            return "absurd"
        if gpu_type not in self.type_index:
            return "unknown GPU type"
        if partner is not None:
            try:
                p = self._slot.get(int(partner))
            except (TypeError, ValueError, OverflowError):
                return "unknown partner"
            if p is None or p == s:
                return "unknown partner"
        if run is not None and int(run) < int(self.run[s]):
            return "stale run"
        return None

    def _plausible(self, s: int, t: int, y: float, consolidated: bool, partner: int | None) -> str | None:
        """Refuse a rate that the job's own history contradicts (it has one once a refresh fitted its data)."""
        if self.fitted[s]:
            pred = float(self.m[s, t])
            if partner is not None:
                pred += self.pair_mu + float(self.a_m[s]) + float(self.b_m[self._slot[int(partner)]])
            elif not consolidated:
                pred += float(self.sp_m[s])
            if abs(y - pred) > math.log(self.config.absurd_factor):
                return "absurd"
        if partner is None and consolidated and self.cnt[s, t] >= 2:
            mean = self.s1[s, t] / self.cnt[s, t]
            if abs(y - mean) > math.log(self.config.inconsistent_factor):
                return "inconsistent"
        return None

    def _add_pair(self, s: int, p: int, t: int, y: float, stall: bool = False) -> None:
        key = (s, p, t)
        e = self._pair_of.get(key)
        if e is None:
            mine = self._partners[s] = self._entries(s, self._partners.get(s), self.pj)
            if len(mine) >= self.config.max_partners:
                oldest = min(mine, key=lambda x: self.pstamp[x])
                mine.remove(oldest)
                self._drop_pairs(np.array([oldest]))
            if not self._free_pairs:
                self._grow_pairs(self._pcap * 2)
            e = self._free_pairs.pop()
            self._pair_of[key] = e
            self._partners.setdefault(s, []).append(e)
            self._as_partner.setdefault(p, []).append(e)
            self.pj[e], self.pp[e], self.pt[e] = s, p, t
            self.pc[e] = self.ps1[e] = self.ps2[e] = self.pstall[e] = 0.0
            self.palive[e] = True
        if not stall and self.pstall[e] == 0:
            self._welford(float(self.pc[e]), float(self.ps1[e]), y)
        self.pc[e] += 1.0
        self.pstall[e] += stall
        self.ps1[e] += y
        self.ps2[e] += y * y
        self.pstamp[e] = self._stamp
        self.shared[s] = self.shared[p] = True

    def _welford(self, count: float, total: float, y: float) -> None:
        """Pooled within-entry sum of squares for the noise estimate, one observation at a time."""
        if count >= 1:
            mean = total / count
            new_mean = (total + y) / (count + 1)
            self._ss += (y - mean) * (y - new_mean)
            self._dof += 1.0

    def _entries(self, s: int, index: list[int] | None, side: np.ndarray) -> list[int]:
        """The live entries of an index list that still belong to slot ``s`` on that side."""
        if not index:
            return []
        return [e for e in index if self.palive[e] and side[e] == s]

    def _drop_pairs(self, entries: np.ndarray) -> None:
        for key in zip(self.pj[entries].tolist(), self.pp[entries].tolist(), self.pt[entries].tolist(), strict=True):
            self._pair_of.pop(key, None)
        self.palive[entries] = False
        self._free_pairs.extend(entries.tolist())

    # ------------------------------------------------------------------------------ fitting
    def _priors(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each slot's prior (mean, covariance): its profile entry; its family's mean without its own data
        (leave-one-out), widened by the spread within a family; or the population's fit."""
        mu = np.broadcast_to(self.pop_mu, (slots.size, self.T)).copy()
        sig = np.broadcast_to(self.pop_sigma, (slots.size, self.T, self.T)).copy()
        fam = self.fam[slots]
        has = fam >= 0
        if has.any():
            f, sl = fam[has], slots[has]
            cov = np.linalg.inv(self._fam_lam[f] - self._info[sl])
            mu[has] = np.einsum("sij,sj->si", cov, self._fam_eta[f] - self._infoy[sl])
            sig[has] = cov + self.within
        prof = self.profiled[slots]
        if prof.any():
            mu[prof] = self.shape[slots[prof]]
            sig[prof] = fit.prior_covariance(self.T, fit.PROFILE_SD, fit.PROFILE_SD)
        return mu, sig

    def _fit_families(self, tau2: float) -> None:
        """Every family's mean from its members' alone observations (an exact conjugate fit, redone from the
        data at each refresh), with the population's fit as its prior."""
        F = len(self._family_names)
        if F == 0:
            return
        members = np.flatnonzero(self.alive & (self.fam >= 0) & (self.cnt > 0).any(axis=1))
        self._info[:] = 0.0
        self._infoy[:] = 0.0
        if members.size:
            cnt = self.cnt[members]
            ybar = np.where(cnt > 0, self.s1[members] / np.maximum(cnt, 1.0), 0.0)
            info, infoy = fit.member_information(cnt / tau2, ybar, self.within)
            self._info[members], self._infoy[members] = info, infoy
        lam, eta = fit.family_fit(self.fam[members], F, self._info[members], self._infoy[members], self.pop_mu,
                                  self.pop_sigma)
        cov = np.linalg.inv(lam)
        self._fam_lam, self._fam_eta = lam, eta
        self._fam_mu = np.einsum("fij,fj->fi", cov, eta)
        self._fam_sigma = cov + self.within
        self._fam_w = np.bincount(self.fam[members], minlength=F).astype(np.float64)

    def _pair_prior_means(self, slots: np.ndarray) -> tuple[np.ndarray, ...]:
        """Priors of a, b and the spread factor for each slot: (a mean, b mean, their variance, spread mean,
        its variance). Without a family: 0 (the built-in spread) and the population's sd. With one: the
        other members' mean (leave-one-out, shrunk to the population) and a variance that narrows, as
        members are measured, to the sd within a family (jobs of one type share GPUs alike)."""
        n = slots.size
        a, b, sp = np.zeros(n), np.zeros(n), self.sp_prior[slots].copy()
        var = np.full(n, fit.PAIR_SD**2)
        sp_var = np.full(n, fit.SPREAD_SD**2)
        fam = self.fam[slots]
        has = fam >= 0
        if has.any():
            f, sl = fam[has], slots[has]
            w = self._fit_w[sl]
            others = self._fam_n[f] - w
            denom = fit.KAPPA_FAMILY + others
            a[has] = (self._fam_a[f] - w * self.a_m[sl]) / denom
            b[has] = (self._fam_b[f] - w * self.b_m[sl]) / denom
            sp[has] = (fit.KAPPA_FAMILY * sp[has] + self._fam_sp[f] - w * self.sp_m[sl]) / denom
            shrink = fit.KAPPA_FAMILY / denom
            var[has] = fit.WITHIN_FAMILY_SD**2 + fit.PAIR_SD**2 * shrink
            sp_var[has] = fit.WITHIN_FAMILY_SD**2 + fit.SPREAD_SD**2 * shrink
        return a, b, var, sp, sp_var

    @property
    def dirty(self) -> bool:
        """Whether an observation arrived since the last refresh (a decision should then refresh first)."""
        return self._dirty

    def refresh(self) -> None:
        """Recompute the posteriors of the active jobs, then the population and family fits (see module
        docstring): one Gauss-Seidel sweep, warm-started from the last refresh (online EM). A finished
        job's posterior stays as it was (its data no longer changes); an active job without data is its
        prior. Nothing to do when no observation arrived since the last refresh."""
        if self._forget_due:
            self._forget_due = False
            self._forget()
        if not self._dirty:
            return
        self._dirty = False
        self.refreshes += 1
        T, cap = self.T, self._cap
        active = self.alive & ~self.finished
        e = np.flatnonzero(self.palive)
        pj, pp = self.pj[e], self.pp[e]
        touch = active[pj] | active[pp]  # entries between two finished jobs are frozen
        e, pj, pp = e[touch], pj[touch], pp[touch]
        pt, pc = self.pt[e], self.pc[e]
        ybar = self.ps1[e] / pc
        stalled = self.pstall[e] > 0
        self.tau2 = tau2 = self._noise()
        self._fit_families(tau2)
        data = (self.cnt > 0).any(axis=1) | (self.spc > 0).any(axis=1)
        data[pj] = True
        data[pp] = True
        upd = np.flatnonzero(data & active)
        bare = np.flatnonzero(~data & active)
        if bare.size:
            self.m[bare], self.P[bare] = self._priors(bare)
        if upd.size == 0:
            return
        k = upd.size
        pos = np.full(cap, -1, dtype=np.int64)
        pos[upd] = np.arange(k)
        qj, qp = pos[pj], pos[pp]  # compact index of each entry's job / partner (-1: not updated)
        a0, b0, ab_var, sp0, sp_var0 = self._pair_prior_means(upd)
        m, P = self.m, self.P
        a_m, a_v, b_m, b_v = self.a_m, self.a_v, self.b_m, self.b_v
        res2 = fit.PAIR_RESIDUAL_SD**2
        pair_mu, pair_var = self.pair_mu, self.pair_var
        noise_e = tau2 / pc
        # alone rates, from alone runs and (the pair terms taken as known) paired ones
        prec, num = self.cnt[upd] / tau2, self.s1[upd] / tau2
        mine = qj >= 0
        if mine.any():
            z = ybar - pair_mu - a_m[pj] - b_m[pp]
            w = 1.0 / (res2 + noise_e + a_v[pj] + b_v[pp] + pair_var)
            flat = qj[mine] * T + pt[mine]
            prec += np.bincount(flat, weights=w[mine], minlength=k * T).reshape(k, T)
            num += np.bincount(flat, weights=(w * z)[mine], minlength=k * T).reshape(k, T)
        prior_mu, prior_sig = self._priors(upd)
        m_u, P_u = fit.gaussian_posterior(prior_mu, np.linalg.inv(prior_sig), prec, num)
        m_u = fit.clamp_shape(m_u, self.shape[upd], math.log(self.config.ratio_bound))
        m[upd], P[upd] = m_u, P_u
        self.fitted[upd] = True
        lim = math.log(1.0 / self.config.pair_floor)
        if e.size:
            xv = P[pj, pt, pt]
            base = ybar - m[pj, pt]
            # the population's mean pair factor (a stall, out of memory, says nothing about sharing speed)
            w = np.where(stalled, 0.0, 1.0 / (res2 + noise_e + xv + a_v[pj] + b_v[pp]))
            pm, pv = fit.scalar_posterior(np.array([self.pair_mu0]), fit.PAIR_MEAN_SD**2,
                                          np.array([w.sum()]), np.array([(w * (base - a_m[pj] - b_m[pp])).sum()]))
            pair_mu, pair_var = float(np.clip(pm[0], -lim, 0.0)), float(pv[0])
            # each job's sensitivity a, then each partner's pressure b
            w = 1.0 / (res2 + noise_e + xv + b_v[pp] + pair_var)
            prec_a = np.bincount(qj[mine], weights=w[mine], minlength=k)
            num_a = np.bincount(qj[mine], weights=(w * (base - pair_mu - b_m[pp]))[mine], minlength=k)
            am, av = fit.scalar_posterior(a0, ab_var, prec_a, num_a)
            a_m[upd], a_v[upd] = np.clip(am, -lim, lim), av
            theirs = qp >= 0
            w = 1.0 / (res2 + noise_e + xv + a_v[pj] + pair_var)
            prec_b = np.bincount(qp[theirs], weights=w[theirs], minlength=k)
            num_b = np.bincount(qp[theirs], weights=(w * (base - pair_mu - a_m[pj]))[theirs], minlength=k)
            bm, bv = fit.scalar_posterior(b0, ab_var, prec_b, num_b)
            b_m[upd], b_v[upd] = np.clip(bm, -lim, lim), bv
            self.pair_mu, self.pair_var = pair_mu, pair_var
        # spread factors
        spc = self.spc[upd]
        si, ti = np.nonzero(spc > 0)
        if si.size:
            z = self.sps[upd][si, ti] / spc[si, ti] - m_u[si, ti]
            w = 1.0 / (tau2 / spc[si, ti] + P_u[si, ti, ti] + res2)
            sp_prec = np.bincount(si, weights=w, minlength=k)
            sp_num = np.bincount(si, weights=w * z, minlength=k)
        else:
            sp_prec = sp_num = np.zeros(k)
        spm, spv = fit.scalar_posterior(sp0, sp_var0, sp_prec, sp_num)
        self.sp_m[upd], self.sp_v[upd] = np.clip(spm, math.log(0.05), 0.0), spv
        self._refit(data & self.alive & ~self.profiled)
        self._veto(e, pj, pp, pt, ybar, stalled)

    def _veto(self, e: np.ndarray, pj: np.ndarray, pp: np.ndarray, pt: np.ndarray, ybar: np.ndarray,
              stalled: np.ndarray) -> None:
        """Gandiva's introspection: a pair measured in both directions slower than its two jobs alone
        (factors summing below 1, against alone rates measured on the same GPU type; a stall counts as 0)
        is vetoed: both jobs carry a tag naming the pair, and two jobs with a common tag are shown as
        unable to share (:mod:`learned_classes`)."""
        if e.size == 0:
            return
        T, cap = self.T, self._cap
        factor = np.where(stalled, 0.0, np.exp(np.minimum(ybar - self.m[pj, pt], 0.0)))
        key = (pj * cap + pp) * T + pt
        back = (pp * cap + pj) * T + pt
        order = np.argsort(key, kind="stable")
        at = np.clip(np.searchsorted(key[order], back), 0, key.size - 1)
        other = order[at]
        # Judged only where both jobs' alone rates on that type were measured (else a factor says little).
        known = (self.cnt[pj, pt] > 0) & (self.cnt[pp, pt] > 0)
        mutual = (key[other] == back) & (pj < pp) & known
        bad = mutual & (factor + factor[other] < 1.0)
        for s, p in zip(pj[bad].tolist(), pp[bad].tolist(), strict=True):
            if (s, p) in self._vetoed:
                continue
            self._next_tag += 1
            self._vetoed[(s, p)] = self._next_tag
            for x in (s, p):
                tags = self._tags.setdefault(x, [])
                tags.append(self._next_tag)
                del tags[:-MAX_TAGS]
            self.vetoes += 1

    def _drop_tags(self, slots: np.ndarray) -> None:
        """Jobs that ended (or were forgotten) take their vetoes with them; their partners drop the tags."""
        if not self._vetoed:
            return
        gone = set(slots.tolist())
        for (s, p), tag in list(self._vetoed.items()):
            if s in gone or p in gone:
                del self._vetoed[(s, p)]
                for x in (s, p):
                    tags = self._tags.get(x)
                    if tags is not None and tag in tags:
                        tags.remove(tag)
        for x in gone:
            self._tags.pop(x, None)

    def tags(self, slots: np.ndarray) -> np.ndarray:
        """The veto tags of each slot, -1 padded (at most MAX_TAGS, the most recent)."""
        out = np.full((slots.size, MAX_TAGS), -1, dtype=np.int64)
        tagged = [s for s, tags in self._tags.items() if tags]
        if tagged:
            for i in np.flatnonzero(np.isin(slots, tagged)).tolist():
                tags = self._tags[int(slots[i])]
                out[i, : len(tags)] = tags
        return out

    def _noise(self) -> float:
        """Observation noise (log variance) pooled over repeated observations, shrunk to the configured one."""
        return fit.pooled_noise(self._ss, self._dof, self.config.noise)

    def _refit(self, measured: np.ndarray) -> None:
        """The population and family priors from the measured jobs (an EM M-step, bounded influence)."""
        meas = np.flatnonzero(measured)
        self._fit_w[:] = 0.0
        if meas.size == 0:
            return
        m, P = self.m[meas], self.P[meas]
        w = fit.influence_weights(m, self.pop_mu, self.pop_sigma)
        self._fit_w[meas] = w
        self.pop_mu, self.pop_sigma = fit.weighted_fit(m, P, w, self.mu0, self.sigma0, fit.KAPPA_POP,
                                                       fit.KAPPA_POP + self.T)
        F = len(self._family_names)
        if F:
            fam = self.fam[meas]
            sel = fam >= 0
            f, ws = fam[sel], w[sel]
            ms = meas[sel]
            for name, values in (("_fam_a", self.a_m[ms]), ("_fam_b", self.b_m[ms]), ("_fam_sp", self.sp_m[ms])):
                setattr(self, name, np.bincount(f, weights=ws * values, minlength=F))
            self._fam_n = np.bincount(f, weights=ws, minlength=F)

    # ------------------------------------------------------------------------------ estimates
    def measured_types(self, job_id: int) -> np.ndarray:
        return self.cnt[self._slot[int(job_id)]] > 0

    def estimate(self, job_id: int, gpu_type: str, consolidated: bool = True, partner: int | None = None
                 ) -> Estimate:
        """The job's rate on a placement (iterations/s), as of the last refresh (its prior before any)."""
        s = self._slot[int(job_id)]
        t = self.type_index[gpu_type]
        if not self.runnable[s, t]:
            return Estimate(0.0, 0.0, False, "profile")
        log_r = float(self.m[s, t])
        var = float(self.P[s, t, t])
        measured = bool(self.cnt[s, t] > 0)
        if partner is not None:
            p = self._slot[int(partner)]
            lf = self.pair_mu + float(self.a_m[s] + self.b_m[p])
            lf_var = float(self.a_v[s] + self.b_v[p]) + self.pair_var + fit.PAIR_RESIDUAL_SD**2
            e = self._pair_of.get((s, p, t))
            measured = e is not None
            if e is not None:  # this very pair was measured: its own figures, weighed against the model's
                seen = float(self.ps1[e] / self.pc[e]) - log_r
                seen_var = self.tau2 / float(self.pc[e]) + var
                lf = (lf / lf_var + seen / seen_var) / (1.0 / lf_var + 1.0 / seen_var)
                lf_var = 1.0 / (1.0 / lf_var + 1.0 / seen_var)
            log_r += min(max(lf, math.log(self.config.pair_floor)), 0.0)
            var += lf_var
        elif not consolidated:
            log_r += float(self.sp_m[s])
            var += float(self.sp_v[s])
            measured = bool(self.spc[s, t] > 0)
        return Estimate(math.exp(log_r), math.sqrt(var), measured, self._source(s, measured))

    def _source(self, s: int, measured: bool) -> str:
        if measured:
            return "measured"
        if self.profiled[s]:
            return "profile"
        if self.fam[s] >= 0 and self._fam_w[self.fam[s]] > 0:
            return "family"
        if self._fit_w.any():
            return "population"
        return "model"

    def presented(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        """What a scheduler should see for these slots: log-rates per type with the exploration bonus,
        sharing sensitivity and pressure (pair mean included in ``a``), log spread factor, runnable mask,
        which types carry a bonus, and the means without it."""
        cfg = self.config
        m = self.m[slots]
        sd = np.sqrt(np.maximum(np.diagonal(self.P[slots], axis1=1, axis2=2), 0.0))
        cnt = self.cnt[slots]
        ran = cnt.sum(axis=1) + self.spc[slots].sum(axis=1) > 0
        room = self.explored[slots] + self.n[slots] * cfg.probe_seconds <= cfg.explore_budget * self.attained[slots]
        eligible = (ran & room)[:, None] & (cnt == 0) & self.runnable[slots] & (sd > 0.05)
        bonus = np.where(eligible, cfg.explore_bonus * np.minimum(sd, 2 * fit.SHAPE_SD), 0.0)
        # Sharing, the same way: a job never measured next to a partner looks as much better at sharing
        # (as sensitivity and as pressure) as its uncertainty allows, so that one bad first pair cannot
        # pull the population's pair mean under the packing threshold for good (nobody would pair again).
        pair_explore = ran & room & ~self.shared[slots]
        pair_sd = np.sqrt(self.a_v[slots] + self.pair_var)
        pb = np.where(pair_explore, cfg.explore_bonus * np.minimum(pair_sd, fit.PAIR_MEAN_SD), 0.0)
        return {"x": m + bonus, "mean": m, "bonus": bonus > 0, "a": self.a_m[slots] + self.pair_mu + pb,
                "b": self.b_m[slots] + pb, "pair_bonus": pair_explore, "spread": self.sp_m[slots],
                "runnable": self.runnable[slots].copy(), "tags": self.tags(slots)}

    def describe(self, job_id: int) -> dict[str, Any]:
        """Everything known about one job, JSON-safe: per GPU type its rate, sd, measured or prior, and
        its measured partners (what ``tesserae show`` and the dashboard display)."""
        s = self._slot[int(job_id)]
        per_type = {}
        for g, t in self.type_index.items():
            e = self.estimate(job_id, g)
            per_type[g] = {"rate": e.rate, "sd": e.sd, "measured": e.measured, "source": e.source,
                           "observations": int(self.cnt[s, t])}
        partners = []
        for e in self._entries(s, self._partners.get(s), self.pj):
            p = int(self.pp[e])
            alone = float(self.m[s, self.pt[e]])
            partners.append({"partner": int(self.ids[p]), "gpu_type": self.gpu_types[int(self.pt[e])],
                             "observations": int(self.pc[e]),
                             "factor": math.exp(min(float(self.ps1[e] / self.pc[e]) - alone, 0.0))})
        return {"job_id": int(job_id), "num_gpus": int(self.n[s]), "declared_type": self.declared[s],
                "gpu_types": per_type, "partners": partners,
                "sharing": {"sensitivity": float(self.a_m[s]), "pressure": float(self.b_m[s])},
                "spread_factor": math.exp(float(self.sp_m[s])),
                "explored_gpu_seconds": float(self.explored[s]), "gpu_seconds": float(self.attained[s])}

    def counters(self) -> dict[str, Any]:
        return {"observations": self.accepted, "rejected": dict(sorted(self.rejected.items())),
                "rejected_total": int(sum(self.rejected.values())), "stalls": self.stalls,
                "ignored": self.ignored, "noise_sd": math.sqrt(self.tau2), "pair_factor_mean": math.exp(self.pair_mu),
                "families": len(self._family_names), "jobs": int(self.alive.sum()), "vetoed_pairs": self.vetoes}

    # ------------------------------------------------------------------------------ state
    def to_state(self) -> dict[str, Any]:
        """Everything learned, JSON-safe and bounded (see module docstring); posteriors are refitted on load."""
        live = np.flatnonzero(self.alive)
        live = live[np.argsort(self.stamp[live], kind="stable")]
        jobs = []
        for s in live.tolist():
            jobs.append({"id": int(self.ids[s]), "n": int(self.n[s]), "declared": self.declared[s],
                         "run": int(self.run[s]), "finished": bool(self.finished[s]),
                         "cnt": self.cnt[s].tolist(), "s1": self.s1[s].tolist(), "s2": self.s2[s].tolist(),
                         "spc": self.spc[s].tolist(), "sps": self.sps[s].tolist(),
                         "attained": float(self.attained[s]), "explored": float(self.explored[s]),
                         "probes": int(self.probes[s]),
                         "posterior": [*self.m[s].tolist(), *self.P[s].ravel().tolist(), float(self.a_m[s]),
                                       float(self.a_v[s]), float(self.b_m[s]), float(self.b_v[s]),
                                       float(self.sp_m[s]), float(self.sp_v[s]), float(self._fit_w[s])]})
        pairs = [[int(self.ids[self.pj[e]]), int(self.ids[self.pp[e]]), self.gpu_types[int(self.pt[e])],
                  float(self.pc[e]), float(self.ps1[e]), float(self.ps2[e]), float(self.pstall[e])]
                 for e in np.flatnonzero(self.palive)[np.argsort(self.pstamp[self.palive], kind="stable")].tolist()]
        return {"format": STATE_FORMAT, "gpu_types": list(self.gpu_types), "config": asdict(self.config),
                "counters": {"accepted": self.accepted, "stalls": self.stalls, "ignored": self.ignored,
                             "rejected": dict(self.rejected)},
                "noise": [self._ss, self._dof],
                "fits": {"population": [*self.pop_mu.tolist(), *self.pop_sigma.ravel().tolist()],
                         "pair": [self.pair_mu, self.pair_var],
                         "families": [[name, n, float(self._fam_w[f]), float(self._fam_a[f]),
                                       float(self._fam_b[f]), float(self._fam_sp[f]), float(self._fam_n[f])]
                                      for f, (name, n) in enumerate(self._family_names)]},
                "jobs": jobs, "pairs": pairs}

    @classmethod
    def from_state(cls, state: dict[str, Any], prior_model: ThroughputModel | None = None) -> RateEstimator:
        """An estimator from ``to_state``'s output; ValueError when the document is not one."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a learned-estimator state (format {STATE_FORMAT!r} expected)")
        try:
            est = cls(state["gpu_types"], prior_model, LearnedConfig(**state["config"]))
            T = est.T
            c = state["counters"]
            est.accepted, est.stalls, est.ignored = int(c["accepted"]), int(c["stalls"]), int(c["ignored"])
            est.rejected.update({str(k): int(v) for k, v in c["rejected"].items()})
            ss, dof = (float(v) for v in state["noise"])
            if not (math.isfinite(ss) and math.isfinite(dof) and ss >= 0 and dof >= 0):
                raise ValueError("bad noise figures")
            est._ss, est._dof = ss, dof
            for j in state["jobs"]:
                est.register(int(j["id"]), int(j["n"]), j["declared"])
                s = est._slot[int(j["id"])]
                est.run[s] = int(j["run"])
                for name in ("cnt", "s1", "s2", "spc", "sps"):
                    row = np.asarray(j[name], dtype=np.float64)
                    if row.shape != (T,) or not np.isfinite(row).all():
                        raise ValueError(f"job {j['id']}: bad {name}")
                    getattr(est, name)[s] = row
                est.attained[s], est.explored[s] = float(j["attained"]), float(j["explored"])
                est.probes[s] = int(j["probes"])
                post = np.asarray(j["posterior"], dtype=np.float64)
                if post.shape != (T + T * T + 7,) or not np.isfinite(post).all():
                    raise ValueError(f"job {j['id']}: bad posterior")
                est.m[s], est.P[s] = post[:T], post[T:T + T * T].reshape(T, T)
                est.fitted[s] = bool(est.cnt[s].any() or est.spc[s].any())
                (est.a_m[s], est.a_v[s], est.b_m[s], est.b_v[s], est.sp_m[s], est.sp_v[s],
                 est._fit_w[s]) = post[T + T * T:]
                if j["finished"]:
                    est.finish(int(j["id"]))
            for jid, pid, g, count, y1, y2, stalls in state["pairs"]:
                s, p, t = est._slot[int(jid)], est._slot[int(pid)], est.type_index[str(g)]
                values = np.array([count, y1, y2, stalls], dtype=np.float64)
                if not np.isfinite(values).all() or values[0] < 1:
                    raise ValueError(f"pair {jid}-{pid}: bad figures")
                est._add_pair(s, p, t, 0.0)
                e = est._pair_of[(s, p, t)]
                est.pc[e], est.ps1[e], est.ps2[e], est.pstall[e] = (float(v) for v in values)
            fits = state["fits"]
            pop = np.asarray(fits["population"], dtype=np.float64)
            pair = np.asarray(fits["pair"], dtype=np.float64)
            if pop.shape != (T + T * T,) or pair.shape != (2,) or not (np.isfinite(pop).all() and
                                                                       np.isfinite(pair).all()):
                raise ValueError("bad population fits")
            est.pop_mu, est.pop_sigma = pop[:T], pop[T:].reshape(T, T)
            est.pair_mu, est.pair_var = float(pair[0]), float(pair[1])
            for name, n, *values in fits["families"]:
                f = est._families.get((str(name), int(n)))
                v = np.asarray(values, dtype=np.float64)
                if f is None or v.shape != (5,) or not np.isfinite(v).all():
                    raise ValueError(f"family {name!r}: bad fits")
                est._fam_w[f], est._fam_a[f], est._fam_b[f], est._fam_sp[f], est._fam_n[f] = v
            est.tau2 = est._noise()
            est._fit_families(est.tau2)  # the family means, exactly as before: from the members' data
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"learned-estimator state is malformed: {exc!r}") from None
        est._dirty = False  # everything fitted came with the state
        return est


def _safe_rate(model: ThroughputModel, job_type: str, n: int, gpu_type: str, consolidated: bool = True) -> float:
    try:
        r = float(model.rate(job_type, n, gpu_type, consolidated))
    except Exception:  # a table without this job type, count or GPU type
        return 0.0
    return r if math.isfinite(r) and r > 0 else 0.0
