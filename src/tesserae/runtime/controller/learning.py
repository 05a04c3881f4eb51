"""Learned throughputs in the runtime (``tesserae server --throughputs learned``, issue 25 item 4).

The scheduler decides on each job's rates as a :class:`~tesserae.profiles.learned.RateEstimator`
learns them from the job's own progress reports, not on a profile (which, with ``--profile``, is
the estimator's prior for jobs whose ``--type`` it knows; ``--type`` is otherwise a family hint).

**Observations.** Every second the reaper reads each running job's ``progress.json`` and hands it
here (``on_report``). A *window* of a run runs from the first report in which the run has advanced
(so its start-up and checkpoint restore are left out) to its latest advance; it is cut, and a new
one begun, when the jobs sharing its GPUs change (so a paired and an alone stretch never mix) and
at a stall (a gap between two advances over ``STALL_FACTOR`` times the window's mean gap and at
least ``STALL_SECONDS``: the gap is left out). At each decision (``before_decision``) and when a run
ends (``on_close``) every window of at least the estimator's ``min_seconds`` becomes one observation,
iterations over computed seconds on the run's GPU type, consolidated or spread, next to its
partner, and the estimator is refreshed and its state saved in the store (``store.learned``): a
restarted controller rebuilds it as it was (``open``).

**Hostile reports.** The file is the job's: a report's time is taken only within the second in
which the controller saw it appear (so a job cannot stretch or shrink its computing time beyond
that), a report written by another run than the current one (its ``run`` field, written by
``tesserae.job``) during this run is stale and refused, iterations going backwards within a run are
refused, and everything else (negative, infinite, absurd or inconsistent rates, rates off their
prior by more than the bounds) is the estimator's to refuse; every refusal is counted by reason
(``counters``) and changes nothing, and a job's reports only ever reach its own estimates (and,
bounded, the shared fits).

**Exploration** is counted: a run whose GPU type carried the estimator's optimism bonus when it was
decided counts its GPU-seconds as exploration until the next decision (``after_decision``).

One lock (``lock``) guards the estimator: the controller's thread feeds and decides under it, the
API's threads read ``describe`` and ``counters`` under it.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.throughput import ThroughputModel
from tesserae.profiles.learned import STATE_FORMAT, LearnedConfig, RateEstimator
from tesserae.profiles.learned_classes import ClassModel
from tesserae.runtime.job.files import ProgressReport
from tesserae.runtime.store.database import Store
from tesserae.runtime.store.learned import LearnedStates
from tesserae.scheduler import Scheduler
from tesserae.scheduler_learned import LearnedScheduler

#: A gap between two advances of a run longer than this many times its mean gap so far, and than
#: ``STALL_SECONDS``, is a stall (a checkpoint being written, a slow input pipeline): left out.
STALL_FACTOR = 4.0
STALL_SECONDS = 2.0
#: How far before a run's start a report may be dated and still be the previous run's leftover file.
LEFTOVER_SLACK = 1.0
#: Reasons the controller refuses a report before the estimator sees it (counted with the estimator's).
RUNTIME_REJECTIONS = ("stale run", "went backwards")
#: The controller's stand-in for 'iterations not given' is larger than this (``prediction``).
UNKNOWN_WORK_MIN = 1e11
#: What the document saved in the store is (the estimator's own state is inside it).
DOCUMENT_FORMAT = "tesserae-runtime-learned-1"


@dataclass
class Window:
    """One run's current stretch of progress (see module docstring)."""

    job_id: int
    run: int
    gpu_type: str
    consolidated: bool
    start_time: float
    sharers: frozenset[int] = frozenset()
    last_it: float | None = None  # the latest iterations read (to see an advance)
    last_read: float | None = None  # when the previous report was read (a new one was written after it)
    t0: float | None = None  # the window: from (t0, p0) ...
    p0: float = 0.0
    t1: float = 0.0  # ... to its latest advance (t1, p1)
    p1: float = 0.0
    advances: int = 0

    def restart(self) -> None:
        self.t0, self.advances = None, 0

    def partner(self) -> int | None:
        return next(iter(self.sharers)) if len(self.sharers) == 1 else None


class RuntimeLearning:
    """The estimator fed from a server's runs (see module docstring)."""

    def __init__(self, store: Store, estimator: RateEstimator, cluster: Cluster,
                 log: Callable[[str], None]) -> None:
        self.store, self.estimator, self.cluster, self.log = store, estimator, cluster, log
        self.saved = LearnedStates(store)
        self.lock = threading.RLock()
        self.windows: dict[int, Window] = {}  # run id -> its window
        self.refused: Counter[str] = Counter()  # controller-side refusals, by reason
        self.exploring: dict[int, bool] = {}  # job id -> whether its GPU type carried a bonus when last decided
        self.explore_gpu_seconds = 0.0
        self.observations = 0  # windows handed to the estimator (taken or refused there)
        self.saves = 0
        self._accounted: dict[int, tuple[int, int, float]] = {}  # run id -> (job, GPUs, noted up to when)
        self._pending = 0  # observations since the last save

    # ------------------------------------------------------------------ making and restoring
    @classmethod
    def open(cls, store: Store, cluster: Cluster, prior: ThroughputModel, round_seconds: float,
             log: Callable[[str], None]) -> RuntimeLearning:
        """The server's learning: as saved in the store when it covers this cluster's GPU types, else new."""
        config = runtime_config(round_seconds)
        saved = LearnedStates(store)
        est = None
        try:
            found = saved.load()
        except ValueError as e:
            log(f"learned throughputs: {e}; starting afresh")
            found = None
        counters: dict[str, Any] = {}
        if found is not None:
            fmt, doc, _ = found
            try:
                if fmt != DOCUMENT_FORMAT or not isinstance(doc.get("estimator"), dict):
                    raise ValueError(f"unknown format {fmt!r}")
                state = dict(doc["estimator"])
                if state.get("format") != STATE_FORMAT:
                    raise ValueError(f"not a learned-estimator state (format {STATE_FORMAT!r} expected)")
                if set(cluster.gpu_types) - set(state.get("gpu_types") or ()):
                    log(f"learned throughputs: the saved rates cover GPU types {state.get('gpu_types')}, not all of "
                        f"{list(cluster.gpu_types)}; starting afresh")
                else:
                    state["config"] = {**dict(state.get("config") or {}), "probe_seconds": config.probe_seconds,
                                       "min_seconds": config.min_seconds}
                    est = RateEstimator.from_state(state, prior)
                    counters = doc.get("runtime") or {}
                    log(f"learned throughputs: {int(est.alive.sum())} job(s) restored from the store")
            except ValueError as e:
                log(f"learned throughputs: the saved state cannot be read ({e}); starting afresh")
                est = None
        if est is None:
            est = RateEstimator(cluster.gpu_types, prior, config)
        out = cls(store, est, cluster, log)
        out._restore_counters(counters)
        return out

    def _restore_counters(self, doc: dict[str, Any]) -> None:
        try:
            refused = {str(k): int(v) for k, v in dict(doc.get("refused") or {}).items() if k in RUNTIME_REJECTIONS}
            seconds = float(doc.get("explore_gpu_seconds", 0.0))
            observations = int(doc.get("observations", 0))
        except (TypeError, ValueError):
            return
        self.refused.update({k: max(0, v) for k, v in refused.items()})
        self.explore_gpu_seconds = seconds if math.isfinite(seconds) and seconds >= 0 else 0.0
        self.observations = max(0, observations)

    def save(self, now: float) -> None:
        """The estimator's state (and these counters) into the store."""
        doc = {"estimator": self.estimator.to_state(),
               "runtime": {"refused": dict(self.refused), "explore_gpu_seconds": self.explore_gpu_seconds,
                           "observations": self.observations}}
        self.saved.save(doc, DOCUMENT_FORMAT, now)
        self.saves += 1
        self._pending = 0

    # ------------------------------------------------------------------ jobs
    def register(self, jobs: Iterable[tuple[int, int, str]]) -> None:
        """Jobs (id, GPUs, declared type) the estimator should know; ``generic`` declares nothing."""
        items = [(j, n, None if t in ("", "generic") else t) for j, n, t in jobs
                 if not self.estimator.known(j)]
        if items:
            ids, gpus, types = zip(*items, strict=True)
            self.estimator.register_many(list(ids), list(gpus), list(types))

    def finish(self, job_ids: Iterable[int]) -> None:
        self.estimator.finish_many(list(job_ids))

    # ------------------------------------------------------------------ reports
    def placement_of(self, gpus: tuple[int, ...]) -> tuple[str, bool] | None:
        """(GPU type, consolidated) of a run on these GPUs of the current cluster; None if unknown there."""
        c = self.cluster
        if not gpus or max(gpus) >= c.num_gpus:
            return None
        types = {int(c.gpu_type[g]) for g in gpus}
        if len(types) != 1:
            return None
        t = types.pop()
        size = int(c.node_num_gpus[c.node_type == t].max())
        nodes = len({int(c.gpu_node[g]) for g in gpus})
        return c.gpu_types[t], nodes <= math.ceil(len(gpus) / size)

    def track(self, runs: Iterable[tuple[int, int, tuple[int, ...], float]], now: float) -> None:
        """The running runs (run id, job id, GPUs, start time): new ones get a window (and the estimator's
        fence: reports of their jobs' older runs are stale from now on); a run whose sharers changed
        has its window cut; windows of runs no longer running are dropped."""
        runs = list(runs)
        holders: dict[int, set[int]] = {}
        for _, job, gpus, _ in runs:
            for g in gpus:
                holders.setdefault(g, set()).add(job)
        seen = set()
        for run, job, gpus, start in runs:
            seen.add(run)
            sharers = frozenset(j for g in gpus for j in holders.get(g, ()) if j != job)
            w = self.windows.get(run)
            if w is None:
                where = self.placement_of(gpus)
                if where is None or not self.estimator.known(job):
                    continue
                self.estimator.start_run(job, run)
                self.windows[run] = Window(job, run, where[0], where[1], start, sharers)
                self._accounted[run] = (job, len(gpus), start)
            elif sharers != w.sharers:
                self._flush(w)
                w.sharers = sharers
                w.restart()
        for run in list(self.windows):
            if run not in seen:  # stopping (or gone): what it computed until now is one more observation
                self._flush(self.windows.pop(run))
                self._note(run, now)
                self._accounted.pop(run, None)

    def on_report(self, run: int, report: ProgressReport, now: float) -> None:
        """A run's progress report, read at ``now``."""
        w = self.windows.get(run)
        if w is None or report.iterations is None:
            return
        it = float(report.iterations)
        prev = w.last_read
        w.last_read = now
        fresh = w.last_it is None or it != w.last_it
        if report.run is not None and report.run != w.run:
            # Written by another run: a leftover of the previous one (dated before this run began) is not a
            # report of this run; one written during this run by another run is stale.
            dated = report.time if report.time is not None else now
            if fresh and dated >= w.start_time - LEFTOVER_SLACK and w.last_it is not None:
                self.refused["stale run"] += 1
            w.last_it = it
            return
        if w.last_it is None:  # first sight in this run: the value left by the restore, not an advance
            w.last_it = it
            return
        if it < w.last_it:
            self.refused["went backwards"] += 1
            w.last_it = it
            w.restart()
            return
        if not fresh:
            return
        w.last_it = it
        # When the job wrote it: its word, but only within the time since the previous read.
        low = max(w.start_time, prev if prev is not None else now - 1.0)
        t = now if report.time is None else min(max(float(report.time), low), now)
        if w.t0 is None:
            w.t0, w.p0, w.t1, w.p1, w.advances = t, it, t, it, 0
            return
        gap = t - w.t1
        if w.advances >= 2 and gap > max(STALL_SECONDS, STALL_FACTOR * (w.t1 - w.t0) / w.advances):
            self._flush(w)
            w.t0, w.p0, w.t1, w.p1, w.advances = t, it, t, it, 0
            return
        w.t1, w.p1 = t, it
        w.advances += 1

    def _flush(self, w: Window, *, keep: bool = False) -> None:
        """The window as one observation if it is long enough; ``keep`` starts the next one at its end."""
        if w.t0 is None or w.t1 - w.t0 < self.estimator.config.min_seconds:
            return
        if len(w.sharers) <= 1:
            self.estimator.observe(w.job_id, w.p1 - w.p0, w.t1 - w.t0, w.gpu_type, w.consolidated, w.partner(),
                                   w.run)
            self.observations += 1
            self._pending += 1
        if keep:
            w.t0, w.p0, w.advances = w.t1, w.p1, 0
        else:
            w.restart()

    def on_close(self, run: int, report: ProgressReport, now: float) -> None:
        """A run ended: its last report, then its last window."""
        self.on_report(run, report, now)
        w = self.windows.pop(run, None)
        self._note(run, now)
        self._accounted.pop(run, None)
        if w is not None:
            self._flush(w)

    def _note(self, run: int, now: float) -> None:
        """The run's GPU-seconds since last noted count as exploration if its job explores."""
        entry = self._accounted.get(run)
        if entry is None:
            return
        job, gpus, since = entry
        self._accounted[run] = (job, gpus, max(since, now))
        if self.exploring.get(job) and now > since:
            seconds = (now - since) * gpus
            self.explore_gpu_seconds += seconds
            self.estimator.note_run(job, seconds, True)

    # ------------------------------------------------------------------ decisions
    def before_decision(self, now: float) -> None:
        """Every window long enough becomes an observation; the estimator is refreshed and saved."""
        for run, w in self.windows.items():
            self._note(run, now)
            self._flush(w, keep=True)
        if self.estimator.dirty:
            self.estimator.refresh()
        if self._pending or self.saves == 0:
            self.save(now)

    def after_decision(self, assignments: dict[int, Assignment], table: JobTable,
                       bonus: Callable[[int, int], bool]) -> None:
        """Which jobs explore until the next decision: those placed on a GPU type that carried the
        estimator's optimism bonus."""
        c = self.cluster
        self.exploring.clear()
        for row, a in assignments.items():
            if not a.gpus or max(a.gpus) >= c.num_gpus:
                continue
            job = int(table.job_id[row])
            self.exploring[job] = bonus(row, int(c.gpu_type[a.gpus[0]]))
            if self.exploring[job]:
                self.estimator.note_probe(job)

    def model_units(self, scheduler: LearnedScheduler) -> Callable[[JobTable], None]:
        """For the predictor: turn a copy of the scheduler's view into the class model's units.

        The class model's rates are relative (1 on a job's best GPU type); a job's iterations are
        divided by its estimated rate on its best type, and its reference rate is the relative one, so
        that the simulated runs last what the learned rates say."""
        view = scheduler.view_table
        assert view is not None
        model = scheduler.model
        # One rate per (class, GPU count) the view holds, not per row: a row for every job ever submitted
        # (100,000 Python calls took 0.4 s of every decision: issue 27).
        key = view.type_idx.astype(np.int64) * (1 << 32) + view.num_gpus.astype(np.int64)
        pairs, where = np.unique(key, return_inverse=True)
        rates = np.array([_positive(model.reference_rate(view.types[int(k) >> 32], int(k) & 0xFFFFFFFF))
                          for k in pairs.tolist()], dtype=float)
        rel = rates[where.reshape(-1)]
        scale = np.where(view.ref_rate > 0, view.ref_rate / rel, 1.0)

        def convert(t: JobTable) -> None:
            known = t.work < UNKNOWN_WORK_MIN
            t.progress /= scale
            t.work = np.where(known, t.work / scale, t.work)
            t.ref_rate = rel.copy()

        return convert

    def rebuild(self, scheduler: LearnedScheduler, cluster: Cluster) -> LearnedScheduler:
        """The learned scheduler on a new cluster (nodes joined or left). The estimator carries on when it
        knows every GPU type of the new cluster; otherwise learning starts afresh (logged), as the class
        keys and the estimator are per GPU type."""
        est = self.estimator
        self.cluster = cluster
        if not set(cluster.gpu_types) <= set(est.gpu_types):
            self.log(f"learned throughputs: GPU types {sorted(set(cluster.gpu_types) - set(est.gpu_types))} are new; "
                     "learning starts afresh")
            est = self.estimator = RateEstimator(cluster.gpu_types, est.prior_model, est.config)
            self.windows.clear()
            self._accounted.clear()
        inner = Scheduler(cluster, scheduler.policy, scheduler.placement, class_model(est), scheduler.config,
                          queues=scheduler.queues)
        return LearnedScheduler.wrap(inner, est)

    # ------------------------------------------------------------------ what the API shows
    def describe(self, job_id: int) -> dict[str, Any] | None:
        """The job's learned rates per GPU type and partner (``RateEstimator.describe``), JSON-safe."""
        with self.lock:
            if not self.estimator.known(job_id):
                return None
            d = self.estimator.describe(job_id)
        return _json_safe(d)

    def counters(self) -> dict[str, Any]:
        with self.lock:
            c = self.estimator.counters()
        rejected = Counter(c.get("rejected") or {})
        rejected.update(self.refused)
        c["rejected"] = dict(sorted(rejected.items()))
        c["rejected_total"] = int(sum(rejected.values()))
        c["exploration_gpu_seconds"] = self.explore_gpu_seconds
        c["windows_observed"] = self.observations
        return _json_safe(c)


def runtime_config(round_seconds: float) -> LearnedConfig:
    """The estimator's knobs on a server: an exploration run lasts a round; windows of at least half a
    round (at most 5 s, at least 1 s) are observations."""
    return LearnedConfig(probe_seconds=max(round_seconds, 1.0), min_seconds=min(5.0, max(1.0, round_seconds / 2)))


def class_model(estimator: RateEstimator) -> ClassModel:
    """The model a learned scheduler is built on: class keys over the estimator's GPU types."""
    return ClassModel(estimator.gpu_types, estimator.prior_model.reference_gpu_type,
                      pair_floor=estimator.config.pair_floor)


def _positive(x: float) -> float:
    return x if math.isfinite(x) and x > 0 else 1.0


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float | np.floating):
        x = float(value)
        return x if math.isfinite(x) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
