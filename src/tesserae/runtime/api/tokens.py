"""The API's token administration (admins only): list the tokens (``GET /v1/tokens``; never a token
or its hash) and revoke one (``POST /v1/tokens/{id}/revoke``). Creating one is ``POST /v1/tokens``
(``app``). The last admin token that is not revoked cannot be revoked (409), so an admin can always
log in; a revoked token is refused at once, by the API and by the dashboard's sessions.
"""

from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Request
from fastapi import Path as PathParam

from tesserae.runtime.api.auth import require_admin
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.job.files import MAX_INT
from tesserae.runtime.store import tokens

TokenId = Annotated[int, PathParam(ge=1, le=MAX_INT, description="A token's id (from GET /v1/tokens).")]


def add_token_routes(app: FastAPI, controller: Controller, Who: Any) -> None:
    store = controller.store

    @app.get("/v1/tokens", tags=["server"])
    def list_tokens(who: Who) -> dict[str, Any]:
        """Every token: id, user, admin, label, created, revoked (admins only)."""
        require_admin(who, "see or revoke tokens")
        return {"tokens": [{"id": int(r["id"]), "user": r["user"], "admin": bool(r["admin"]), "label": r["label"],
                            "created": float(r["created"]), "revoked": bool(r["revoked"])}
                           for r in tokens.listing(store)]}

    @app.post("/v1/tokens/{token_id}/revoke", tags=["server"],
              responses={409: {"description": "The last admin token that is not revoked."}})
    def revoke_token(token_id: TokenId, who: Who, request: Request) -> dict[str, Any]:
        """Revoke a token (admins only): it stops working at once. Revoking a revoked token is no error."""
        require_admin(who, "see or revoke tokens")
        outcome = tokens.revoke(store, token_id)
        if outcome == "unknown":
            raise HTTPException(404, f"there is no token {token_id}")
        if outcome == "last-admin":
            raise HTTPException(409, f"token {token_id} is the last admin token; create another admin token first")
        request.app.state.budgets.forget_tokens()  # ``early_refusal`` no longer answers for it
        store.event(None, "token-revoked", {"token": token_id, "by": who.user})
        return {"id": token_id, "revoked": True}
