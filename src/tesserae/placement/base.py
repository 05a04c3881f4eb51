"""The placement protocol, its optional capabilities, the registry, and the free-GPU pool.

A placement policy opens a ``RoundPlacer`` per decision, with the policy's ``Advice`` (its order,
and the GPU types, shares and pairs it advises: ``tesserae.core.advice``). The allocator offers it
jobs in priority order (``try_admit``); the placer says yes (capacity reserved, maybe GPUs chosen
already) or no (the job waits: it does not fit the way this policy insists on). ``pack`` may then
let waiting jobs share admitted jobs' GPUs, and ``finish`` returns the final assignment of every
job that runs: that is the placement's report of what runs, which the scheduler hands back to the
policy. ``PlacementPolicy.honours`` declares which advice a placement follows; the scheduler
refuses a policy whose advice it would ignore. Placement sees only ``core`` types.

Shortcuts a placer or placement may offer are small runtime-checkable protocols, each a method it
has or has not: ``BulkKeeper`` (admit the leading running jobs at once), ``BulkAdmitter`` (the
whole allocator walk in one step), ``Replayable`` (skip a decision whose inputs repeat). Built-in
placers share ``PlacerBase`` (the decision's state and questions about jobs), and those that take
GPUs as they admit, ``PooledPlacer`` (a ``GpuPool``). A placement declares its options as a typed
model (``Options``) and is registered by name (``register``; out-of-tree ones through the
``tesserae.placements`` entry points, see ``tesserae.core.plugins``).
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

import numpy as np
from pydantic import BaseModel, ValidationError

from tesserae.core.advice import Advice, AdviceKind
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.plugins import NoOptions, Registry, RunContext, parse_options
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


#: ``capable``'s memo: (class, capability protocol) -> whether the class has it.
_CAPABLE: dict[tuple[type, type], bool] = {}


def capable(obj: object, capability: type) -> bool:
    """``isinstance(obj, capability)`` for one of the capability protocols below, memoised per class.

    A runtime-checkable protocol's ``isinstance`` walks the protocol's attributes at every call: on
    the allocator's path, twice a decision, that was a tenth of a simulation's time. A capability is
    a method of the placer's class, so the answer holds for every object of the class."""
    key = (type(obj), capability)
    ok = _CAPABLE.get(key)
    if ok is None:
        ok = _CAPABLE[key] = isinstance(obj, capability)
    return ok


@runtime_checkable
class RoundPlacer(Protocol):
    """One decision's placement: what the allocator and the scheduler call, in this order.

    ``try_admit`` in priority order (True: capacity reserved, maybe GPUs chosen already; False: the
    job waits), then ``pack`` (waiting jobs may share admitted jobs' GPUs), then ``finish`` (the
    final assignment of every job that runs: the placement's report of what runs).
    """

    @property
    def free(self) -> int:
        """GPUs still unclaimed: the allocator skips gangs larger than this."""
        ...

    def try_admit(self, row: int) -> bool: ...

    def pack(self, candidates: np.ndarray) -> None:
        """Between the allocator walk and ``finish``: let waiting jobs share admitted jobs' GPUs.

        ``candidates`` are rows in the policy's priority order (admitted ones included).
        """
        ...

    def finish(self) -> dict[int, Assignment]: ...


@runtime_checkable
class BulkKeeper(Protocol):
    """A placer that keeps running jobs in place and can admit a leading run of them at once."""

    def keep_running(self, rows: np.ndarray) -> int:
        """Admit a leading run of ``rows`` (they ran last round, and lead the order) at once.

        Until the first new job in priority order nothing can have taken their GPUs. Returns how many
        of the leading rows it admitted, exactly as ``try_admit`` one by one would have; the
        allocator offers the rest one by one.
        """
        ...


@runtime_checkable
class BulkAdmitter(Protocol):
    """A placer that does the allocator's whole walk (skip and continue) in one step."""

    def admit_in_order(self, rows: np.ndarray) -> None:
        """``try_admit`` of each of ``rows`` in turn (skipping those that do not fit), in one step; the
        result must be exactly that of the loop."""
        ...


@runtime_checkable
class Replayable(Protocol):
    """A placement whose assignments are a function of the order, the advice, the previous assignments
    and the rows' job classes alone (no other state): the scheduler skips a decision whose inputs are
    those of the last one and calls ``repeat_last_round`` instead."""

    def repeat_last_round(self) -> None:
        """Count a skipped decision in the statistics as the last one."""
        ...


class PlacerBase:
    """What every built-in placer keeps for one decision, and the questions they all ask of it."""

    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, advice: Advice | None = None) -> None:
        self.cluster, self.table, self.previous, self.model = cluster, table, previous, model
        self.advice = advice if advice is not None else Advice(np.empty(0, dtype=np.int64))
        self.assigned: dict[int, Assignment] = {}
        self._runnable_cache: dict[tuple[int, int, str | None], tuple[int, ...]] = {}

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
        cache = self._runnable_cache
        ok = cache.get(key)
        if ok is None:
            c, job_type = self.cluster, self.table.types[key[0]]
            ok = tuple(t for t in range(len(c.gpu_types)) if runnable(self.model, job_type, key[1], c.gpu_types[t])
                       and key[2] in (None, c.gpu_types[t]))
            cache[key] = ok
        return ok

    def pack(self, candidates: np.ndarray) -> None:
        """A placement that does not pack leaves the waiting jobs alone."""

    def finish(self) -> dict[int, Assignment]:
        return self.assigned


class PooledPlacer(PlacerBase, ABC):
    """A placer that takes GPUs from a ``GpuPool`` as it admits (every built-in one but Tesserae's)."""

    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, advice: Advice | None = None) -> None:
        super().__init__(cluster, table, previous, model, advice)
        self.pool = GpuPool(cluster)

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

    @abstractmethod
    def try_admit(self, row: int) -> bool:
        """Admit ``row`` (its GPUs reserved or taken) or say it waits."""


class PlacementPolicy(ABC):
    """Base class of a placement: opens a ``RoundPlacer`` per decision (``begin``)."""

    name: ClassVar[str] = ""
    #: Whether it places a job that asks for a GPU type (``JobSpec.gpu_type``) on that type only: the
    #: type-blind placements do (``PlacerBase.runnable_types``); the ones that choose types by
    #: throughput (``tesserae``, ``gavel``) do not, and a job asking for a type is refused there.
    honours_gpu_type: ClassVar[bool] = True
    #: The options it takes, each typed and with a default (``--placement-opt KEY=VALUE``).
    Options: ClassVar[type[BaseModel]] = NoOptions

    @classmethod
    def from_options(cls, options: Any, context: RunContext) -> Self:
        """The placement of these validated ``Options`` in a run of ``context``.

        By default every option is a keyword argument of the constructor of the same name; a placement
        whose constructor differs, or that reads the run's settings (packing, say), says how here.
        """
        return cls(**dict(options))

    @property
    def honours(self) -> AdviceKind:
        """The advice this placement follows (see ``tesserae.core.advice``); NONE by default."""
        return AdviceKind.NONE

    @property
    def packs(self) -> bool:
        """Whether this placement lets jobs share GPUs (``--packing``)."""
        return AdviceKind.PAIRS in self.honours

    @abstractmethod
    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        """The placer of one decision."""

    def summary(self) -> dict[str, Any]:
        return {}


PLACEMENTS: Registry[PlacementPolicy] = Registry("placement", "tesserae.placements", PlacementPolicy,
                                                 "tesserae.placement")
register = PLACEMENTS.register


def placement_names() -> list[str]:
    return PLACEMENTS.names()


def make_placement(name: str, options: Mapping[str, Any] | None = None, context: RunContext | None = None
                   ) -> PlacementPolicy:
    """Build a registered placement from its options (InputError naming the placement and a key it
    lacks); one asked to pack (``context.packing``) must let jobs share GPUs."""
    cls = PLACEMENTS.get(name)
    context = context or RunContext()
    placement = cls.from_options(parse_options("placement", name, cls.Options, options or {}), context)
    if context.packing and not placement.packs:
        packers = ", ".join(n for n in placement_names() if _packs(PLACEMENTS.get(n)))
        raise InputError(f"placement '{name}' does not let jobs share GPUs; --packing needs one that does "
                         f"({packers})", field="packing")
    return placement


def _packs(cls: type[PlacementPolicy]) -> bool:
    """Whether a placement with its default options packs when asked to."""
    try:
        return cls.from_options(cls.Options(), RunContext(packing=True)).packs
    except (ValidationError, InputError):  # an option without a default: say nothing of it
        return False
