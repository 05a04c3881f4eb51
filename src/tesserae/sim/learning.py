"""The simulator's ``--throughputs`` modes: what the scheduler knows of the jobs' true rates.

- ``oracle`` (the default, and how the papers are reproduced): the scheduler reads the profile,
  which is also what the jobs run at.
- ``learned``: the scheduler decides on a :class:`~tesserae.profiles.learned.RateEstimator`
  (through :class:`~tesserae.scheduler_learned.LearnedScheduler`), which starts from the built-in
  model and learns from what the jobs do; the jobs run at the profile's rates. The estimator sees
  each job's declared type only as a family name (``hints``), never the profile's rows for it.
- ``generic``: no information, every job is the built-in model's ``generic`` job.

With ``rate_variation`` F every job's true rates (and its work, so that the trace's durations
stay) are scaled by its own factor exp(F z), z ~ N(0, 1) drawn from the seed: two jobs of one type
differ, as real ones do by batch size and input pipeline. ``rate_noise`` F multiplies each
observed rate by exp(F z): the relative noise of one progress report.

:class:`LearningObserver` turns what the simulator runs into observations, segment by segment (a
job on one placement between two changes): iterations over the seconds the job computed (its
restart overhead left out), on its GPU type, consolidated or spread, next to its partner. It also
measures what the report needs: the GPU-seconds spent exploring (a run on a GPU type whose
presented rate carried the exploration bonus, or next to a partner while its sharing terms did),
pairs measured slower than the two jobs alone and how soon they were undone, and the estimate's
relative error on each job's current placement by the number of rounds it has run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobSpec
from tesserae.core.plan import Assignment
from tesserae.core.throughput import ThroughputModel
from tesserae.profiles.default_model import DefaultModel
from tesserae.profiles.learned import LearnedConfig, RateEstimator
from tesserae.profiles.learned_classes import ClassModel
from tesserae.scheduler import Scheduler
from tesserae.scheduler_learned import GenericScheduler, LearnedScheduler
from tesserae.sim.interface import STALL_RATE

if TYPE_CHECKING:
    from tesserae.sim.engine import Simulator

Throughputs = Literal["oracle", "learned", "generic"]
MODES: tuple[str, ...] = ("oracle", "learned", "generic")
#: The rounds of a job's life at which the estimate's error is reported (0: its prior).
ERROR_ROUNDS = (0, 1, 2, 3, 5, 10)


def rate_factors(specs: list[JobSpec] | tuple[JobSpec, ...], variation: float, seed: int | None) -> np.ndarray | None:
    """Each job's true-rate factor exp(F z) from the seed (None when F is 0: every factor 1)."""
    if variation <= 0:
        return None
    rng = np.random.default_rng([0 if seed is None else int(seed), 2501])
    return np.exp(variation * rng.standard_normal(len(specs)))


@dataclass
class Learning:
    """One run's information mode: the scheduler's model, how to wrap its scheduler, what the engine needs."""

    mode: str
    truth: ThroughputModel
    scheduler_model: ThroughputModel
    rate_factor: np.ndarray | None
    estimator: RateEstimator | None = None
    observer: LearningObserver | None = None
    scheduler: Scheduler | None = None

    def wrap(self, inner: Scheduler) -> Scheduler:
        """The scheduler the simulator runs: ``inner`` itself (oracle) or its view-taking version."""
        if self.mode == "learned":
            assert self.estimator is not None
            self.scheduler = LearnedScheduler.wrap(inner, self.estimator)
            if self.observer is not None and self.observer.given_alone:
                self.scheduler.on_register = self.observer.give_alone
        elif self.mode == "generic":
            self.scheduler = GenericScheduler.wrap(inner)
        else:
            self.scheduler = inner
        if self.observer is not None:
            assert isinstance(self.scheduler, LearnedScheduler)
            self.observer.scheduler = self.scheduler
        return self.scheduler

    def engine_options(self) -> dict[str, Any]:
        hidden = self.mode != "oracle"
        return {"truth": self.truth if hidden else None, "rate_factor": self.rate_factor,
                "observer": self.observer}

    def summary(self, sim: Simulator | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"throughputs": self.mode}
        if sim is not None and self.mode != "oracle":
            out["stalled_runs"] = sim.stalled_runs
        if self.observer is not None and sim is not None:
            out.update(self.observer.summary(sim))
        return out


def prepare(mode: str, specs: list[JobSpec] | tuple[JobSpec, ...], cluster: Cluster, model: ThroughputModel, *,
            rate_noise: float = 0.0, rate_variation: float = 0.0, hints: bool = True, explore_budget: float = 0.1,
            round_seconds: float = 300.0, seed: int | None = None, given_alone: bool = False) -> Learning:
    """The information mode ``mode`` for a run of ``specs`` on ``cluster`` whose true rates are ``model``."""
    if mode not in MODES:
        raise ValueError(f"throughputs must be one of {', '.join(MODES)}, got {mode!r}")
    factor = rate_factors(specs, rate_variation, seed)
    if mode == "oracle":
        return Learning(mode, model, model, factor)
    prior = DefaultModel()
    if mode == "generic":
        return Learning(mode, model, prior, factor)
    cfg = LearnedConfig(hints=hints, explore_budget=explore_budget, probe_seconds=round_seconds)
    estimator = RateEstimator(cluster.gpu_types, prior, cfg)
    scheduler_model = ClassModel(cluster.gpu_types, prior.reference_gpu_type, pair_floor=cfg.pair_floor)
    observer = LearningObserver(estimator, rate_noise, seed, model if given_alone else None)
    return Learning(mode, model, scheduler_model, factor, estimator, observer)


class LearningObserver:
    """Observations from the simulated runs, and the learning figures of the report (module docstring)."""

    def __init__(self, estimator: RateEstimator, rate_noise: float, seed: int | None,
                 given_alone: ThroughputModel | None = None) -> None:
        if not (math.isfinite(rate_noise) and rate_noise >= 0):
            raise ValueError(f"rate noise must be >= 0, got {rate_noise!r}")
        self.estimator = estimator
        #: The truth whose alone rates the estimator is told at each job's arrival (None: it learns them).
        self.given_alone = given_alone
        self.noise = rate_noise
        self.rng = np.random.default_rng([0 if seed is None else int(seed), 2502])
        self.scheduler: LearnedScheduler | None = None
        self.sim: Simulator | None = None
        self.decisions = 0
        self.explore_gpu_seconds = 0.0
        self.explore_runs = 0
        self.errors: dict[int, list[float]] = {k: [] for k in ERROR_ROUNDS}
        #: The same errors for placements next to a partner only (what packing decisions read).
        self.pair_errors: dict[int, list[float]] = {k: [] for k in ERROR_ROUNDS}
        self.harmful: dict[tuple[int, int], int] = {}  # pair -> decision it started at, still open
        self.undone_rounds: list[int] = []
        self.kept_harmful = 0
        self.harmful_total = 0
        #: GPU-seconds of truly harmful pairs (a pair's GPUs counted once), and of all pairs.
        self.harmful_gpu_seconds = 0.0
        self.paired_gpu_seconds = 0.0
        self.refresh_seconds: list[float] = []
        #: GPU-seconds run by jobs before their first observation (decided on priors alone).
        self.blind_gpu_seconds = 0.0

    def attach(self, sim: Simulator) -> None:
        self.sim = sim
        n = sim.table.n
        self.open = np.zeros(n, dtype=bool)
        self.p0 = np.zeros(n)
        self.x0 = np.zeros(n)
        self.o0 = np.zeros(n)
        self.gtype = np.zeros(n, dtype=np.int64)
        self.cons = np.ones(n, dtype=bool)
        self.partner = np.full(n, -1, dtype=np.int64)
        self.exploring = np.zeros(n, dtype=bool)
        self.rounds_run = np.zeros(n, dtype=np.int64)
        self.observed = np.zeros(n, dtype=bool)  # has any observation of the job been taken yet
        self.pair_since = np.full(n, -1, dtype=np.int64)
        self.harm = np.zeros(n, dtype=bool)  # the row's current pair is truly harmful
        self._node = sim.cluster.gpu_node
        self._node_size = np.array([int(sim.cluster.node_num_gpus[sim.cluster.node_type == ti].max())
                                    for ti in range(len(sim.cluster.gpu_types))])

    # ------------------------------------------------------------------------------ segments
    def begin(self, now: float, rows: np.ndarray, decision: bool) -> None:
        sim = self.sim
        assert sim is not None and self.scheduler is not None
        t, c = sim.table, sim.cluster
        if decision:
            self.decisions += 1
        for r in rows.tolist():
            a = sim.assignments[r]
            g = a.gpus
            ti = int(c.gpu_type[g[0]])
            nodes = np.unique(self._node[list(g)]).size
            partner = -1 if a.partner is None else int(a.partner)
            self.open[r] = True
            self.p0[r], self.x0[r], self.o0[r] = t.progress[r], t.executed[r], t.overhead_left[r]
            self.gtype[r], self.cons[r] = ti, nodes <= math.ceil(len(g) / self._node_size[ti])
            self.exploring[r] = self.scheduler.row_bonus(r, ti)
            if partner >= 0 and self.scheduler.row_pair_bonus(r):
                # An exploratory pair: its GPUs counted once (by the lower row when both carried the bonus).
                self.exploring[r] |= not (partner < r and self.scheduler.row_pair_bonus(partner))
            if partner != self.partner[r]:
                self.harm[r] = partner >= 0 and self._truly_harmful(r, partner)
            if decision:
                if partner != self.partner[r] or self.pair_since[r] < 0:
                    self.pair_since[r] = self.decisions if partner >= 0 else -1
                    if 0 <= partner < r and self._truly_harmful(r, partner):
                        self.harmful[(partner, r)] = self.decisions
                        self.harmful_total += 1
                self._record_error(r, partner)
                self.rounds_run[r] += 1
            self.partner[r] = partner
        if decision:
            self._follow_harmful()

    def end(self, now: float, rows: np.ndarray, decision: bool) -> None:
        sim = self.sim
        assert sim is not None
        rows = rows[self.open[rows]]
        if rows.size == 0:
            return
        t, est = sim.table, self.estimator
        self.open[rows] = False
        d_exec = t.executed[rows] - self.x0[rows]
        computed = d_exec - (self.o0[rows] - t.overhead_left[rows])
        done = t.progress[rows] - self.p0[rows]
        gpu_s = d_exec * t.num_gpus[rows]
        noise = np.exp(self.noise * self.rng.standard_normal(rows.size)) if self.noise > 0 else np.ones(rows.size)
        names = sim.cluster.gpu_types
        for i, r in enumerate(rows.tolist()):
            job = int(t.job_id[r])
            exploring = bool(self.exploring[r])
            if not self.observed[r]:
                self.blind_gpu_seconds += float(gpu_s[i])
            est.note_run(job, float(gpu_s[i]), exploring)
            if self.partner[r] >= 0:  # half each: the pair's GPUs once
                self.paired_gpu_seconds += 0.5 * float(gpu_s[i])
                if self.harm[r]:
                    self.harmful_gpu_seconds += 0.5 * float(gpu_s[i])
            if exploring and gpu_s[i] > 0:
                self.explore_gpu_seconds += float(gpu_s[i])
                self.explore_runs += 1
                est.note_probe(job)
            sec = float(computed[i])
            if sec < est.config.min_seconds:
                continue
            p = int(self.partner[r])
            ti = int(self.gtype[r])
            # A stalled placement (no true rate there: out of memory next to the partner) reports no progress.
            rate = 0.0 if t.rate[r] <= STALL_RATE else float(done[i]) / sec * float(noise[i])
            est.observe(job, rate * sec, sec, names[ti], bool(self.cons[r]),
                        None if p < 0 else int(t.job_id[p]))
            self.observed[r] = True
        if decision:
            # A round's reports are in: the estimator is refitted now, before the decision reads it (the
            # runtime does the same when a round's progress reports have arrived).
            t0 = time.process_time()
            est.refresh()
            self.refresh_seconds.append(time.process_time() - t0)

    def give_alone(self, rows: np.ndarray, table: Any) -> None:
        """``learned_alone = 'given'``: the estimator is told each new job's true alone, consolidated rate on
        every GPU type (one exact observation each, as Gavel's estimator reads them from the oracle); its
        pairs and spread factors it still learns by running them."""
        sim, truth = self.sim, self.given_alone
        assert sim is not None and truth is not None
        est, seconds = self.estimator, est_seconds(self.estimator)
        for r in rows.tolist():
            name, n = table.types[int(table.type_idx[r])], int(table.num_gpus[r])
            for g in sim.cluster.gpu_types:
                try:
                    rate = float(truth.rate(name, n, g)) * float(sim.rate_factor[r])
                except (LookupError, ValueError, InputError):  # a table without this type or count
                    continue
                if math.isfinite(rate) and rate > 0:
                    est.observe(int(table.job_id[r]), rate * seconds, seconds, g)

    # ------------------------------------------------------------------------------ figures
    def _record_error(self, r: int, partner: int) -> None:
        k = int(self.rounds_run[r])
        if k not in self.errors:
            return
        sim = self.sim
        assert sim is not None
        t = sim.table
        true = float(t.rate[r])
        if true <= 1e-6:  # a stalled placement: no rate to compare with
            return
        est = self.estimator
        e = est.estimate(int(t.job_id[r]), sim.cluster.gpu_types[int(self.gtype[r])], bool(self.cons[r]),
                         None if partner < 0 else int(t.job_id[partner]))
        self.errors[k].append(abs(e.rate / true - 1.0))
        if partner >= 0:
            self.pair_errors[k].append(abs(e.rate / true - 1.0))

    def _truly_harmful(self, r: int, p: int) -> bool:
        """Whether the pair runs, in truth, slower than its two jobs alone (the simulator knows; the
        scheduler only sees what the estimator measured)."""
        sim = self.sim
        assert sim is not None
        t = sim.table
        total = 0.0
        for x in (r, p):
            a = sim.assignments[x]
            alone = sim.rates.class_rate(Assignment(x, a.gpus, None, None)) * float(sim.rate_factor[x])
            total += float(t.rate[x]) / alone if alone > STALL_RATE else 0.0
        return total < 1.0

    def _follow_harmful(self) -> None:
        """Truly harmful pairs still together two decisions after they formed are kept; split ones undone."""
        for pair, start in list(self.harmful.items()):
            a, b = pair
            together = self.open[a] and self.partner[a] == b
            if not together:
                self.undone_rounds.append(self.decisions - start)
                del self.harmful[pair]
            elif self.decisions - start >= 2:
                self.kept_harmful += 1
                del self.harmful[pair]

    def summary(self, sim: Simulator) -> dict[str, Any]:
        est = self.estimator
        busy = sim.busy_gpu_seconds
        errors, pair_errors = _error_stats(self.errors), _error_stats(self.pair_errors)
        undone = np.asarray(self.undone_rounds)
        out: dict[str, Any] = {
            "rate_noise": self.noise,
            "learned_hints": est.config.hints,
            "explore_budget": est.config.explore_budget,
            "exploration_gpu_seconds": self.explore_gpu_seconds,
            "exploration_runs": self.explore_runs,
            "exploration_share": self.explore_gpu_seconds / busy if busy > 0 else 0.0,
            "unmeasured_gpu_seconds": self.blind_gpu_seconds,
            "unmeasured_share": self.blind_gpu_seconds / busy if busy > 0 else 0.0,
            "harmful_pairs": self.harmful_total,
            "vetoed_pairs": est.vetoes,
            "harmful_pairs_undone_within_2": int((undone <= 2).sum()) if undone.size else 0,
            "harmful_pairs_kept": self.kept_harmful,
            "harmful_pair_share": self.harmful_gpu_seconds / busy if busy > 0 else 0.0,
            "paired_share": self.paired_gpu_seconds / busy if busy > 0 else 0.0,
            "estimate_error": errors,
            "estimate_error_paired": pair_errors,
            "estimator": est.counters(),
            "estimator_refresh_seconds_mean": float(np.mean(self.refresh_seconds)) if self.refresh_seconds else 0.0,
        }
        for k in (1, 3, 10):
            out[f"estimate_error_median_r{k}"] = errors[str(k)]["median"]
            out[f"estimate_error_p90_r{k}"] = errors[str(k)]["p90"]
        return out


def est_seconds(est: RateEstimator) -> float:
    """The length of a given observation: one exploration run's (a round)."""
    return max(est.config.probe_seconds, est.config.min_seconds)


def _error_stats(errors: dict[int, list[float]]) -> dict[str, dict[str, Any]]:
    """Count, median and p90 of the relative errors at each round of a job's life."""
    out: dict[str, dict[str, Any]] = {}
    for k, v in errors.items():
        arr = np.asarray(v)
        out[str(k)] = {"n": int(arr.size), "median": float(np.median(arr)) if arr.size else None,
                       "p90": float(np.percentile(arr, 90)) if arr.size else None}
    return out
