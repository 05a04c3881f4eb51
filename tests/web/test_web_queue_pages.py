"""The dashboard's queue page with many waiting jobs (issue 27, point 6): 50 a page, and a live poll that
sends its ETag back gets a 304 until a decision or a change."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from support.server import Server, kill_jobs, start_server
from support.web import form_login


def test_the_queue_pages_by_fifty_and_polls_with_an_etag(tmp_path: Path) -> None:
    # 60 s rounds: no decision between two polls (a decision changes the ETag).
    server = start_server(tmp_path / "state", gpus=1, policy="fifo", round_seconds=60.0, grace=1.0)
    try:
        _pages_and_etag(server)
    finally:
        server.stop()
        kill_jobs(server.state)


def _pages_and_etag(server: Server) -> None:
    admin = server.client()
    r = admin.post("/v1/jobs", json={"command": ["sleep", "1000"], "gpus": 1, "hold": True, "array": "0-54"})
    assert r.status_code == 201, r.text
    ids = r.json()["array_job_ids"]
    c = httpx.Client(base_url=server.url, timeout=20.0)
    server.clients.append(c)
    assert form_login(c, server.admin_token).status_code == 303
    first = c.get("/ui/queue")
    assert first.status_code == 200 and "page 1 of 2 (55 waiting jobs)" in first.text
    shown = [int(x) for x in re.findall(r'<a href="/ui/jobs/(\d+)">', first.text)]
    assert shown == ids[:50]
    second = c.get("/ui/queue", params={"page": 2})
    assert [int(x) for x in re.findall(r'<a href="/ui/jobs/(\d+)">', second.text)] == ids[50:]
    assert 'data-live="/ui/queue?live=1&amp;page=2"' in second.text
    poll = {"X-Tesserae-Live": "1"}
    live = c.get("/ui/queue", params={"live": 1}, headers=poll)
    tag = live.headers["ETag"]
    same = c.get("/ui/queue", params={"live": 1}, headers={**poll, "If-None-Match": tag})
    assert same.status_code == 304 and same.content == b""
    assert admin.post(f"/v1/jobs/{ids[0]}/cancel").status_code == 200
    changed = c.get("/ui/queue", params={"live": 1}, headers={**poll, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["ETag"] != tag
    assert f'href="/ui/jobs/{ids[0]}"' not in changed.text
    # Out of range or not a number: the first page.
    assert "page 1 of 2" in c.get("/ui/queue", params={"page": "x"}).text
