"""The dashboard over plain HTTP (no browser): login, sessions, escaping, errors, CSRF, the extra routes."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.server import Server, kill_jobs, running_server, start_server, toy
from support.web import form_login
from tesserae.web.login_limits import CLIENT_BURST, CLIENT_EVERY, USER_BURST, USER_EVERY


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("webhttp") / "state"
    with running_server(state, gpus=2, policy="tiresias-las", round_seconds=1.0, grace=1.0) as s:
        yield s


def browser_login(s: Server, token: str) -> httpx.Client:
    c = httpx.Client(base_url=s.url, timeout=20.0)
    s.clients.append(c)
    r = form_login(c, token)
    assert r.status_code == 303 and r.headers["location"] == "/ui/jobs", r.text
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and token not in cookie
    return c


def test_login_form_and_bad_tokens(server: Server) -> None:
    c = httpx.Client(base_url=server.url, timeout=20.0)
    r = c.get("/ui/cluster")
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=/ui/cluster")
    for token, msg in (("tsr_nope", "not valid"), ("", "Enter your token")):
        r = form_login(c, token)
        assert r.status_code == 401 and msg in r.text and "tesserae_session" not in r.headers.get("set-cookie", "")
    r = c.post("/ui/login", content=b"token=" + b"x" * 100_000,
               headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 403 and "expired" in r.text  # an unreadable form carries no CSRF value
    c.close()


def test_the_login_form_has_a_csrf_value(server: Server) -> None:
    """Issue 27, point 4. Before: any site could post a token to /ui/login and log the browser in as that
    token's user (login CSRF)."""
    c = httpx.Client(base_url=server.url, timeout=20.0)
    r = c.post("/ui/login", data={"token": server.admin_token, "next": "/ui/jobs"})  # no form fetched: no cookie
    assert r.status_code == 403 and "tesserae_session" not in r.headers.get("set-cookie", ""), r.text
    form = c.get("/ui/login")
    cookie = form.headers["set-cookie"]
    assert "tesserae_login=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    r = c.post("/ui/login", data={"token": server.admin_token, "csrf": "0" * 64})
    assert r.status_code == 403
    other = httpx.Client(base_url=server.url, timeout=20.0)  # another browser's form value does not do
    value = re.search(r'name="csrf" value="([^"]+)"', other.get("/ui/login").text).group(1)  # type: ignore[union-attr]
    assert c.post("/ui/login", data={"token": server.admin_token, "csrf": value}).status_code == 403
    assert form_login(c, server.admin_token).status_code == 303
    c.close()
    other.close()


def test_every_response_says_nosniff(server: Server) -> None:
    """Issue 27, point 4. Before: logs (the job's own bytes, as text/plain) and the API's answers came without
    X-Content-Type-Options, so a browser could sniff a log as HTML or script."""
    job = server.submit(["echo '<html><script>alert(1)</script>'"], shell=True)
    server.wait_state(job, "completed")
    admin, anon = server.client(), httpx.Client(base_url=server.url, timeout=20.0)
    answers = [admin.get(f"/v1/jobs/{job}/logs"), admin.get("/v1/jobs"), admin.get("/v1/jobs/999999"),
               admin.get("/metrics"), anon.get("/healthz"), anon.get("/openapi.json"), anon.get("/docs"),
               anon.get("/v1/jobs"), anon.get("/ui/login"), anon.get("/ui/cluster"), anon.get("/ui/static/ui.js"),
               admin.post("/v1/jobs", json={"gpus": "x"}), admin.post("/v1/jobs", content=b"x" * (2 << 20)),
               anon.get("/no/such/page")]
    assert "<script>" in answers[0].text
    for r in answers:
        assert r.headers.get("x-content-type-options") == "nosniff", (r.request.url, r.status_code)
    anon.close()


def test_the_dashboards_integers_are_bounded(server: Server) -> None:
    c = browser_login(server, server.admin_token)
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/ui/cluster").text).group(1)  # type: ignore[union-attr]
    for value in (str(2**63), str(2**64), str(10**26), "-1"):
        for method, path, params in (("GET", f"/ui/jobs/{value}/log", {}), ("GET", "/ui/jobs/1/log", {"offset": value}),
                                     ("POST", f"/ui/jobs/{value}/cancel", {}), ("GET", f"/ui/jobs/{value}", {})):
            if params.get("offset") == "-1":
                continue  # -1 is the tail of the log
            r = c.request(method, path, params=params, data={"csrf": csrf} if method == "POST" else None)
            assert 400 <= r.status_code < 500, (method, path, params, r.status_code)


def test_logins_are_limited_per_user_and_per_client(tmp_path: Path) -> None:
    """Issue 27, point 4. Before: 10,001 logins by one user in 26 s ended the admin's session (one global list
    of sessions), and 291 bad logins a second went through."""
    s = start_server(tmp_path / "state", gpus=1, policy="fifo")
    try:
        admin = browser_login(s, s.admin_token)
        alice = s.client().post("/v1/tokens", json={"user": "alice"}).json()["token"]
        c = httpx.Client(base_url=s.url, timeout=20.0)
        start, codes = time.monotonic(), []
        while 429 not in codes and len(codes) < 60:
            codes.append(form_login(c, alice).status_code)
        r = form_login(c, alice)
        assert r.status_code == 429 and "Too many logins as alice" in r.text, r.text
        assert 1 <= int(r.headers["retry-after"]) <= USER_EVERY + 1
        assert codes.count(303) <= USER_BURST + (time.monotonic() - start) / USER_EVERY + 1, codes
        assert admin.get("/ui/jobs").status_code == 200  # alice's logins left the admin's session alone
        codes = []
        while 429 not in codes and len(codes) < 120:
            codes.append(form_login(c, "tsr_wrong").status_code)
        r = form_login(c, s.admin_token)
        assert r.status_code == 429 and "from this address" in r.text and int(r.headers["retry-after"]) >= 1
        assert codes.count(401) <= CLIENT_BURST + (time.monotonic() - start) / CLIENT_EVERY + 1, codes
        assert admin.get("/ui/jobs").status_code == 200
        c.close()
    finally:
        s.stop()
        kill_jobs(s.state)


def test_pages_escape_names_and_errors_are_pages(server: Server) -> None:
    c = browser_login(server, server.admin_token)
    job = server.submit(toy(3, 0.01), gpus=1, name="<script>alert('x')</script>", iterations=3)
    server.wait_state(job, "completed")
    for path in ("/ui/jobs", f"/ui/jobs/{job}", "/ui/queue", "/ui/cluster", "/ui/usage", f"/ui/jobs/{job}?live=1"):
        r = c.get(path)
        assert r.status_code == 200, path
        assert "<script>alert" not in r.text, path
        assert "default-src 'self'" in r.headers["content-security-policy"]
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in c.get(f"/ui/jobs/{job}").text
    log = c.get(f"/ui/jobs/{job}/log", params={"offset": -1}).json()
    assert log["state"] == "completed" and "toy: done" in log["text"] and log["next"] > 0
    r = c.get("/ui/jobs/424242")
    assert r.status_code == 404 and "job 424242 does not exist" in r.text and r.headers["content-type"].startswith(
        "text/html")
    assert c.get("/ui/jobs/12abc").status_code == 404
    r = c.post(f"/ui/jobs/{job}/cancel", data={"csrf": "forged"})
    assert r.status_code == 403 and "CSRF" in r.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/ui/cluster").text).group(1)  # type: ignore[union-attr]
    r = c.post(f"/ui/jobs/{job}/cancel", data={"csrf": csrf})
    assert r.status_code == 303
    assert f"Job {job}: cancel refused: job {job} is already completed" in c.get(f"/ui/jobs/{job}").text
    assert 'data-testid="cancel"' not in c.get(f"/ui/jobs/{job}").text, "no cancel button on a finished job"
    r = c.post(f"/ui/jobs/{job}/hold", data={"csrf": csrf})
    assert r.status_code == 303
    assert f"Job {job}: hold refused: job {job} is completed; only a waiting job can be held" in c.get(
        f"/ui/jobs/{job}").text
    held = server.submit(toy(2, 0.01), gpus=1, name="held", hold=True)  # issue 14: hold and release buttons
    page = c.get(f"/ui/jobs/{held}").text
    assert 'data-testid="release"' in page and 'data-testid="hold"' not in page
    assert c.post(f"/ui/jobs/{held}/release", data={"csrf": csrf}).status_code == 303
    server.wait_state(held, "completed")


def test_other_users_and_revoked_tokens(server: Server) -> None:
    admin = server.client()
    bob_token = admin.post("/v1/tokens", json={"user": "bob"}).json()["token"]
    admins_job = server.submit(toy(2, 0.01), gpus=1, name="admin-only", iterations=2)
    bob = browser_login(server, bob_token)
    r = bob.get(f"/ui/jobs/{admins_job}")
    assert r.status_code == 403 and "belongs to another user" in r.text and "admin-only" not in r.text
    assert "admin-only" not in bob.get("/ui/jobs").text
    assert server.client(bob_token).get(f"/v1/jobs/{admins_job}/runs").status_code == 403
    with sqlite3.connect(Path(server.state) / "tesserae.db") as db:
        db.execute("UPDATE tokens SET revoked=1 WHERE user='bob'")
    r = bob.get("/ui/jobs")
    assert r.status_code == 303 and "/ui/login" in r.headers["location"]
    assert bob.get("/ui/cluster?live=1", headers={"X-Tesserae-Live": "1"}).status_code == 401


def test_extra_routes_need_a_token_and_check_their_input(server: Server) -> None:
    anon = httpx.Client(base_url=server.url, timeout=20.0)
    for path in ("/v1/queue", "/v1/usage", "/v1/nodes", "/v1/jobs/1/runs"):
        assert anon.get(path).status_code == 401, path
    anon.close()
    c = server.client()
    r = c.get("/v1/usage", params={"bins": 0})
    assert r.status_code == 422 and "bins" in r.json()["detail"]
    assert c.get("/v1/jobs/999999/runs").status_code == 404
    q = c.get("/v1/queue").json()
    assert q["policy"] == "tiresias-las" and q["queues"] == 2
    nodes = c.get("/v1/nodes").json()["nodes"]
    assert nodes[0]["gpus"] == [0, 1] and nodes[0]["state"] == "alive"


def test_docs_and_assets_are_served_locally(server: Server) -> None:
    c = httpx.Client(base_url=server.url, timeout=20.0)
    html = c.get("/docs").text
    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert urls and all(u.startswith("/") for u in urls), urls
    for u in urls:
        assert c.get(u).status_code == 200, u
    assert c.get("/ui/static/vendor/uPlot.iife.min.js").status_code == 200
    assert c.get("/ui/static/../../api.py").status_code == 404
    c.close()


def test_usage_window_too_small_is_a_422_and_what_if_conflict_is_documented(server: Server) -> None:
    # Found by benchmarks/fuzz_api.py: a window of 5e-324 s made bins of zero width (500).
    admin = server.client()
    r = admin.get("/v1/usage", params={"window": "5e-324", "bins": 48})
    assert r.status_code == 422 and "window" in r.text
    assert admin.get("/v1/usage", params={"window": 1, "bins": 48}).status_code == 200
    spec = admin.get("/openapi.json").json()
    assert "409" in spec["paths"]["/v1/what-if"]["post"]["responses"]
