"""Issue 30's operator views over HTTP: token administration (API and the admin page, CSRF-checked,
admins only, the last admin token kept), node health in /v1/nodes and on the cluster page, and the
Queues page on a server without tenant queues."""

from __future__ import annotations

import re

import httpx

from support.server import Server
from support.web import form_login


def _browser(s: Server, token: str) -> httpx.Client:
    """A client logged in through the form, as a browser is."""
    c = httpx.Client(base_url=s.url, timeout=20.0)
    s.clients.append(c)
    assert form_login(c, token).status_code == 303
    return c


def _csrf(page: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m, page
    return m.group(1)


def test_tokens_are_listed_and_revoked_by_admins_only(web_server: Server) -> None:
    server = web_server
    admin = server.client()
    carol = admin.post("/v1/tokens", json={"user": "carol", "label": "laptop"}).json()["token"]
    listed = admin.get("/v1/tokens").json()["tokens"]
    mine = [t for t in listed if t["user"] == "carol"]
    assert mine and mine[0]["label"] == "laptop" and not mine[0]["revoked"]
    assert all(set(t) == {"id", "user", "admin", "label", "created", "revoked"} for t in listed)  # no hash
    assert server.client(carol).get("/v1/tokens").status_code == 403
    assert server.client(carol).post(f"/v1/tokens/{mine[0]['id']}/revoke").status_code == 403
    assert admin.post(f"/v1/tokens/{mine[0]['id']}/revoke").json() == {"id": mine[0]["id"], "revoked": True}
    assert server.client(carol).get("/v1/whoami").status_code == 401
    assert admin.post(f"/v1/tokens/{mine[0]['id']}/revoke").status_code == 200  # again: no error
    assert admin.post("/v1/tokens/999999/revoke").status_code == 404
    assert admin.post("/v1/tokens/0/revoke").status_code == 422
    last = [t for t in admin.get("/v1/tokens").json()["tokens"] if t["admin"] and not t["revoked"]]
    assert len(last) == 1
    r = admin.post(f"/v1/tokens/{last[0]['id']}/revoke")
    assert r.status_code == 409 and "last admin token" in r.json()["detail"]


def test_the_admin_page_creates_and_revokes_tokens(web_server: Server) -> None:
    server = web_server
    admin = _browser(server, server.admin_token)
    page = admin.get("/ui/admin")
    assert page.status_code == 200 and 'data-testid="tokens"' in page.text
    r = admin.post("/ui/admin/tokens", data={"csrf": _csrf(page.text), "user": "dave", "label": "<b>x</b>"})
    assert r.status_code == 303
    shown = admin.get("/ui/admin").text
    token = re.search(r"copy it now\): (tsr_[A-Za-z0-9_\-]+)", shown)
    assert token and "&lt;b&gt;x&lt;/b&gt;" in shown and "<b>x</b>" not in shown
    assert server.client(token.group(1)).get("/v1/whoami").json()["user"] == "dave"
    assert token.group(1) not in admin.get("/ui/admin").text  # shown once
    dave = next(t for t in server.client().get("/v1/tokens").json()["tokens"] if t["user"] == "dave")
    assert admin.post(f"/ui/admin/tokens/{dave['id']}/revoke", data={"csrf": "forged"}).status_code == 403
    assert server.client(token.group(1)).get("/v1/whoami").status_code == 200
    r = admin.post(f"/ui/admin/tokens/{dave['id']}/revoke", data={"csrf": _csrf(shown)})
    assert r.status_code == 303 and server.client(token.group(1)).get("/v1/whoami").status_code == 401
    erin = server.client().post("/v1/tokens", json={"user": "erin"}).json()["token"]
    user = _browser(server, erin)
    assert user.get("/ui/admin").status_code == 403
    assert 'href="/ui/admin"' not in user.get("/ui/cluster").text


def test_node_health_and_queues_page_without_queues(web_server: Server) -> None:
    server = web_server
    nodes = server.client().get("/v1/nodes").json()["nodes"]
    assert len(nodes) == 1 and nodes[0]["state"] == "alive" and nodes[0]["lost_runs"] == {}
    assert nodes[0]["heartbeat_of"] == "controller" and nodes[0]["last_heartbeat"] is not None
    c = _browser(server, server.admin_token)
    page = c.get("/ui/cluster").text
    assert 'data-testid="nodes"' in page and "ago (" in page and "the server's own machine" in page
    queues = c.get("/ui/queues")
    assert queues.status_code == 200 and 'data-testid="no-queues"' in queues.text
