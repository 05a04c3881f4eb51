"""A throughput model backed by measured tables (DESIGN §5, points 1 and 2).

Every table reader (Gavel's JSON, Blox's ``norm_speed.csv``, the project's own profile format)
produces a :class:`TableModel`, so the simulator and the scheduler see one behaviour whatever the
source. The tables hold only what was measured; everything ``rate()`` may be asked is derived from
them once, at construction, into flat dicts keyed by tuples, because ``rate()`` sits on the
simulator's hot path (hundreds of thousands of calls per run) and must be one dict lookup.

The model never extrapolates to a job type or GPU count it has not measured: ``rate()`` raises
:class:`InputError` and :meth:`TableModel.check` reports why, so a trace can be validated against
the profile before a simulation starts.
"""

from __future__ import annotations

from collections.abc import Mapping

from tesserae.core.errors import InputError
from tesserae.core.restart import RestartCost
from tesserae.core.throughput import JobProblem, ThroughputModel
from tesserae.profiles.colocation import ColocationTable
from tesserae.profiles.default_model import TIRESIAS_SKEW
from tesserae.profiles.families import model_family
from tesserae.profiles.restart_model import COMMON, RestartSeconds, Tables, builtin_restart_cost

# A table whose GPU type is "*" was measured without naming the GPU (Blox's normalised speeds):
# it answers the same for every GPU type.
ANY_GPU = "*"

# Used only when a table has a consolidated entry but no unconsolidated one for a multi-GPU job:
# unconsolidated = consolidated x this factor. 0.6 is about the median unconsolidated/consolidated
# ratio in Gavel's own table on p100 and v100 for 2-8 GPUs (medians 0.30-0.71; k80 is ~1.0). One-GPU
# jobs cannot be spread, so for them the unconsolidated rate is the consolidated one.
UNCONSOLIDATED_FALLBACK_FACTOR = 0.6

# (job type, GPU count, GPU type, consolidated)
AloneKey = tuple[str, int, str, bool]
# (job type, GPU count, GPU type, consolidated, partner job type, partner GPU count)
PairKey = tuple[str, int, str, bool, str, int]

def tiresias_skew(job_type: str) -> float | None:
    """Tiresias' published skew for the job type's model family, or None when not one of them."""
    return TIRESIAS_SKEW.get(model_family(job_type))


class TableModel(RestartSeconds, ThroughputModel):
    """A ThroughputModel answering from measured tables (see module docstring).

    ``alone`` maps (job type, GPUs, GPU type, consolidated) to iterations/s running alone; 0.0
    means it cannot run there (out of memory). ``pairs`` maps (job type, GPUs, GPU type,
    consolidated, partner type, partner GPUs) to (own rate, partner's rate) while sharing; one
    direction suffices, the other is mirrored. Derived at construction:

    - a missing unconsolidated alone rate of a multi-GPU job = consolidated x
      ``unconsolidated_factor`` (:data:`UNCONSOLIDATED_FALLBACK_FACTOR`); a missing unconsolidated
      pair rate = the consolidated pair rate scaled by the job's unconsolidated/consolidated ratio;
    - a pair where either side's rate is 0.0 cannot share: both sides read 0.0;
    - a measured (job type, GPUs) with no entry on some GPU type of the table reads 0.0 there.

    ``colocation`` carries per-strategy data for large jobs (see :meth:`strategy_for`).
    ``restart`` holds measured restart data per job type; a job type without it gets the built-in
    model's from ``restart_defaults`` (the tables of the system the profile comes from).
    """

    def __init__(self, *, name: str, reference_gpu_type: str, alone: Mapping[AloneKey, float],
                 pairs: Mapping[PairKey, tuple[float, float]] | None = None,
                 memory: Mapping[AloneKey, float] | None = None, skew: Mapping[str, float] | None = None,
                 measured: bool = True, colocation: ColocationTable | None = None,
                 unconsolidated_factor: float = UNCONSOLIDATED_FALLBACK_FACTOR,
                 metadata: Mapping[str, str] | None = None, restart: Mapping[str, RestartCost] | None = None,
                 restart_defaults: Tables = (COMMON,)) -> None:
        self.name = name
        self.measured = measured
        self.reference_gpu_type = reference_gpu_type
        self.alone: dict[AloneKey, float] = {k: float(v) for k, v in alone.items()}
        # A pair where either side is 0.0 does not fit: both sides are stored as 0.0.
        self.pairs: dict[PairKey, tuple[float, float]] = {
            k: (0.0, 0.0) if v[0] <= 0.0 or v[1] <= 0.0 else (float(v[0]), float(v[1]))
            for k, v in (pairs or {}).items()}
        self.memory: dict[AloneKey, float] = dict(memory or {})
        self.explicit_skew: dict[str, float] = dict(skew or {})
        self.colocation = colocation
        self.unconsolidated_factor = unconsolidated_factor
        self.metadata: dict[str, str] = dict(metadata or {})
        self.restart: dict[str, RestartCost] = dict(restart or {})
        self.restart_defaults = tuple(restart_defaults)
        self._build()

    # ----------------------------------------------------------------------------------- derived
    def _build(self) -> None:
        gpu_set = {k[2] for k in self.alone} | {k[2] for k in self.pairs}
        if ANY_GPU in gpu_set and len(gpu_set) > 1:
            raise InputError(f"profile {self.name} mixes GPU type '{ANY_GPU}' (any) with named GPU types")
        self._any_gpu = gpu_set == {ANY_GPU}
        self._gpu_types = sorted(gpu_set)
        known: dict[str, set[int]] = {}
        for jt, n, _g, _c in self.alone:
            known.setdefault(jt, set()).add(n)
        for jt, n, _g, _c, pt, pn in self.pairs:
            known.setdefault(jt, set()).add(n)
            known.setdefault(pt, set()).add(pn)
        self._counts = {jt: sorted(ns) for jt, ns in known.items()}
        self._known = {(jt, n) for jt, ns in known.items() for n in ns}

        rate: dict[AloneKey, float] = {}
        for jt, n in self._known:
            for g in self._gpu_types:
                cons = self.alone.get((jt, n, g, True), 0.0)
                rate[(jt, n, g, True)] = cons
                uncons = self.alone.get((jt, n, g, False))
                if uncons is None:
                    uncons = cons if n == 1 else cons * self.unconsolidated_factor
                rate[(jt, n, g, False)] = uncons
        self._rate = rate

        pair: dict[PairKey, float] = {}
        for (jt, n, g, c, pt, pn), (_own, other) in self.pairs.items():  # mirrored first ...
            pair.setdefault((pt, pn, g, c, jt, n), other)
        for (jt, n, g, c, pt, pn), (own, _other) in self.pairs.items():  # ... measured wins
            pair[(jt, n, g, c, pt, pn)] = own
        for (jt, n, g, c, pt, pn), own in list(pair.items()):
            if c and (jt, n, g, False, pt, pn) not in pair:
                base = rate[(jt, n, g, True)]
                ratio = rate[(jt, n, g, False)] / base if base > 0.0 else 0.0
                pair[(jt, n, g, False, pt, pn)] = own * ratio
        for key, own in list(pair.items()):
            jt, n, g, c, pt, pn = key
            if own <= 0.0 or pair.get((pt, pn, g, c, jt, n), 0.0) <= 0.0:
                pair[key] = 0.0
        self._pair = pair
        self._fits = {(k[0], k[4], k[2]) for k, v in pair.items() if v > 0.0 and k[3]}

        mem_type: dict[str, float] = {}
        mem_count: dict[tuple[str, int], float] = {}
        for (jt, n, _g, _c), gb in self.memory.items():
            mem_type[jt] = max(gb, mem_type.get(jt, gb))
            mem_count[(jt, n)] = max(gb, mem_count.get((jt, n), gb))
        self._mem_type, self._mem_count = mem_type, mem_count
        self._skew = {jt: s for jt in self._counts if (s := tiresias_skew(jt)) is not None}
        self._skew.update(self.explicit_skew)
        self._strategy_factor: dict[tuple, float] = {}

    # ------------------------------------------------------------------------ ThroughputModel API
    def rate(self, job_type: str, num_gpus: int, gpu_type: str, consolidated: bool = True,
             partner: tuple[str, int] | None = None, strategy: str | None = None,
             partner_strategy: str | None = None) -> float:
        """Iterations/s; 0.0 when it cannot run (alone) or cannot share (with ``partner``).

        With ``strategy`` (or ``partner_strategy``) for a job whose profile lists strategies, the
        rate is the one measured for that strategy (``ColocationTable.speed_factor``): the tables'
        own rates assume the best strategy for the context.
        """
        r = self._rate_default(job_type, num_gpus, gpu_type, consolidated, partner)
        if self.colocation is None or (strategy is None and partner_strategy is None) or r <= 0.0:
            return r
        key = (job_type, num_gpus, partner, strategy, partner_strategy)
        f = self._strategy_factor.get(key)
        if f is None:
            f = self._strategy_factor[key] = self.colocation.speed_factor((job_type, num_gpus), partner,
                                                                          strategy, partner_strategy)
        return r * f

    def _rate_default(self, job_type: str, num_gpus: int, gpu_type: str, consolidated: bool,
                      partner: tuple[str, int] | None) -> float:
        if self._any_gpu:
            gpu_type = ANY_GPU
        if partner is None:
            r = self._rate.get((job_type, num_gpus, gpu_type, consolidated))
            if r is None:
                raise self._lookup_error(job_type, num_gpus, gpu_type) or InputError(
                    f"no throughput for job type {job_type!r} on {num_gpus} x {gpu_type}")
            return r
        r = self._pair.get((job_type, num_gpus, gpu_type, consolidated, partner[0], partner[1]))
        if r is None:  # unknown job, partner or GPU type -> error; a pair not measured -> cannot share
            err = self._lookup_error(job_type, num_gpus, gpu_type) or self._lookup_error(*partner, gpu_type)
            if err is not None:
                raise err
            return 0.0
        return r

    def reference_rate(self, job_type: str, num_gpus: int) -> float:
        """Consolidated, alone, on the reference GPU type: converts trace durations into work."""
        return self.rate(job_type, num_gpus, self.reference_gpu_type)

    def skew(self, job_type: str) -> float | None:
        """The profile's skew, else Tiresias' for the model family, else None."""
        s = self._skew.get(job_type)
        return s if s is not None else tiresias_skew(job_type)

    def restart_cost(self, job_type: str) -> RestartCost | None:
        """The profile's measured restart data of the job type, else the built-in model's, else None."""
        cost = self.restart.get(job_type)
        return cost if cost is not None else builtin_restart_cost(job_type, self.restart_defaults)

    def job_types(self) -> list[str]:
        return sorted(self._counts)

    def gpu_types(self) -> list[str]:
        """The GPU types measured; ``['*']`` for a table valid on any GPU type."""
        return list(self._gpu_types)

    # ---------------------------------------------------------------------------- extras
    def gpu_counts(self, job_type: str) -> list[int]:
        """GPU counts measured for ``job_type`` (empty when unknown)."""
        return list(self._counts.get(job_type, []))

    def memory_gb(self, job_type: str, num_gpus: int | None = None) -> float | None:
        """Largest measured per-GPU memory of the job type (for that GPU count if given); None if unknown."""
        if num_gpus is None:
            return self._mem_type.get(job_type)
        return self._mem_count.get((job_type, num_gpus))

    def pair_fits(self, a: str, b: str, gpu_type: str, num_gpus: int | None = None,
                  partner_num_gpus: int | None = None) -> bool:
        """Whether ``a`` and ``b`` can share GPUs of ``gpu_type``: exactly when their pair rate is > 0.

        Without GPU counts: whether some measured counts of the two can share (consolidated).
        """
        if self._any_gpu:
            gpu_type = ANY_GPU
        if num_gpus is None and partner_num_gpus is None:
            return (a, b, gpu_type) in self._fits
        n = num_gpus if num_gpus is not None else partner_num_gpus
        pn = partner_num_gpus if partner_num_gpus is not None else n
        return self._pair.get((a, n, gpu_type, True, b, pn), 0.0) > 0.0  # type: ignore[arg-type]

    def strategy_for(self, job_type: str, num_gpus: int,
                     partner: tuple[str, int] | None = None) -> str | None:
        """The parallelism strategy the rates assume for this job (alone or next to ``partner``).

        None when the table has no strategies for the job (it is launched as is).
        """
        if self.colocation is None:
            return None
        if partner is None:
            best = self.colocation.best_solo_strategy(job_type, num_gpus)
            return None if best is None else best[0]
        pair = self.colocation.best_strategy(job_type, num_gpus, partner[0], partner[1])
        return None if pair is None else pair[0]

    def check(self, job_type: str, num_gpus: int, gpu_type: str | None = None) -> str | None:
        """Why the profile cannot simulate this job, or None when it can.

        Without ``gpu_type``: the job type and GPU count must be measured and the reference rate
        (used to turn a trace's duration into work) must be positive. With ``gpu_type``: the job
        must also be able to run on that GPU type.
        """
        reason = self._unknown(job_type, num_gpus, gpu_type)
        if reason is not None:
            return reason
        if gpu_type is None:
            reason = self._unknown(job_type, num_gpus, self.reference_gpu_type)
            if reason is not None:
                return f"{reason}; it is the reference GPU type, needed to turn durations into work"
            if self.rate(job_type, num_gpus, self.reference_gpu_type) <= 0.0:
                return (f"job type {job_type!r} on {num_gpus} GPUs has no positive throughput on the "
                        f"reference GPU type {self.reference_gpu_type!r} in profile {self.name}")
            return None
        if max(self.rate(job_type, num_gpus, gpu_type, c) for c in (True, False)) <= 0.0:
            return (f"job type {job_type!r} on {num_gpus} GPUs cannot run on {gpu_type!r} "
                    f"in profile {self.name} (out of memory)")
        return None

    def job_problem(self, job_type: str, num_gpus: int) -> JobProblem | None:
        reason = self.check(job_type, num_gpus)
        if reason is None:
            return None
        return JobProblem("job_type" if job_type not in self._counts else "num_gpus", reason)

    def gpu_problem(self, gpu_type: str) -> str | None:
        return None if self._any_gpu else super().gpu_problem(gpu_type)

    def _unknown(self, job_type: str, num_gpus: int, gpu_type: str | None) -> str | None:
        """The reason a lookup cannot be answered at all: unmeasured job type, GPU count or GPU type."""
        if job_type not in self._counts:
            shown = ", ".join(repr(t) for t in self.job_types()[:8])
            more = ", ..." if len(self._counts) > 8 else ""
            return f"job type {job_type!r} is not in profile {self.name} (it has {shown}{more})"
        if (job_type, num_gpus) not in self._known:
            counts = ", ".join(str(n) for n in self._counts[job_type])
            return (f"job type {job_type!r} has no measurement for {num_gpus} GPUs in profile {self.name} "
                    f"(measured: {counts}); the profile does not extrapolate")
        if gpu_type is not None and not self._any_gpu and gpu_type not in self._gpu_types:
            return (f"profile {self.name} has no data for GPU type {gpu_type!r} "
                    f"(it has {', '.join(self._gpu_types)})")
        return None

    def _lookup_error(self, job_type: str, num_gpus: int, gpu_type: str) -> InputError | None:
        reason = self._unknown(job_type, num_gpus, None if gpu_type == ANY_GPU else gpu_type)
        return None if reason is None else InputError(reason)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TableModel):
            return NotImplemented
        return (self.reference_gpu_type, self.measured, self.alone, self.pairs, self.memory,
                self.explicit_skew, self.colocation, self.unconsolidated_factor, self.restart) == (
            other.reference_gpu_type, other.measured, other.alone, other.pairs, other.memory,
            other.explicit_skew, other.colocation, other.unconsolidated_factor, other.restart)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"TableModel(name={self.name!r}, job_types={len(self._counts)}, "
                f"gpu_types={self._gpu_types}, pairs={len(self.pairs)})")
