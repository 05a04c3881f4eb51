"""Queries on the ``tokens`` table for the admins' view: list tokens (never their hashes) and revoke one.

Creating a token and checking one are the store's own (``Store.create_token``, ``authenticate``).
"""

from __future__ import annotations

from typing import Any

from tesserae.runtime.store.database import Store

Row = Any  # a ``sqlite3.Row``: indexed by column name


def listing(store: Store) -> list[Row]:
    """Every token: ``id``, ``user``, ``admin``, ``label``, ``created``, ``revoked`` (oldest first)."""
    return store.query("SELECT id, user, admin, label, created, revoked FROM tokens ORDER BY id")


def revoke(store: Store, token_id: int) -> str:
    """Revoke token ``token_id``: ``revoked``, ``already`` (it was), ``unknown`` (no such token), or
    ``last-admin`` (it is the last admin token not revoked: refused, so an admin can always log in)."""
    with store.tx() as c:
        row = c.execute("SELECT admin, revoked FROM tokens WHERE id=?", (token_id,)).fetchone()
        if row is None:
            return "unknown"
        if row["revoked"]:
            return "already"
        if row["admin"]:
            others = c.execute("SELECT COUNT(*) AS n FROM tokens WHERE admin=1 AND revoked=0 AND id!=?",
                               (token_id,)).fetchone()
            if int(others["n"]) == 0:
                return "last-admin"
        c.execute("UPDATE tokens SET revoked=1 WHERE id=?", (token_id,))
    return "revoked"
