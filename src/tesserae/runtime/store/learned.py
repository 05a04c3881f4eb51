"""The learned throughputs of a server (``--throughputs learned``): the estimator's state, kept so that a
controller restart loses nothing learned (issue 25).

One row in ``learned_state``: the estimator's bounded JSON document (``RateEstimator.to_state``, with
the controller's own counters beside it), replaced after every refresh that took new reports, and the
time it was saved. The table is made when the learning part of the controller opens the store, as the
executors' layout tables are (``run_layouts``): a store of a server that never learned has none.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tesserae.runtime.store.database import Store

#: Largest document kept (the estimator bounds its state far below: 4,096 finished jobs, 16 partners each).
MAX_STATE_BYTES = 256 << 20


class LearnedStates:
    """The one-row table of the estimator's state (see module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.execute("CREATE TABLE IF NOT EXISTS learned_state (id INTEGER PRIMARY KEY CHECK (id = 1), "
                      "format TEXT NOT NULL, state TEXT NOT NULL, saved REAL NOT NULL)")

    def save(self, document: dict[str, Any], fmt: str, now: float) -> int:
        """Replace the saved state by ``document`` (JSON-safe: no NaN or infinity); returns its size in bytes."""
        text = json.dumps(document, separators=(",", ":"), allow_nan=False)
        if len(text) > MAX_STATE_BYTES:
            raise ValueError(f"learned state of {len(text)} bytes is over the {MAX_STATE_BYTES}-byte bound")
        self.store.execute("INSERT INTO learned_state (id, format, state, saved) VALUES (1, ?, ?, ?) "
                           "ON CONFLICT(id) DO UPDATE SET format=excluded.format, state=excluded.state, "
                           "saved=excluded.saved", (fmt, text, float(now)))
        return len(text)

    def load(self) -> tuple[str, dict[str, Any], float] | None:
        """(format, document, time saved) of the saved state; None when nothing was saved.
        ValueError when the row is not a JSON object (a damaged store: the caller says so and starts afresh)."""
        row = self.store.one("SELECT format, state, saved FROM learned_state WHERE id=1")
        if row is None:
            return None
        try:
            doc = json.loads(row["state"])
        except (ValueError, RecursionError) as e:
            raise ValueError(f"the saved learned state is not JSON ({e})") from None
        saved = float(row["saved"])
        if not isinstance(doc, dict) or not math.isfinite(saved):
            raise ValueError("the saved learned state is not a JSON object")
        return str(row["format"]), doc, saved

    def clear(self) -> None:
        """Forget what was learned (a new cluster whose GPU types the saved state does not cover)."""
        self.store.execute("DELETE FROM learned_state WHERE id=1")
