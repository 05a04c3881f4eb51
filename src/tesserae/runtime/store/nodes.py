"""Drained nodes (``tesserae node drain``): kept in the store, so a drain outlives a server restart.

A node is named as its executor names it; a drain names a node that may leave and come back (a Ray
node rejoining), so it is kept by name, not by position in the view. Each change is one
transaction with its event.
"""

from __future__ import annotations

from typing import Any

from tesserae.runtime.store.database import Store

Row = Any  # a ``sqlite3.Row``


def drained(store: Store) -> dict[str, Row]:
    """Every drained node's row (``name``, ``since``, ``by``, ``reason``), by name."""
    return {str(r["name"]): r for r in store.query("SELECT name, since, by, reason FROM drained_nodes ORDER BY name")}


def drain(store: Store, name: str, by: str, reason: str, now: float) -> bool:
    """Drain ``name``; False when it already was (its first drain's time, user and reason stay)."""
    with store.tx() as c:
        added = c.execute("INSERT INTO drained_nodes (name, since, by, reason) VALUES (?, ?, ?, ?) "
                          "ON CONFLICT(name) DO NOTHING", (name, now, by, reason)).rowcount > 0
        if added:
            store.event(None, "node drained", {"node": name, "by": by, "reason": reason}, now)
    return added


def undrain(store: Store, name: str, by: str, now: float) -> bool:
    """Put ``name`` back in service; False when it was not drained."""
    with store.tx() as c:
        removed = c.execute("DELETE FROM drained_nodes WHERE name=?", (name,)).rowcount > 0
        if removed:
            store.event(None, "node undrained", {"node": name, "by": by}, now)
    return removed
