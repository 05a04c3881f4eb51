"""The scheduling-policy protocol, its optional capabilities, and its registry.

A scheduling policy only ORDERS the runnable jobs; the allocator in ``tesserae.allocator`` walks
that order and admits each gang that fits. Policies are registered under the name the CLI and
config files use (``register``; out-of-tree ones through the ``tesserae.policies`` entry points,
see ``tesserae.core.plugins``). A policy declares its options as a typed model (``Options``) and
builds itself from them in ``from_options``: adding a policy with an option is adding one module.
What a policy may offer beyond the protocol is a small runtime-checkable protocol of its own
(``QueueInspect``), never an attribute looked up by name.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

import numpy as np
from pydantic import BaseModel

from tesserae.core.advice import Advice, AdviceKind, RanReport
from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plugins import NoOptions, Registry, RunContext, parse_options
from tesserae.core.throughput import ThroughputModel


class SchedulingPolicy(ABC):
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
    #: Whether it only orders jobs (no LP over the cluster, no advice to the placement): such a policy
    #: may order the jobs inside a tenant queue, and run a scheduler with tenant queues.
    orders_inside_queues: ClassVar[bool] = False
    #: The options it takes, each typed and with a default (``--policy-opt KEY=VALUE``).
    Options: ClassVar[type[BaseModel]] = NoOptions

    @classmethod
    def from_options(cls, options: Any, context: RunContext) -> Self:
        """The policy of these validated ``Options`` in a run of ``context``.

        By default every option is a keyword argument of the constructor of the same name; a policy
        whose constructor differs, or that reads the run's settings, says how here.
        """
        return cls(**dict(options))

    def bind(self, cluster: Cluster, model: ThroughputModel) -> None:
        """The cluster and the throughput model, given once when the scheduler is built; kept by none here."""
        return None

    @abstractmethod
    def order(self, table: JobTable, active: np.ndarray, now: float) -> np.ndarray:
        """The ``active`` rows, most important first."""

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
        return None

    def next_event(self, table: JobTable, active: np.ndarray, running: np.ndarray, now: float) -> float:
        """The next instant at which a priority changes by itself (a demotion, say); inf if none.

        Event-driven simulation decides again at that instant.
        """
        return math.inf

    def on_finish(self, table: JobTable, row: int, now: float) -> None:
        """Hook for policies that learn from completed jobs; most do not."""
        return None

    def on_idle(self, now: float) -> bool:
        """Nothing runs and no job will arrive: True if the policy changed state and should decide again.

        A policy that holds waiting jobs back (Gavel's minimum interval between re-solves) lets
        them go here, as Gavel does when its cluster falls idle.
        """
        return False

    def summary(self) -> dict[str, Any]:
        """Policy-specific figures for the run summary."""
        return {}


@runtime_checkable
class QueueInspect(Protocol):
    """A policy with discrete priority queues (Tiresias' levels) that says where each job stands:
    what the dashboard, ``/v1/queue`` and a waiting job's reason show."""

    num_queues: int
    thresholds: np.ndarray

    def queue_of(self, rows: np.ndarray) -> np.ndarray:
        """Current queue of each row (as of the latest ``order`` call), 0 = the highest."""
        ...


POLICIES: Registry[SchedulingPolicy] = Registry("policy", "tesserae.policies", SchedulingPolicy,
                                                "tesserae.scheduling")
register = POLICIES.register


def policy_names(*, include_oracles: bool = True) -> list[str]:
    """Registered names; without the oracles (which need true job durations) for a real server."""
    names = POLICIES.names()
    return names if include_oracles else [n for n in names if not POLICIES.get(n).oracle]


def queue_policy_names() -> list[str]:
    """The policies that may order jobs inside tenant queues (``orders_inside_queues``)."""
    return [n for n in POLICIES.names() if POLICIES.get(n).orders_inside_queues]


def make_policy(name: str, options: Mapping[str, Any] | None = None, context: RunContext | None = None
                ) -> SchedulingPolicy:
    """Build a registered policy from its options (InputError naming the policy and a key it lacks)."""
    cls = POLICIES.get(name)
    return cls.from_options(parse_options("policy", name, cls.Options, options or {}), context or RunContext())


def by_keys(active: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """Rows of ``active`` sorted by keys, the first key most significant (stable)."""
    if active.size == 0:
        return active
    return active[np.lexsort(tuple(reversed(keys)))]
