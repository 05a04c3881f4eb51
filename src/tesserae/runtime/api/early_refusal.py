"""A request over its user's budget is refused before the server does any work for it (issue 27).

``budgets.charged`` refuses (429) a request of a rate-limited kind once its user's bucket is empty, but
only after FastAPI has routed it, parsed its query, looked its token up in the store (on a worker
thread, through the store's lock) and resolved its dependencies: a flooding user's refusals still took
the server's time from everyone else. Here a pure ASGI middleware answers such a request with the same
429 first, on the event loop, with a dict look-up and a hash: when the request's route is of a
rate-limited kind, its bearer token was refused before (``Budgets.over_budget``: the token's SHA-256
-> its user, recorded by ``charged``) and that user's bucket is still empty (a peek: nothing is taken).
Anything else goes on to the route, which authenticates and charges as before.

This only ever refuses: it never lets a request through that the route would refuse, and never
answers for a token it has not seen authenticated. Revoking a token clears what it knows
(``Budgets.forget_tokens``), so a revoked token meets the 401 again.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from tesserae.runtime.api.budgets import Budgets, bearer_token, retry_after
from tesserae.runtime.store.database import hash_token

#: (method, path) -> the kind of budget the route charges (``charged_routes``).
RouteKinds = dict[tuple[str, str], str]


def charged_routes(routes: list[object]) -> RouteKinds:
    """The routes among ``routes`` that charge a budget (a ``charged`` dependency), by (method, path).
    Only routes without path parameters are listed: a charged route with one is refused by its
    dependency alone."""
    out: RouteKinds = {}
    for route in routes:
        dependant = getattr(route, "dependant", None)
        path = getattr(route, "path", "")
        if dependant is None or "{" in path:
            continue
        kind = _kind_of(dependant)
        if kind is not None:
            for method in getattr(route, "methods", None) or ():
                out[(method, path)] = kind
    return out


def _kind_of(dependant: object) -> str | None:
    todo = [dependant]
    while todo:
        d = todo.pop()
        kind = getattr(getattr(d, "call", None), "budget_kind", None)
        if isinstance(kind, str):
            return kind
        todo.extend(getattr(d, "dependencies", ()))
    return None


class EarlyRefusal:
    """ASGI middleware: see the module docstring. ``routes`` is called once, at the first request (when
    every route has been added), for the charged routes (``charged_routes``)."""

    def __init__(self, app: ASGIApp, budgets: Budgets, routes: Callable[[], RouteKinds]) -> None:
        self.app, self.budgets, self._routes = app, budgets, routes
        self._kinds: RouteKinds | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self._kinds is None:
                self._kinds = self._routes()
            kind = self._kinds.get((scope["method"], scope["path"]))
            if kind is not None and await self._refused(kind, scope, send):
                return
        await self.app(scope, receive, send)

    async def _refused(self, kind: str, scope: Scope, send: Send) -> bool:
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        token = None if header is None else bearer_token(header.decode("latin-1"))
        if token is None:
            return False
        over = self.budgets.over_budget(kind, hash_token(token))
        if over is None:
            return False
        user, wait = over
        body = json.dumps({"detail": self.budgets.refusal(kind, user, wait)}).encode()
        await send({"type": "http.response.start", "status": 429,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"retry-after", retry_after(wait).encode())]})
        await send({"type": "http.response.body", "body": body})
        return True
