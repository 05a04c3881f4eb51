"""The Tesserae placement's shortcuts: faster paths that must give exactly the decisions of the plain ones.

Each is on by default and exists for speed only; switched off, the placement takes the plain path
(``tests/tesserae/test_incremental.py`` runs whole simulations with each one off and compares every
finish time). They are fixed when the placement is built (``TesseraePlacement(shortcuts=...)``) and
handed down to each decision's placer and each GPU type's layout, so that a test can switch one off
for one placement without touching any other.

Skipping a decision whose inputs repeat the last one's is the scheduler's shortcut, not one of
these: the placement allows it by being ``Replayable`` (``placement.base``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shortcuts:
    """Which of the placement's shortcuts are taken (all of them by default)."""

    #: Admit the leading run of jobs that ran last round in one step, where each ran (``keep_running``;
    #: off, it admits none of them and the allocator offers them one by one).
    keep_running_in_bulk: bool = True
    #: On a cluster of one GPU type: admission is a capacity check and nobody's GPU type is looked up.
    one_type: bool = True
    #: On a cluster of one GPU type: the allocator's whole walk is admitted in one step (the placer is a
    #: ``OneTypeTesseraePlacer``, a ``BulkAdmitter``).
    admit_in_bulk: bool = True
    #: A job kept on its GPUs with its partner and strategy keeps its Assignment object as it is.
    reuse_kept: bool = True
    #: Stop building the regrouped layout once its lower bound of moves shows it cannot beat the
    #: anchored one (``_layout.move_bound``).
    prune_regrouped: bool = True
