"""The Admin page (``/ui/admin``, admin tokens only): the API tokens (create one, shown once; revoke
one) through the API's own routes (``/v1/tokens``); cancelling jobs in bulk by user, name, state and
queue (``/v1/bulk/cancel``: a dry run first, whose count the confirmation shows, then exactly the jobs
it listed); and draining or undraining a node from the cluster page's node health section
(``/v1/nodes/NAME/drain``). Every form carries the session's CSRF value; the API decides what is allowed.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from tesserae.web.dashboard import Dashboard, api_detail
from tesserae.web.session import Visitor, csrf_ok, read_form

#: The bulk form's filters (the API's ``BulkAction`` fields), and the states it offers.
BULK_FILTERS = ("user", "name", "state", "queue")
BULK_STATES = ("queued", "preempted", "running")
#: Most job ids a confirmation carries back (the API's ``MAX_BULK``).
MAX_CONFIRMED = 10_000


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

    @app.post("/ui/admin/bulk", include_in_schema=False)
    async def bulk_cancel(request: Request) -> Response:
        """Step 1 (no ``confirm``): a dry run, and the page again with its count to confirm. Step 2: cancel
        exactly the jobs the dry run listed (``ids``) that still match the filters."""
        v, form, refused = await admin_form(request)
        if refused is not None or v is None:
            return refused or dash.to_login(request)
        selection = {k: form.get(k, "").strip() for k in BULK_FILTERS if form.get(k, "").strip()}
        if not selection:
            v.session.flash.append("No jobs cancelled: give at least one of user, name, state or queue.")
            return RedirectResponse("/ui/admin", status_code=303)
        if form.get("confirm") == "1":
            ids = [int(x) for x in re.findall(r"\d{1,15}", form.get("ids", ""))[:MAX_CONFIRMED]]
            if not ids:
                v.session.flash.append("No jobs cancelled: none matched.")
                return RedirectResponse("/ui/admin", status_code=303)
            r = await api.call("POST", v.session.token, "/v1/bulk/cancel", body={**selection, "ids": ids})
            if r.status_code == 200:
                out = r.json()
                left = len(out["skipped"]) + len(out["denied"]) + len(out["not_found"])
                v.session.flash.append(f"Cancelled {out['count']} job{'s' if out['count'] != 1 else ''}"
                                       + (f"; {left} left alone (they changed meanwhile)." if left else "."))
            else:
                v.session.flash.append(f"No jobs cancelled: {api_detail(r)}")
            return RedirectResponse("/ui/admin", status_code=303)
        r = await api.call("POST", v.session.token, "/v1/bulk/cancel", body={**selection, "dry_run": True})
        if r.status_code != 200:
            v.session.flash.append(f"No jobs cancelled: {api_detail(r)}")
            return RedirectResponse("/ui/admin", status_code=303)
        preview = r.json()
        data = await load(v)
        return dash.render("admin.html", v, page="admin", **data, bulk={
            "selection": selection, "ids": preview["would"], "count": preview["count"], "more": preview["more"]})

    @app.post("/ui/nodes/{node}/{action}", include_in_schema=False)
    async def node_action(request: Request, node: str, action: str) -> Response:
        """Drain or undrain a node (the cluster page's node health buttons); back to the cluster page."""
        v, form, refused = await admin_form(request)
        if refused is not None or v is None:
            return refused or dash.to_login(request)
        if action not in ("drain", "undrain") or len(node) > 253:
            return dash.error(v, 404, "There is no such page.")
        body = {"reason": form.get("reason", "").strip()[:200]} if action == "drain" else None
        r = await api.call("POST", v.session.token, f"/v1/nodes/{quote(node, safe='')}/{action}", body=body)
        if r.status_code == 200:
            out = r.json()
            v.session.flash.append(f"Node {out['node']} " + (
                ("drained: no new job starts there; its running jobs go on." if out["drained"]
                 else "is back in service.") if out["changed"] else
                ("was drained already." if out["drained"] else "was not drained.")))
        else:
            v.session.flash.append(f"Node {node} not {action}ed: {api_detail(r)}")
        return RedirectResponse("/ui/cluster", status_code=303)
