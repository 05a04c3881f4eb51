"""The Admin page (``/ui/admin``, admin tokens only): the API tokens (create one, shown once; revoke
one) through the API's own routes (``/v1/tokens``), and bulk actions on jobs where this server's API
offers them. Every form carries the session's CSRF value; the API decides what is allowed.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from tesserae.web.dashboard import Dashboard, api_detail
from tesserae.web.session import Visitor, csrf_ok, read_form


def register(dash: Dashboard) -> None:
    app, api = dash.app, dash.api

    async def load(v: Visitor) -> dict[str, Any]:
        tokens = (await api.json(v.session.token, "/v1/tokens"))["tokens"]
        return {"tokens": sorted(tokens, key=lambda t: (t["revoked"], t["user"], t["id"])), "title": "Admin"}

    @app.get("/ui/admin", include_in_schema=False)
    async def admin_page(request: Request) -> Response:
        v = dash.visitor(request)
        if v is not None and not v.who.admin:
            return dash.error(v, 403, "The admin page is for admin tokens.")
        return await dash.page(request, "admin.html", "admin", load)

    async def admin_form(request: Request) -> tuple[Visitor | None, dict[str, str], Response | None]:
        v = dash.visitor(request)
        if v is None:
            return None, {}, dash.to_login(request)
        form = await read_form(request)
        if not csrf_ok(v, form):
            return v, form, dash.error(v, 403, "This form has expired (no valid CSRF token): reload the page and "
                                               "try again.")
        return v, form, None

    @app.post("/ui/admin/tokens", include_in_schema=False)
    async def create_token(request: Request) -> Response:
        v, form, refused = await admin_form(request)
        if refused is not None or v is None:
            return refused or dash.to_login(request)
        body = {"user": form.get("user", "").strip(), "admin": form.get("admin") == "1",
                "label": form.get("label", "").strip()}
        r = await api.call("POST", v.session.token, "/v1/tokens", body=body)
        if r.status_code == 201:
            made = r.json()
            v.session.flash.append(f"Token for {'admin ' if made['admin'] else ''}user {made['user']} (shown once, "
                                   f"copy it now): {made['token']}")
        else:
            v.session.flash.append(f"No token created: {api_detail(r)}")
        return RedirectResponse("/ui/admin", status_code=303)

    @app.post("/ui/admin/tokens/{token_id}/revoke", include_in_schema=False)
    async def revoke_token(request: Request, token_id: str) -> Response:
        v, _, refused = await admin_form(request)
        if refused is not None or v is None:
            return refused or dash.to_login(request)
        if not token_id.isdigit() or len(token_id) > 15:
            return dash.error(v, 404, f"There is no token '{token_id}'.")
        r = await api.call("POST", v.session.token, f"/v1/tokens/{token_id}/revoke")
        v.session.flash.append(f"Token {token_id} revoked." if r.status_code == 200 else
                               f"Token {token_id} not revoked: {api_detail(r)}")
        return RedirectResponse("/ui/admin", status_code=303)
