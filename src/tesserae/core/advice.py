"""The contract between a scheduling policy and a placement (DESIGN §4.4).

A policy *advises*: besides its priority order, it may name a GPU type for each job it runs this
round, give per-type time fractions to be realised over many rounds (Gavel's allocation X, with
the seconds each unit is behind it), and name pairs of jobs that run as one unit on shared GPUs.
A placement *declares* which of these it honours (:class:`AdviceKind`); the scheduler refuses a
combination that cannot honour what the policy advises (:func:`unmet_advice`) when it is built.
What actually ran comes back to the policy as a :class:`RanReport` (types, partners, strategies,
seconds and GPU-seconds of every job of the previous decision), so the policy credits what the
placement did, not what it advised.

Everything here is plain data: the policy fills an :class:`Advice` per decision, the placement
reads it, the scheduler builds the :class:`RanReport` from the placement's assignments and the
job table. No optional hooks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Flag, auto
from functools import cached_property

import numpy as np

#: A job's row, or a pair of rows (smaller first) scheduled as one unit.
Unit = int | tuple[int, int]


class AdviceKind(Flag):
    """Kinds of advice a policy gives and a placement honours."""

    NONE = 0
    #: The GPU type (index into the cluster's types) each job runs on this round.
    GPU_TYPE = auto()
    #: Per-type time fractions of each unit, realised over rounds, with each unit's deficit.
    TYPE_SHARES = auto()
    #: Pairs of jobs that run as one unit on the same GPUs.
    PAIRS = auto()


#: Either kind of type advice: a placement that honours one of them follows the policy's types.
TYPE_ADVICE = AdviceKind.GPU_TYPE | AdviceKind.TYPE_SHARES


def describe(kinds: AdviceKind) -> str:
    names = {AdviceKind.GPU_TYPE: "a GPU type per job", AdviceKind.TYPE_SHARES: "per-type time shares",
             AdviceKind.PAIRS: "pairs on shared GPUs"}
    out = [text for k, text in names.items() if k in kinds]
    return ", ".join(out) if out else "nothing"


def unmet_advice(advises: AdviceKind, honours: AdviceKind, num_gpu_types: int) -> AdviceKind:
    """The advice a placement would ignore; NONE when the combination is sound.

    Type advice is met by either type kind, and trivially on a cluster with one GPU type (every
    placement puts every job on it). Pair advice is met only by a placement that runs pairs.
    """
    missing = AdviceKind.NONE
    if advises & TYPE_ADVICE and not (honours & TYPE_ADVICE) and num_gpu_types > 1:
        missing |= advises & TYPE_ADVICE
    if AdviceKind.PAIRS in advises and AdviceKind.PAIRS not in honours:
        missing |= AdviceKind.PAIRS
    return missing


@dataclass(frozen=True)
class Advice:
    """One decision's advice from the policy to the placement.

    ``order`` is what the policy's ``order`` returned (the rows to admit, first = most important).
    ``overflow``, when the policy gives it, ranks the jobs that do not run alone this round but may
    share GPUs with an admitted one (a policy whose order holds only the units it runs, as Gavel's
    per-type queues); otherwise packing takes them from ``order`` after the admitted rows.
    """

    order: np.ndarray
    kinds: AdviceKind = AdviceKind.NONE
    #: row -> GPU type index the policy runs it on this round.
    gpu_type: Mapping[int, int] = field(default_factory=dict)
    #: unit -> time fraction per GPU type (sums to <= 1), realised over rounds.
    shares: Mapping[Unit, np.ndarray] = field(default_factory=dict)
    #: unit -> seconds behind its shares on each GPU type (negative: ahead), of the time it has run
    #: since they were set: shares / sum(shares) x time run - time run on the type.
    deficit: Mapping[Unit, np.ndarray] = field(default_factory=dict)
    #: (host, partner) pairs that run as one unit this round.
    pairs: Sequence[tuple[int, int]] = ()
    overflow: np.ndarray | None = None
    #: Expected length of the coming round (s): how much one round on a type changes a deficit.
    round_seconds: float = 0.0

    @cached_property
    def _rank(self) -> dict[int, int]:
        return {int(r): i for i, r in enumerate(self.order.tolist())}

    def rank(self, row: int) -> int:
        """Position of ``row`` in the policy's order; rows it did not rank come after all others."""
        return self._rank.get(row, len(self._rank))

    def pack_candidates(self) -> np.ndarray:
        """Rows in priority order that may run, alone or sharing (admitted rows included)."""
        if self.overflow is None or self.overflow.size == 0:
            return self.order
        return np.concatenate([self.order, self.overflow])


@dataclass(frozen=True, slots=True)
class Ran:
    """What one job did between two decisions."""

    gpu_type: int
    partner: int | None
    strategy: str | None
    seconds: float  # wall seconds held (restart overhead included)
    gpu_seconds: float


@dataclass(frozen=True)
class RanReport:
    """What ran between the decision at ``since`` and the one at ``until``, per row.

    Built by the scheduler from the placement's assignments of the earlier decision and the job
    table's executed time: every placement reports the same way, and none can forget to.
    """

    since: float
    until: float
    jobs: Mapping[int, Ran]
