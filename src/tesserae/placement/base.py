"""The placement protocol, the registry, and the free-GPU pool every placement works on.

A placement policy opens a ``RoundPlacer`` per decision, with the policy's ``Advice`` (its order,
and the GPU types, shares and pairs it advises: ``tesserae.core.advice``). The allocator offers it
jobs in priority order (``try_admit``); the placer says yes (capacity reserved, maybe GPUs chosen
already) or no (the job waits: it does not fit the way this policy insists on). ``pack`` may then
let waiting jobs share admitted jobs' GPUs, and ``finish`` returns the final assignment of every
job that runs: that is the placement's report of what runs, which the scheduler hands back to the
policy. ``PlacementPolicy.honours`` declares which advice a placement follows; the scheduler
refuses a policy whose advice it would ignore. Placement sees only ``core`` types.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from tesserae.core.advice import Advice, AdviceKind
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.throughput import ThroughputModel


class GpuPool:
    """Free GPUs as a mask plus per-node free counts, so no decision loops over all GPUs."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.free = np.ones(cluster.num_gpus, dtype=bool)
        self.node_free = cluster.node_num_gpus.copy()
        self.total_free = cluster.num_gpus
        self.free_by_type = np.array([cluster.gpus_by_type[t] for t in cluster.gpu_types], dtype=np.int64)

    def all_free(self, gpus: tuple[int, ...]) -> bool:
        return bool(self.free[list(gpus)].all())

    def take(self, gpus: np.ndarray | tuple[int, ...] | list[int]) -> tuple[int, ...]:
        idx = np.asarray(gpus, dtype=np.int64)
        assert self.free[idx].all(), "placement took a GPU that is not free"
        self.free[idx] = False
        nodes = self.cluster.gpu_node[idx]
        np.subtract.at(self.node_free, nodes, 1)
        np.subtract.at(self.free_by_type, self.cluster.gpu_type[idx], 1)
        self.total_free -= idx.size
        return tuple(np.sort(idx).tolist())

    def release(self, gpus: np.ndarray | tuple[int, ...] | list[int]) -> None:
        idx = np.asarray(gpus, dtype=np.int64)
        assert not self.free[idx].any(), "released a GPU that is already free"
        self.free[idx] = True
        np.add.at(self.node_free, self.cluster.gpu_node[idx], 1)
        np.add.at(self.free_by_type, self.cluster.gpu_type[idx], 1)
        self.total_free += idx.size

    def free_on_node(self, node: int, k: int, mask: np.ndarray | None = None) -> np.ndarray:
        """The lowest ``k`` free GPU ids of a node (optionally also allowed by ``mask``)."""
        lo = int(self.cluster.node_first_gpu[node])
        hi = lo + int(self.cluster.node_num_gpus[node])
        ok = self.free[lo:hi] if mask is None else self.free[lo:hi] & mask[lo:hi]
        return lo + np.flatnonzero(ok)[:k]

    def take_nodes(self, counts: Mapping[int, int] | list[tuple[int, int]], mask: np.ndarray | None = None
                   ) -> tuple[int, ...]:
        """Take ``k`` GPUs on each (node, k), lowest free ids first."""
        items = counts.items() if isinstance(counts, Mapping) else counts
        parts = [self.free_on_node(n, k, mask) for n, k in items if k > 0]
        return self.take(np.concatenate(parts) if parts else np.empty(0, dtype=np.int64))


# (job type, GPU count, GPU type) -> can it run there at all? Per model object; a pure memo.
_RUNNABLE: weakref.WeakKeyDictionary[Any, dict[tuple[str, int, str], bool]] = weakref.WeakKeyDictionary()


def runnable(model: ThroughputModel, job_type: str, num_gpus: int, gpu_type: str) -> bool:
    """Whether the profile gives the job a positive rate on that GPU type (consolidated, alone).

    Measured profiles do not cover every (job type, GPU count, GPU type): a placement must never
    put a job where its rate is 0, or it would hold GPUs forever.
    """
    try:
        memo = _RUNNABLE.setdefault(model, {})
    except TypeError:  # a model that cannot be weakly referenced: no memo
        memo = {}
    key = (job_type, num_gpus, gpu_type)
    ok = memo.get(key)
    if ok is None:
        try:
            ok = model.rate(job_type, num_gpus, gpu_type, True) > 0
        except InputError:
            ok = False
        memo[key] = ok
    return ok


class RoundPlacer:
    """One decision's placement state. Subclasses implement ``try_admit`` and ``finish``."""

    #: Whether ``keep_running`` admits, in one step, a leading run of the order that ran last round.
    keeps_running_in_bulk: ClassVar[bool] = False
    #: Whether ``admit_in_order`` replaces the allocator's walk of ``try_admit`` calls (with backfill).
    admits_in_bulk: bool = False

    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, advice: Advice | None = None) -> None:
        self.cluster, self.table, self.previous, self.model = cluster, table, previous, model
        self.advice = advice if advice is not None else Advice(np.empty(0, dtype=np.int64))
        self.pool = GpuPool(cluster)
        self.assigned: dict[int, Assignment] = {}

    def job_class(self, row: int) -> tuple[str, int]:
        """(job type, GPU count): what throughputs and pair gains depend on."""
        t = self.table
        return t.types[int(t.type_idx[row])], int(t.num_gpus[row])

    def previous_type(self, row: int) -> int:
        """The GPU type the job ran on last round, -1 if it did not run."""
        a = self.previous.get(row)
        return -1 if a is None else int(self.cluster.gpu_type[a.gpus[0]])

    def runnable_types(self, row: int) -> tuple[int, ...]:
        """GPU types (indices) on which this job has a positive rate, in cluster order; only the type it
        asks for, if it asks for one (``JobSpec.gpu_type``)."""
        key = (int(self.table.type_idx[row]), int(self.table.num_gpus[row]), self.table.gpu_type_req[row])
        cache = self.__dict__.setdefault("_runnable_cache", {})
        ok = cache.get(key)
        if ok is None:
            c, job_type = self.cluster, self.table.types[key[0]]
            ok = tuple(t for t in range(len(c.gpu_types)) if runnable(self.model, job_type, key[1], c.gpu_types[t])
                       and key[2] in (None, c.gpu_types[t]))
            cache[key] = ok
        return ok

    def type_order(self, row: int) -> list[int]:
        """GPU types this job can run on, most free GPUs first (ties: cluster order).

        Type-blind placements use this: they do not prefer fast types, but they do not pile every
        job onto whichever type the cluster spec happens to list first either.
        """
        ok = list(self.runnable_types(row))
        if len(ok) > 1:
            free = self.pool.free_by_type
            ok.sort(key=lambda t: -int(free[t]))
        return ok

    @property
    def free(self) -> int:
        """GPUs still unclaimed: the allocator skips gangs larger than this."""
        return self.pool.total_free

    def try_admit(self, row: int) -> bool:
        raise NotImplementedError

    def keep_running(self, rows: np.ndarray) -> int:
        """Admit a leading run of ``rows`` (they ran last round, and lead the order) at once.

        Only called when ``keeps_running_in_bulk``: such a placer keeps running jobs in place, and
        until the first new job in priority order nothing can have taken their GPUs. Returns how
        many of the leading rows it admitted, exactly as ``try_admit`` one by one would have; the
        allocator offers the rest one by one.
        """
        raise NotImplementedError

    def admit_in_order(self, rows: np.ndarray) -> None:
        """``try_admit`` of each of ``rows`` in turn (skipping those that do not fit), in one step.

        Only called when ``admits_in_bulk``; the result must be exactly that of the loop.
        """
        raise NotImplementedError

    def pack(self, candidates: np.ndarray) -> None:
        """Between the allocator walk and ``finish``: let waiting jobs share admitted jobs' GPUs.

        ``candidates`` are rows in the policy's priority order (admitted ones included). A
        placement that does not pack leaves them alone.
        """

    def finish(self) -> dict[int, Assignment]:
        return self.assigned

    def summary(self) -> dict[str, Any]:
        return {}


class PlacementPolicy:
    name: ClassVar[str] = ""
    #: Whether it places a job that asks for a GPU type (``JobSpec.gpu_type``) on that type only: the
    #: type-blind placements do (``RoundPlacer.runnable_types``); the ones that choose types by
    #: throughput (``tesserae``, ``gavel``) do not, and a job asking for a type is refused there.
    honours_gpu_type: ClassVar[bool] = True

    @property
    def honours(self) -> AdviceKind:
        """The advice this placement follows (see ``tesserae.core.advice``); NONE by default."""
        return AdviceKind.NONE

    #: Whether the assignments are a function of the order, the advice, the previous assignments and
    #: the rows' job classes alone (no other state): the scheduler then skips a decision whose
    #: inputs are those of the last one, and calls ``repeat_last_round`` instead.
    replays_unchanged: ClassVar[bool] = False

    def repeat_last_round(self) -> None:
        """Count a skipped decision in the statistics as the last one (only with ``replays_unchanged``)."""
        raise NotImplementedError

    @property
    def packs(self) -> bool:
        """Whether this placement lets jobs share GPUs (``--packing``)."""
        return AdviceKind.PAIRS in self.honours

    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        raise NotImplementedError

    def summary(self) -> dict[str, Any]:
        return {}


_REGISTRY: dict[str, Callable[..., PlacementPolicy]] = {}


def register(name: str) -> Callable[[type[PlacementPolicy]], type[PlacementPolicy]]:
    def wrap(cls: type[PlacementPolicy]) -> type[PlacementPolicy]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def placement_names() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def make_placement(name: str, **options: Any) -> PlacementPolicy:
    _load_builtin()
    if name not in _REGISTRY:
        raise InputError(f"unknown placement '{name}'; choose one of: {', '.join(sorted(_REGISTRY))}",
                         field="placement")
    factory = _REGISTRY[name]
    from_options = getattr(factory, "from_options", None)
    placement = from_options(**options) if from_options else factory()
    if options.get("packing") and not placement.packs:
        packers = ", ".join(n for n in sorted(_REGISTRY) if _packs(_REGISTRY[n]))
        raise InputError(f"placement '{name}' does not let jobs share GPUs; --packing needs one that does "
                         f"({packers})", field="packing")
    return placement


def _packs(factory: Callable[..., PlacementPolicy]) -> bool:
    from_options = getattr(factory, "from_options", None)
    return (from_options(packing=True) if from_options else factory()).packs


def _load_builtin() -> None:
    import importlib
    import pkgutil

    import tesserae.placement as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name not in ("base",) and not mod.name.startswith("_"):
            importlib.import_module(f"tesserae.placement.{mod.name}")
