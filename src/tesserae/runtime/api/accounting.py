"""The API's accounting route: GPU-hours per user over a time window (``accounting``).

A user sees their own usage; an admin sees every user's, or one user's with ``user``.
"""

from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query

from tesserae.runtime.api.budgets import charged
from tesserae.runtime.api.jobs import MAX_TIME, USER_PATTERN
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.store import accounting


def add_accounting_routes(app: FastAPI, controller: Controller, Who: Any) -> None:
    store = controller.store
    Accountant = charged("accounting", Who)

    @app.get("/v1/accounting", tags=["jobs"])
    def usage(who: Accountant,
              since: Annotated[float | None, Query(ge=0, le=MAX_TIME, description="Window start (Unix seconds); "
                                                   "default: the beginning.")] = None,
              until: Annotated[float | None, Query(ge=0, le=MAX_TIME, description="Window end (Unix seconds); "
                                                   "default: now.")] = None,
              user: Annotated[str | None, Query(min_length=1, max_length=100, pattern=USER_PATTERN,
                                                description="Only this user (another user: admins only).")] = None,
              ) -> dict[str, Any]:
        """GPU-hours per user inside the window (the part of each run inside it) and the jobs that ran in it."""
        if since is not None and until is not None and until < since:
            raise HTTPException(422, "'until' is before 'since'")
        if user is not None and not who.admin and user != who.user:
            raise HTTPException(403, f"only an admin token sees another user's usage ({user})")
        return accounting.usage(store, since, until, user if who.admin else who.user)
