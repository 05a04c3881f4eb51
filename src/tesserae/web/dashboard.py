"""What every page of the dashboard (``/ui``) is made with: the visitor, rendering, errors, and the
in-process API client. Its routes are mounted by ``ui``; the pages are ``cluster_pages`` and
``job_pages``.

Pages read and act through the HTTP API itself, called in-process with the visitor's token
(``ApiClient``): a user sees and may do on a page exactly what the API lets their token see and
do, and new fields of the API (pending reasons, predicted starts) reach the pages as they come.
Pages are rendered on the server (Jinja2, autoescaped); ``static/ui.js`` swaps in the live part
of each page every few seconds and tails logs, with no full reload.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from tesserae.runtime.controller.loop import Controller
from tesserae.web import session as sess
from tesserae.web.login_limits import LoginLimits, retry_after
from tesserae.web.templating import environment

#: Scripts only from our own files; styles may be inline (the grid's colours); nothing external.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
NAV = (("cluster", "Cluster"), ("queue", "Queue"), ("jobs", "Jobs"), ("usage", "Usage"), ("queues", "Queues"))


class ApiError(Exception):
    """The API refused (4xx) or failed: shown as an error page with its status and detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class ApiClient:
    """The app's own HTTP API, called in-process (ASGI) with a visitor's token."""

    def __init__(self, app: FastAPI) -> None:
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://tesserae.local",
                                         timeout=60.0)

    async def call(self, method: str, token: str, path: str, *, body: Any = None, **params: Any) -> httpx.Response:
        return await self._client.request(method, path, params=params or None, json=body,
                                          headers={"Authorization": f"Bearer {token}"})

    async def json(self, token: str, path: str, **params: Any) -> Any:
        r = await self.call("GET", token, path, **params)
        if r.status_code != 200:
            raise ApiError(r.status_code, api_detail(r))
        return r.json()


def api_detail(r: httpx.Response) -> str:
    try:
        return str(r.json().get("detail", r.text))
    except (ValueError, AttributeError):
        return r.text[:500] or f"HTTP {r.status_code}"


@dataclass
class Dashboard:
    """What every page handler needs."""

    app: FastAPI
    controller: Controller
    info: dict[str, Any]
    sessions: sess.Sessions = field(default_factory=sess.Sessions)
    limits: LoginLimits = field(default_factory=LoginLimits)
    #: Signs the login form's CSRF value (``session.login_csrf``); new at each start.
    login_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    api: ApiClient = field(init=False)

    def __post_init__(self) -> None:
        self.api = ApiClient(self.app)

    def visitor(self, request: Request) -> sess.Visitor | None:
        return sess.visitor(request, self.sessions, self.controller.store)

    def has_route(self, path: str, method: str = "POST") -> bool:
        """Whether the API offers a route (hold/release arrive with later issues)."""
        return any(getattr(r, "path", None) == path and method in getattr(r, "methods", ()) for r in self.app.routes)

    def render(self, name: str, v: sess.Visitor | None, *, status: int = 200, page: str = "", **ctx: Any
               ) -> HTMLResponse:
        flash: list[str] = []
        if v is not None and not name.startswith("_"):
            flash, v.session.flash = v.session.flash, []
        html = environment().get_template(name).render(
            who=v.who if v else None, csrf=v.session.csrf if v else "", nav=NAV, page=page, flash=flash,
            server=self.info, **ctx)
        return HTMLResponse(html, status_code=status, headers={"Content-Security-Policy": CSP,
                                                               "Cache-Control": "no-store",
                                                               "X-Content-Type-Options": "nosniff",
                                                               "Referrer-Policy": "same-origin"})

    async def page(self, request: Request, template: str, page: str,
                   load: Callable[[sess.Visitor], Awaitable[dict[str, Any]]]) -> Response:
        """A page, or only its live part (``?live=1``, template ``_NAME``) for ui.js to swap in."""
        v = self.visitor(request)
        if v is None:
            return self.to_login(request)
        try:
            ctx = await load(v)
        except ApiError as e:
            return self.error(v, e.status, e.detail)
        live = request.query_params.get("live") == "1"
        return self.render(f"_{template}" if live else template, v, page=page, **ctx)

    async def relay(self, request: Request, path: str, **params: Any) -> Response:
        """An API answer as JSON for a page's script, with the visitor's token (401 when logged out)."""
        v = self.visitor(request)
        if v is None:
            return JSONResponse({"detail": "log in first"}, status_code=401)
        try:
            return JSONResponse(await self.api.json(v.session.token, path, **params))
        except ApiError as e:
            return JSONResponse({"detail": e.detail}, status_code=e.status)

    def login_page(self, request: Request, status: int, target: str, message: str | None, *,
                   retry: float | None = None) -> HTMLResponse:
        """The login form, with its CSRF value (``session.login_csrf``) and cookie."""
        nonce = sess.login_nonce(request)
        response = self.render("login.html", None, status=status, next=target, message=message,
                               login_csrf=sess.login_csrf(self.login_key, nonce))
        sess.set_login_cookie(response, request, nonce)
        if retry is not None:
            response.headers["Retry-After"] = retry_after(retry)
        return response

    def error(self, v: sess.Visitor | None, status: int, message: str) -> HTMLResponse:
        titles = {401: "Not logged in", 403: "Not yours", 404: "Not found", 409: "Conflict", 422: "Bad request"}
        return self.render("error.html", v, status=status, title=titles.get(status, f"Error {status}"),
                           message=message)

    @staticmethod
    def to_login(request: Request, message: str | None = None) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.headers.get("X-Tesserae-Live"):  # a poll from ui.js: tell it to reload to the login page
            return Response(status_code=401, headers={"X-Tesserae-Login": "1"})
        url = f"/ui/login?next={quote(target, safe='/')}" if target.startswith("/ui/") else "/ui/login"
        if message:
            url += ("&" if "?" in url else "?") + "expired=1"
        return RedirectResponse(url, status_code=303)
