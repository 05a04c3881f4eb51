"""The dashboard mounted on the server's app at ``/ui``: its static files, the redirects to it, login
and logout (``session``, ``login_limits``), the pages (``cluster_pages``, ``job_pages``) and a page
for every other ``/ui`` path. ``tesserae server`` mounts it (``mount_web``) after the API's routes;
the pages read the API (``dashboard.ApiClient``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from tesserae.runtime.controller.loop import Controller
from tesserae.web import admin_pages, cluster_pages, job_pages, queue_pages
from tesserae.web import session as sess
from tesserae.web.assets import STATIC_DIR, STATIC_URL
from tesserae.web.dashboard import Dashboard
from tesserae.web.login_limits import retry_after


def mount_web(app: FastAPI, controller: Controller, info: dict[str, Any]) -> Dashboard:
    """Add the dashboard (``/ui``) and its static files to the server's app."""
    dash = Dashboard(app, controller, info)
    app.mount(STATIC_URL, StaticFiles(directory=str(STATIC_DIR)), name="ui-static")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/cluster", status_code=307)

    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/cluster", status_code=307)

    @app.get("/ui/login", include_in_schema=False)
    def login_form(request: Request, next: str | None = None,
                   expired: Annotated[int, Query(ge=0, le=1)] = 0) -> Response:
        v = dash.visitor(request)
        if v is not None:
            return RedirectResponse(sess.safe_next(next), status_code=303)
        return dash.login_page(request, 200, sess.safe_next(next),
                               "Your session ended; log in again." if expired else None)

    @app.post("/ui/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = await sess.read_form(request)
        target = sess.safe_next(form.get("next"))
        wait = dash.limits.clients.take(request.client.host if request.client else "")
        if wait:
            return dash.login_page(request, 429, target, "Too many login attempts from this address; try again "
                                   f"in {retry_after(wait)} s.", retry=wait)
        if not sess.login_csrf_ok(dash.login_key, request, form):
            return dash.login_page(request, 403, target, "This login form has expired or came from another site: "
                                   "log in again.")
        token = form.get("token", "").strip()
        if not token:
            return dash.login_page(request, 401, target, "Enter your token.")
        who = controller.store.authenticate(token)
        if who is None:
            return dash.login_page(request, 401, target, "That token is not valid: unknown or revoked.")
        wait = dash.limits.users.take(who.user)
        if wait:
            return dash.login_page(request, 429, target, f"Too many logins as {who.user}; try again in "
                                   f"{retry_after(wait)} s.", retry=wait)
        sid = dash.sessions.create(token, who.user)
        response = RedirectResponse(target, status_code=303)
        sess.set_cookie(response, request, sid)
        return response

    @app.post("/ui/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        v = dash.visitor(request)
        form = await sess.read_form(request)
        if v is not None and sess.csrf_ok(v, form):
            dash.sessions.drop(v.sid)
        response = RedirectResponse("/ui/login", status_code=303)
        sess.clear_cookie(response)
        return response

    cluster_pages.register(dash)
    job_pages.register(dash)
    queue_pages.register(dash)
    admin_pages.register(dash)

    @app.api_route("/ui/{rest:path}", methods=["GET", "POST"], include_in_schema=False)
    def not_found(request: Request, rest: str) -> Response:
        v = dash.visitor(request)
        return dash.error(v, 404, f"There is no page at {request.url.path}.")

    return dash
