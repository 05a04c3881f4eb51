"""Gavel's round mechanism (stanford-futuredata/gavel ``scheduler/scheduler.py``), shared by the
Gavel baselines: how an allocation X[unit, GPU type] becomes, round after round, who runs where.

A *unit* is a job (its row) or, with packing, a pair of jobs with the same GPU count (a tuple
``(a, b)``, ``a < b``), created when the second of them arrives, as Gavel's ``JobIdPair``.

- **Time received.** ``time[u][t]``: seconds unit u ran on type t since the last allocation reset,
  seeded with half a round on ``add_job`` (pairs with 0) and set to half a round for every unit on
  each reset (``_reset_time_run_so_far``); ``worker_time[t]`` is the sum the shares are taken of.
- **Priority** (``_update_priorities``): X[u, t] / (time[u][t] / worker_time[t]); 0 where X is 0,
  where the unit has no allocation, or where its throughput on t is 0; X * 1e9 where it has not
  received any time yet.
- **Re-solve** only when the set of jobs changed *and* ``reset_interval`` seconds (Gavel's
  ``minimum_time_between_allocation_resets``, 1920 s) have passed since the last reset (or no reset
  happened at a time after 0 yet, as Gavel's ``_last_reset_time == 0`` test). Jobs that arrive in
  between have no allocation: they wait, and if the fill reaches them they hold their slot unused.
- **Fill** (``_schedule_jobs_on_workers_helper``): one queue per GPU type, taken fastest type first;
  each queue sorted by (priority, deficit, allocation), highest first, stable in the order units
  were added; a unit is taken where its type has room and none of its jobs is taken yet.
- **Deficit**, the tie-break: on every reset, += X * (time since the last reset) - time received.

The allocation itself comes from the subclass (``_allocate``). The result of a decision is advice
for the placement (``tesserae.core.advice``): the type of every job that runs, the allocation X of
every unit with each unit's deficit against it (for a placement that realises X over rounds), the
pairs, and, without packing, the units that do not run ranked by priority (the overflow a packing
placement may pair with running jobs). What ran comes back as a ``RanReport`` (``credit``): time is
credited to the type a unit actually ran on, and a pair the placement formed on its own (a job of
a plain policy sharing GPUs) credits each job.

The deficit in the advice is the placement's share of the job: of the time a unit has run since
the reset, X[u, t] / sum_t X[u, t] should have been on type t (whether a unit runs at all this
round is the policy's decision; on which type is what a placement may rearrange).

Allocation error: at each reset and when a unit leaves, sum over types of |time run on the type /
time since the reset - X|, per unit (time run = what the placement reported, without Gavel's
seeds); the summary gives its mean weighted by the time, and its 95th percentile. The type-share
error is the same over the unit's own run time: sum over types of |time on the type / time run -
X / sum X|, the part a placement answers for.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from tesserae.core.advice import Advice, AdviceKind, RanReport, Unit
from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plugins import PluginOptions
from tesserae.core.throughput import ThroughputModel
from tesserae.scheduling.base import SchedulingPolicy

#: Gavel's default ``minimum_time_between_allocation_resets`` (s).
DEFAULT_RESET_INTERVAL = 1920.0
#: Gavel's priority of a unit that has an allocation but has received no time yet, per unit of X.
NEVER_RAN_PRIORITY = 1e9
#: Gavel's hard-coded fill order of its GPU types (``_schedule_jobs_on_workers``), fastest first.
GAVEL_TYPE_ORDER = ("v100", "p100", "k80")

__all__ = ["DEFAULT_RESET_INTERVAL", "GavelRounds", "ResetOptions", "Unit"]


class ResetOptions(PluginOptions):
    """The options every Gavel baseline takes."""

    gavel_reset_interval: float = Field(DEFAULT_RESET_INTERVAL, ge=0, allow_inf_nan=False, description="minimum "
                                        "seconds between allocation re-solves (0 = at every job-set change)")


def _rate(model: ThroughputModel, jt: str, k: int, g: str, partner: tuple[str, int] | None = None) -> float:
    try:
        r = float(model.rate(jt, k, g, True, partner))
    except Exception:
        return 0.0
    return r if r > 0 else 0.0


class GavelRounds(SchedulingPolicy):
    """Gavel's per-type priority queues over an allocation the subclass computes."""

    #: The simulator runs this policy with Gavel's round ending and idle jump (``SimConfig.gavel_rounds``).
    gavel_rounds: ClassVar[bool] = True
    time_slicing: ClassVar[bool] = True
    credits_what_ran: ClassVar[bool] = True
    #: Gavel's FIFO policies never schedule a unit of priority 0.
    skip_zero_priority: ClassVar[bool] = False

    def __init__(self, packing: bool = False, reset_interval: float = DEFAULT_RESET_INTERVAL,
                 round_seconds: float = 360.0) -> None:
        if reset_interval < 0:
            raise ValueError("reset_interval must be >= 0")
        self.packing = packing
        self.reset_interval = float(reset_interval)
        self.half_round = float(round_seconds) / 2.0
        self.cluster: Cluster | None = None
        self.model: ThroughputModel | None = None
        self.types: tuple[str, ...] = ()
        self.cap = np.zeros(0)
        self.fill_order: list[int] = []
        self._alone: dict[tuple[str, int], np.ndarray] = {}
        self._pair: dict[tuple[str, str, int], np.ndarray] = {}
        # Gavel's state, keyed by unit; dicts keep Gavel's insertion order (its tie order).
        self.jobs: dict[int, None] = {}
        self.units: dict[Unit, None] = {}
        self.time: dict[Unit, np.ndarray] = {}
        self.deficit: dict[Unit, np.ndarray] = {}
        self.alloc: dict[Unit, np.ndarray] = {}
        self.worker_time = np.zeros(0)
        self.last_reset = 0.0
        self.need_update = False
        self.resets = 0
        # The clock Gavel credits what ran by.
        self._round_start = 0.0  # Gavel's current_round_start_time: the end of the last busy round
        self._decided_at = 0.0
        self._advised: dict[int, int] = {}
        self._pairs: list[tuple[int, int]] = []
        self._overflow = np.empty(0, dtype=np.int64)
        # Seconds each unit ran on each type since the last reset, as reported (no seeds): the
        # realised allocation, for the allocation error.
        self.realised: dict[Unit, np.ndarray] = {}
        self._epoch_start = 0.0  # when the allocation in force was set (Gavel's last_reset may read 0)
        self.alloc_errors: list[tuple[float, float]] = []  # (error, seconds it was measured over)
        self.mix_errors: list[tuple[float, float]] = []  # (type-share error, seconds run)

    def bind(self, cluster: Cluster, model: ThroughputModel) -> None:
        """The allocation needs the GPU types, their counts and the throughputs."""
        self.cluster, self.model = cluster, model
        self.types = cluster.gpu_types
        self.cap = np.array([cluster.gpus_by_type[t] for t in self.types], dtype=np.float64)
        self.worker_time = np.zeros(len(self.types))
        self.fill_order = []

    # --------------------------------------------------------------------------------- rates
    def alone(self, jt: str, k: int) -> np.ndarray:
        key = (jt, k)
        r = self._alone.get(key)
        if r is None:
            assert self.model is not None
            r = np.array([_rate(self.model, jt, k, g) for g in self.types])
            self._alone[key] = r
        return r

    def pair_rates(self, a: str, b: str, k: int) -> np.ndarray:
        """(T, 2): a's rate next to b and b's next to a on each type (0 where the profile has none)."""
        key = (a, b, k)
        r = self._pair.get(key)
        if r is None:
            assert self.model is not None
            r = np.array([[_rate(self.model, a, k, g, (b, k)), _rate(self.model, b, k, g, (a, k))]
                          for g in self.types]).reshape(len(self.types), 2)
            self._pair[key] = r
        return r

    def unit_runs_on(self, table: JobTable, u: Unit, t: int) -> bool:
        """Gavel's 'don't schedule jobs with 0 throughput' (for a pair: both rates)."""
        if isinstance(u, tuple):
            a, b = u
            k = int(table.num_gpus[a])
            return bool((self.pair_rates(table.job_type(a), table.job_type(b), k)[t] > 0).all())
        return bool(self.alone(table.job_type(u), int(table.num_gpus[u]))[t] > 0)

    def _fastest_first(self, table: JobTable) -> list[int]:
        """Gavel's fill order (v100, p100, k80); other types by mean speed over the trace's job classes."""
        names = self.types
        if all(n in GAVEL_TYPE_ORDER for n in names):
            return sorted(range(len(names)), key=lambda t: GAVEL_TYPE_ORDER.index(names[t]))
        classes = sorted({(table.types[int(ti)], int(k)) for ti, k in zip(table.type_idx.tolist(),
                                                                           table.num_gpus.tolist(), strict=True)})
        speed = np.zeros(len(names))
        for jt, k in classes:
            r = self.alone(jt, k)
            if r.max() > 0:
                speed += r / r.max()
        return sorted(range(len(names)), key=lambda t: (-speed[t], t))

    # --------------------------------------------------------------------------------- decisions
    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        if self.cluster is None:
            raise RuntimeError(f"{self.name} needs the cluster and the throughput model: use it through "
                               "tesserae.scheduler.Scheduler, which binds them")
        if not self.fill_order:
            self.fill_order = self._fastest_first(table)
        alive = set(active.tolist())
        for r in [r for r in self.jobs if r not in alive]:
            self._remove_job(r, now)
        new = sorted((r for r in alive if r not in self.jobs), key=lambda r: (table.submit[r], r))
        for r in new:
            self._add_job(table, r)
        self._maybe_reset(table, now)
        prio = self._priorities(table)
        scheduled = self._fill(table, prio)
        self._decided_at = now
        hosts: list[int] = []
        self._advised, self._pairs = {}, []
        taken: set[int] = set()
        for u, t in scheduled:
            members = u if isinstance(u, tuple) else (u,)
            taken.update(members)
            if u not in self.alloc:
                continue  # Gavel holds the slot but assigns no workers to a unit without allocation
            hosts.append(members[0])
            for m in members:
                self._advised[m] = t
            if isinstance(u, tuple):
                self._pairs.append((u[0], u[1]))
        self._overflow = self._rank_rest(prio, taken) if not self.packing else np.empty(0, dtype=np.int64)
        return np.asarray(hosts, dtype=np.int64)

    def _rank_rest(self, prio: dict[Unit, np.ndarray], taken: set[int]) -> np.ndarray:
        """Jobs with an allocation that do not run this round, by their best priority (then unit order)."""
        rest = [(float(prio[u].max()) if prio[u].size else 0.0, i, u) for i, u in enumerate(self.units)
                if isinstance(u, int) and u not in taken and u in self.alloc]
        rest.sort(key=lambda e: (-e[0], e[1]))
        return np.asarray([u for _, _, u in rest], dtype=np.int64)

    @property
    def advises(self) -> AdviceKind:
        """Gavel's per-type fill names each job's type and realises X over rounds; packed, pairs too."""
        kinds = AdviceKind.GPU_TYPE | AdviceKind.TYPE_SHARES
        return kinds | AdviceKind.PAIRS if self.packing else kinds

    def advice(self, order: np.ndarray) -> Advice:
        shares: dict[Unit, np.ndarray] = {}
        deficit: dict[Unit, np.ndarray] = {}
        for u, a in self.alloc.items():
            if u in self.units:
                total = float(a.sum())
                got = self.realised.get(u)
                shares[u] = a
                if total > 0:
                    ran = 0.0 if got is None else float(got.sum())
                    deficit[u] = a / total * ran - (0.0 if got is None else got)
        return Advice(order, self.advises, gpu_type=self._advised, shares=shares, deficit=deficit,
                      pairs=list(self._pairs), overflow=None if self.packing else self._overflow,
                      round_seconds=2.0 * self.half_round)

    def type_preference(self, row: int) -> tuple[str, ...]:
        """The GPU type this decision runs ``row`` on (Gavel's per-type fill)."""
        t = self._advised.get(row)
        return () if t is None else (self.types[t],)

    def pair_preference(self) -> list[tuple[int, int]]:
        """The pairs this decision runs, host first."""
        return self._pairs

    def on_idle(self, now: float) -> bool:
        """Nothing runs and nothing more arrives: Gavel forces a reset (``_last_reset_time = 0``)."""
        if not self.need_update:
            return False
        self.last_reset = 0.0
        return True

    # --------------------------------------------------------------------------------- state
    def _add_job(self, table: JobTable, r: int) -> None:
        T = len(self.types)
        if self.packing:
            k = int(table.num_gpus[r])
            for other in self.jobs:  # Gavel's _populate_job_combination_metadata, in job order
                if int(table.num_gpus[other]) == k:
                    pair = (min(r, other), max(r, other))
                    self.time[pair] = np.zeros(T)
        self.jobs[r] = None
        self.time[r] = np.full(T, self.half_round)
        # _add_to_priorities: the job, then its pairs in the order they were created.
        self.units[r] = None
        self.deficit[r] = np.zeros(T)
        if self.packing:
            for other in list(self.jobs)[:-1]:
                pair = (min(r, other), max(r, other))
                if pair in self.time:
                    self.units[pair] = None
                    self.deficit[pair] = np.zeros(T)
        self.need_update = True

    def _remove_job(self, r: int, now: float) -> None:
        del self.jobs[r]
        for u in [u for u in self.units if u == r or (isinstance(u, tuple) and r in u)]:
            self._note_error(u, now - self._epoch_start)
            del self.units[u]
            self.time.pop(u, None)
            self.deficit.pop(u, None)
            self.realised.pop(u, None)
        self.need_update = True

    def _note_error(self, u: Unit, elapsed: float) -> None:
        """|realised share - X| of a unit over the time since the last reset (see module docstring)."""
        a = self.alloc.get(u)
        if a is None or elapsed <= 0:
            return
        got = self.realised.get(u, np.zeros(len(self.types)))
        self.alloc_errors.append((float(np.abs(got / elapsed - a).sum()), elapsed))
        ran, total = float(got.sum()), float(a.sum())
        if ran > 0 and total > 0:
            self.mix_errors.append((float(np.abs(got / ran - a / total).sum()), ran))

    def _maybe_reset(self, table: JobTable, now: float) -> None:
        elapsed = now - self.last_reset
        if not self.need_update or not (elapsed >= self.reset_interval or self.last_reset == 0):
            return
        # _reset_time_run_so_far: deficits against the old allocation, every unit back to half a round.
        for u in self.units:
            self._note_error(u, now - self._epoch_start)
            a = self.alloc.get(u)
            should = a * elapsed if a is not None else 0.0
            self.deficit[u] += should - (self.time[u] - self.half_round)
            self.time[u] = np.full(len(self.types), self.half_round)
        self.worker_time = np.full(len(self.types), self.half_round * len(self.units))
        self.realised = {}
        self._epoch_start = now
        self.last_reset = now
        self.alloc = self._allocate(table, list(self.jobs), list(self.units))
        self.need_update = False
        self.resets += 1

    def _priorities(self, table: JobTable) -> dict[Unit, np.ndarray]:
        W = self.worker_time
        out: dict[Unit, np.ndarray] = {}
        for u in self.units:
            a = self.alloc.get(u)
            if a is None:
                out[u] = np.zeros(len(self.types))
                continue
            J = self.time[u]
            frac = np.divide(J, W, out=np.zeros_like(J), where=W != 0)
            p = np.where(frac > 0, a / np.where(frac > 0, frac, 1.0), a * NEVER_RAN_PRIORITY)
            runs = np.array([self.unit_runs_on(table, u, t) for t in range(len(self.types))])
            out[u] = np.where((a > 0) & runs, p, 0.0)
        return out

    def _fill(self, table: JobTable, prio: dict[Unit, np.ndarray]) -> list[tuple[Unit, int]]:
        left = self.cap.astype(np.int64).copy()
        taken: set[int] = set()
        out: list[tuple[Unit, int]] = []
        zero = np.zeros(len(self.types))
        for t in self.fill_order:
            entries = [(u, prio[u][t], self.deficit[u][t], self.alloc.get(u, zero)[t]) for u in self.units]
            entries.sort(key=lambda e: (e[1], e[2], e[3]), reverse=True)
            for u, p, _, _ in entries:
                if left[t] == 0:
                    break
                members = u if isinstance(u, tuple) else (u,)
                if any(m in taken for m in members) or not self.unit_runs_on(table, u, t):
                    continue
                if self.skip_zero_priority and p <= 0:
                    continue
                k = int(table.num_gpus[members[0]])
                if k > left[t]:
                    continue
                left[t] -= k
                taken.update(members)
                out.append((u, t))
        return out

    def credit(self, report: RanReport) -> None:
        """Gavel's _done_callback: each unit that ran gets its micro-task's time on its type.

        Gavel measures a micro-task from the start of the round, which it takes to be the end of
        the previous busy round: after an idle stretch the first round's time includes it. The
        type is the one the job actually ran on; a pair that is not one of this policy's units
        (a placement paired two jobs of a plain policy) credits each job.
        """
        if not report.jobs:
            return
        gap = self._decided_at - self._round_start
        ran: dict[Unit, tuple[int, float]] = {}
        for r, job in report.jobs.items():
            partner = job.partner
            u: Unit = r
            if partner is not None:
                pair = (min(r, partner), max(r, partner))
                if pair in self.time:
                    u = pair
            t, prev = ran.get(u, (job.gpu_type, 0.0))
            ran[u] = (t, max(prev, job.seconds))
        T = len(self.types)
        for u, (t, delta) in ran.items():
            if u in self.time and delta > 0:
                self.time[u][t] += delta + gap
                self.worker_time[t] += delta + gap
                got = self.realised.get(u)
                if got is None:
                    got = self.realised[u] = np.zeros(T)
                got[t] += delta
        self._round_start = report.until

    # --------------------------------------------------------------------------------- allocation
    def _allocate(self, table: JobTable, jobs: list[int], units: list[Unit]) -> dict[Unit, np.ndarray]:
        """X[unit, type] for the units present at this reset."""
        raise NotImplementedError

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"allocation_resets": self.resets}
        if self.alloc_errors:
            err = np.array(self.alloc_errors)
            out["allocation_error_mean"] = float(np.average(err[:, 0], weights=err[:, 1]))
            out["allocation_error_p95"] = float(np.percentile(err[:, 0], 95))
        if self.mix_errors:
            err = np.array(self.mix_errors)
            out["type_share_error_mean"] = float(np.average(err[:, 0], weights=err[:, 1]))
            out["type_share_error_p95"] = float(np.percentile(err[:, 0], 95))
        return out
