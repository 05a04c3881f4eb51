"""The Tesserae placement's statistics: what each decision's steps did, summed over a run.

Each step of a decision notes its figures here (the layout: moves, spread jobs, regrouped types,
evictions and its time; packing: pairs formed; type choice: overrides of the policy's types, or the
throughput gained over a type-blind choice). A decision the scheduler skips because its inputs
repeat the last one's (the placement is ``Replayable``) counts as that decision again, except for the
layout time, which it did not spend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class TesseraeStats:
    """Per-run sums of the per-decision figures, and their summary."""

    def __init__(self) -> None:
        self.rounds = 0
        self.migrations: list[int] = []
        self.spread_jobs = 0
        self.regrouped_types = 0
        self.evictions = 0
        self.layout_seconds = 0.0
        self.pairs: list[int] = []
        self.hetero_chosen = 0.0
        self.hetero_blind = 0.0
        self.hetero_greedy = 0.0
        self.type_overrides = 0
        self.typed_units = 0
        #: This decision's notes (method, arguments), repeated for a decision the scheduler skips.
        self._notes: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def begin_round(self) -> None:
        self._notes = []

    def repeat_last_round(self) -> None:
        """Note the last decision's figures again (for a decision that repeats it)."""
        notes, self._notes = self._notes, []
        for note, args in notes:
            note(*args)

    def note_layout(self, moved: int, spread: int, regrouped: int, evictions: int, seconds: float) -> None:
        self._notes.append((self.note_layout, (moved, spread, regrouped, evictions, 0.0)))  # a repeat lays out nothing
        self.rounds += 1
        self.migrations.append(moved)
        self.spread_jobs += spread
        self.regrouped_types += regrouped
        self.evictions += evictions
        self.layout_seconds += seconds

    def note_pairs(self, n: int) -> None:
        self._notes.append((self.note_pairs, (n,)))
        self.pairs.append(n)

    def note_overrides(self, overrides: int, units: int) -> None:
        """Units assigned to another type than the policy advised, out of ``units`` (per-type shares)."""
        self._notes.append((self.note_overrides, (overrides, units)))
        self.type_overrides += overrides
        self.typed_units += units

    def note_hetero(self, chosen: float, blind: float, greedy: float) -> None:
        """Normalised throughput of the chosen types, a type-blind choice and the greedy admission."""
        self._notes.append((self.note_hetero, (chosen, blind, greedy)))
        self.hetero_chosen += chosen
        self.hetero_blind += blind
        self.hetero_greedy += greedy

    def summary(self, packing: bool) -> dict[str, Any]:
        m = np.asarray(self.migrations, dtype=np.float64)
        out: dict[str, Any] = {
            "placement_rounds": self.rounds,
            "migrations_per_round_mean": float(m.mean()) if m.size else 0.0,
            "migrations_per_round_max": int(m.max()) if m.size else 0,
            "spread_job_rounds": self.spread_jobs,
            "regrouped_layouts": self.regrouped_types,
            "evictions": self.evictions,
            "layout_seconds": self.layout_seconds,
        }
        if packing:
            p = np.asarray(self.pairs, dtype=np.float64)
            out["packed_pairs_per_round_mean"] = float(p.mean()) if p.size else 0.0
            out["packed_pairs_per_round_max"] = int(p.max()) if p.size else 0
        if self.hetero_blind > 0:
            out["hetero_throughput_gain"] = self.hetero_chosen / self.hetero_blind
        if self.typed_units:
            out["type_advice_overridden"] = self.type_overrides / self.typed_units
        return out
