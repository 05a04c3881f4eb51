"""The scheduling-policy protocol and its registry.

A scheduling policy only ORDERS the runnable jobs; the allocator in ``tesserae.scheduler`` walks
that order and admits each gang that fits. Policies are registered under the name the CLI and
config files use; adding a policy is adding one module that calls ``register``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from tesserae.core.advice import Advice, AdviceKind, RanReport
from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobTable
from tesserae.core.throughput import ThroughputModel


class SchedulingPolicy:
    """Base class: order rows by priority (first = most important).

    The rest of the protocol has working defaults: ``bind`` (the cluster and throughput model,
    once), ``advises``/``advice`` (what the policy tells the placement besides its order; see
    ``tesserae.core.advice``) and ``credit`` (what actually ran since the previous decision).
    """

    name: ClassVar[str] = ""
    #: Orders with knowledge a real scheduler lacks (true remaining work): labelled as an oracle.
    oracle: ClassVar[bool] = False
    #: Simulated with Gavel's round ending and idle jump by default (the Gavel baselines).
    gavel_rounds: ClassVar[bool] = False
    #: Preempts running jobs by priority round after round (LAS, Tiresias, Gavel, Themis): with restart
    #: costs at or above the round length it thrashes, so the simulator asks for a minimum run quantum.
    time_slicing: ClassVar[bool] = False
    #: Whether ``credit`` uses the report of what ran (building it costs a pass over running jobs).
    credits_what_ran: ClassVar[bool] = False

    def bind(self, cluster: Cluster, model: ThroughputModel) -> None:
        """The cluster and the throughput model, given once when the scheduler is built."""

    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        raise NotImplementedError

    @property
    def advises(self) -> AdviceKind:
        """The kinds of advice this policy gives; a placement must honour them (or be refused)."""
        return AdviceKind.NONE

    def advice(self, order: np.ndarray) -> Advice:
        """Advice for the placement of the decision whose ``order`` was just returned."""
        return Advice(order)

    def credit(self, report: RanReport) -> None:
        """What ran since the previous decision (types, partners, seconds), before ``order``.

        Called only for policies with ``credits_what_ran``.
        """

    def next_event(self, table: JobTable, active: np.ndarray, running: np.ndarray, now: float) -> float:
        """The next instant at which a priority changes by itself (a demotion, say); inf if none.

        Event-driven simulation decides again at that instant.
        """
        return math.inf

    def on_finish(self, table: JobTable, row: int, now: float) -> None:
        """Hook for policies that learn from completed jobs."""

    def on_idle(self, now: float) -> bool:
        """Nothing runs and no job will arrive: True if the policy changed state and should decide again.

        A policy that holds waiting jobs back (Gavel's minimum interval between re-solves) lets
        them go here, as Gavel does when its cluster falls idle.
        """
        return False

    def summary(self) -> dict[str, Any]:
        """Policy-specific figures for the run summary."""
        return {}


_REGISTRY: dict[str, Callable[..., SchedulingPolicy]] = {}


def register(name: str) -> Callable[[type[SchedulingPolicy]], type[SchedulingPolicy]]:
    def wrap(cls: type[SchedulingPolicy]) -> type[SchedulingPolicy]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def policy_names(*, include_oracles: bool = True) -> list[str]:
    """Registered names; without the oracles (which need true job durations) for a real server."""
    _load_builtin()
    return sorted(n for n, f in _REGISTRY.items() if include_oracles or not getattr(f, "oracle", False))


def make_policy(name: str, **options: Any) -> SchedulingPolicy:
    """Build a registered policy; options a policy does not take are ignored (shared CLI flags)."""
    _load_builtin()
    if name not in _REGISTRY:
        raise InputError(f"unknown policy '{name}'; choose one of: {', '.join(sorted(_REGISTRY))}",
                         field="policy")
    factory = _REGISTRY[name]
    from_options = getattr(factory, "from_options", None)
    return from_options(**options) if from_options else factory()


def by_keys(active: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """Rows of ``active`` sorted by keys, the first key most significant (stable)."""
    if active.size == 0:
        return active
    return active[np.lexsort(tuple(reversed(keys)))]


def _load_builtin() -> None:
    # Importing the modules registers them; kept here so the registry has no import cycle.
    import importlib
    import pkgutil

    import tesserae.scheduling as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name != "base":
            importlib.import_module(f"tesserae.scheduling.{mod.name}")
