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
the GPU-seconds it has run, and all jobs' together within ``explore_share`` of theirs; within the
same budgets, a job never measured next to a partner gets the bonus on its sharing terms (an
exploratory pair, undone by a veto if it measures badly). A job that has run only next to partners
is shown unable to share until an alone run measures it (its pairs cannot be judged before).

The estimator is one class in four files, one purpose each: the jobs, their slots and the answers
here; taking observations (``learned_observing``); fitting (``learned_fitting``, its arithmetic in
``_learned_fit``); the saved state (``learned_state``); its knobs and constants in ``learned_config``.

The state is JSON-safe and bounded (``to_state``/``from_state``): every active job plus at most
``max_finished`` finished ones (they keep informing the shared fits), each with at most
``max_partners`` partner entries.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from tesserae.core.throughput import ThroughputModel
from tesserae.profiles import _learned_fit as fit
from tesserae.profiles.default_model import DEFAULT_SHARE_FACTOR, DefaultModel
from tesserae.profiles.learned_config import GENERIC, MAX_TAGS, REJECTIONS, STATE_FORMAT, Estimate, LearnedConfig
from tesserae.profiles.learned_fitting import Fitting
from tesserae.profiles.learned_observing import SLOT_BITS, TYPE_BITS, Observing, pair_key
from tesserae.profiles.learned_state import Persistence

__all__ = ["GENERIC", "MAX_TAGS", "REJECTIONS", "STATE_FORMAT", "Estimate", "LearnedConfig", "RateEstimator"]

class RateEstimator(Observing, Fitting, Persistence):
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
        self._pair_of: dict[int, int] = {}  # pair_key(slot, partner's slot, GPU type) -> entry
        # slot -> its pair entries (as the job); an index may be stale (dropped, or reused by another pair):
        # ``_entries`` filters.
        self._partners: dict[int, list[int]] = {}
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
        self._vetoed: dict[tuple[int, int, int], int] = {}  # (slot, slot, GPU type) -> veto tag
        self._tags: dict[int, list[int]] = {}  # slot -> veto tags it carries
        self._next_tag = 0
        self.vetoes = 0
        self._ss = 0.0  # pooled within-entry sum of squares of log-rates (observation noise)
        self._dof = 0.0

    # ------------------------------------------------------------------------------ storage
    def _grow_slots(self, cap: int) -> None:
        T = self.T
        old = getattr(self, "_cap", 0)
        if cap > 1 << SLOT_BITS or T > 1 << TYPE_BITS:
            raise ValueError(f"learned estimator: at most {1 << SLOT_BITS} jobs and {1 << TYPE_BITS} GPU types")
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
                                  ("pstamp", 0, np.int64), ("palive", False, bool), ("pmate", -1, np.int64)):
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
        pop = self._done.popleft
        old = np.fromiter(chain.from_iterable(pop() for _ in range(extra)), np.int64, 2 * extra).reshape(-1, 2)
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
        # Their entry lists in ``_partners`` stay: every read filters them by owner (``_entries``), and the slot's
        # next job filters its list before adding to it, so it never exceeds ``max_partners``.
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
            e = self._pair_of.get(pair_key(s, p, t))
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
        need = self.n[slots] * cfg.probe_seconds
        room = ran & (self.explored[slots] + need <= cfg.explore_budget * self.attained[slots])
        types = (cnt == 0) & self.runnable[slots] & (sd > 0.05)
        # All jobs together: a job starts exploring only while the known jobs' exploration stays within
        # ``explore_share`` of their GPU-time, first come (lowest slot) first served, so that the total is
        # bounded whatever the workload (a job's own budget alone lets a trace of long jobs spend it all).
        wants = room & (types.any(axis=1) | ~self.shared[slots])
        if wants.any():
            live = self.alive
            left = cfg.explore_share * float(self.attained[live].sum()) - float(self.explored[live].sum())
            room = wants & (np.cumsum(np.where(wants, need, 0.0)) <= left)
        else:
            room = wants
        eligible = room[:, None] & types
        bonus = np.where(eligible, cfg.explore_bonus * np.minimum(sd, 2 * fit.SHAPE_SD), 0.0)
        # Sharing, the same way: a job never measured next to a partner looks as much better at sharing
        # (as sensitivity and as pressure) as its uncertainty allows, so that one bad first pair cannot
        # pull the population's pair mean under the packing threshold for good (nobody would pair again).
        pair_explore = room & ~self.shared[slots]
        pair_sd = np.sqrt(self.a_v[slots] + self.pair_var)
        pb = np.where(pair_explore, cfg.explore_bonus * np.minimum(pair_sd, fit.PAIR_MEAN_SD), 0.0)
        # A job that has run only next to partners has no alone rate to judge its pairs against (a veto
        # needs one, ``_veto``): it is shown as unable to share until one alone run has measured it.
        alone_first = self.shared[slots] & ~(cnt > 0).any(axis=1)
        floor = 2.0 * math.log(cfg.pair_floor)
        a = np.where(alone_first, floor, self.a_m[slots] + self.pair_mu + pb)
        b = np.where(alone_first, floor, self.b_m[slots] + pb)
        return {"x": m + bonus, "mean": m, "bonus": bonus > 0, "a": a, "b": b, "pair_bonus": pair_explore,
                "alone_first": alone_first, "spread": self.sp_m[slots],
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

def _safe_rate(model: ThroughputModel, job_type: str, n: int, gpu_type: str, consolidated: bool = True) -> float:
    try:
        r = float(model.rate(job_type, n, gpu_type, consolidated))
    except Exception:  # a table without this job type, count or GPU type
        return 0.0
    return r if math.isfinite(r) and r > 0 else 0.0
