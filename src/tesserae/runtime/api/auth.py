"""Who sent a request: the API's one authentication, a FastAPI dependency that every ``/v1`` route takes.

``Authorization: Bearer TOKEN`` names a token of the store (only its hash is kept); the request is
then that token's user, an admin or not (``Principal``). No token, or one unknown or revoked, is a
401 with ``WWW-Authenticate: Bearer``. The dashboard's pages call the API in-process with their
visitor's token, so they pass through the same check.
"""

# No ``from __future__ import annotations``: FastAPI reads the dependency's annotations, which name a local.
from typing import Annotated, Any

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tesserae.runtime.store.database import Principal, Store


def authenticated(store: Store) -> Any:
    """The type of a route parameter that is the request's ``Principal`` (``who: Who``), checked against
    ``store``'s tokens."""
    bearer = HTTPBearer(auto_error=False, description="A Tesserae token (tsr_...).")

    def principal(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
        if creds is None or not creds.credentials:
            raise HTTPException(401, "missing token: send 'Authorization: Bearer TOKEN' (set TESSERAE_TOKEN "
                                     "for the CLI)", headers={"WWW-Authenticate": "Bearer"})
        who = store.authenticate(creds.credentials)
        if who is None:
            raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
        return who

    return Annotated[Principal, Depends(principal)]


def require_admin(who: Principal, action: str) -> None:
    """Refuse (403) a request that only an admin token may make; ``action`` completes "only an admin
    token can ..." so that the refusal says what was refused."""
    if not who.admin:
        raise HTTPException(403, f"only an admin token can {action}")
