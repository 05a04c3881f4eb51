"""Per-user budgets and a production-sized queue, against a real server (issue 27, points 5 and 6):
admission limits with their one-line CLI errors, request rates per user, one what-if at a time,
listing by cursor, and the queue's pages and ETag."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli import one_line_error, run_here
from support.server import Server
from tesserae.runtime.api.budgets import RATES, Buckets, WhatIfSlots
from tesserae.runtime.client import Client, ClientConfig
from tesserae.runtime.commands.common import console

HELD = {"command": ["sleep", "1000"], "gpus": 1, "hold": True}


@pytest.fixture
def server(servers, tmp_path: Path) -> Server:
    return servers(tmp_path / "state", "--max-jobs-per-user", "3", "--max-queued-jobs", "5", gpus=1, policy="fifo")


def _token(s: Server, user: str) -> str:
    r = s.client().post("/v1/tokens", json={"user": user})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def test_admission_limits_name_the_limit_over_http_and_in_the_cli(
        server: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ann, bob = server.client(_token(server, "ann")), server.client(_token(server, "bob"))
    for _ in range(3):
        assert ann.post("/v1/jobs", json=HELD).status_code == 201
    r = ann.post("/v1/jobs", json=HELD)
    assert r.status_code == 429 and "--max-jobs-per-user" in r.json()["detail"] and "3" in r.json()["detail"]
    env = {**server.env(), "TESSERAE_TOKEN": ann.headers["Authorization"].split()[1]}
    line = one_line_error(run_here(["submit", "--hold", "--", "sleep", "1"], env, monkeypatch, capsys))
    assert "--max-jobs-per-user" in line and "HTTP 429" in line
    # Everyone's waiting jobs together: 3 of ann's, and an array of 3 would make 6 > 5.
    r = bob.post("/v1/jobs", json={**HELD, "array": "0-2"})
    assert r.status_code == 429 and "--max-queued-jobs" in r.json()["detail"]
    assert bob.post("/v1/jobs", json={**HELD, "array": "0-1"}).status_code == 201
    # A cancelled job no longer counts.
    first = ann.get("/v1/jobs").json()["jobs"][0]["id"]
    assert ann.post(f"/v1/jobs/{first}/cancel").status_code == 200
    assert ann.post("/v1/jobs", json=HELD).status_code == 201


def test_list_requests_are_budgeted_per_user_with_retry_after(server: Server) -> None:
    ann, bob = server.client(_token(server, "ann")), server.client(_token(server, "bob"))
    burst = RATES["list"][0]
    codes = [ann.get("/v1/jobs", params={"limit": 1}) for _ in range(burst + 20)]
    refused = [r for r in codes if r.status_code == 429]
    assert refused, "a user past its burst of list requests is refused"
    assert int(refused[0].headers["Retry-After"]) >= 1 and "'list'" in refused[0].json()["detail"]
    # Another user, and the same user's cheap reads, are not affected; nor is the admin.
    assert bob.get("/v1/jobs").status_code == 200
    assert ann.get("/v1/whoami").status_code == 200
    assert all(server.client().get("/v1/jobs", params={"limit": 1}).status_code == 200 for _ in range(burst + 5))


def test_what_ifs_are_budgeted_and_one_at_a_time(server: Server) -> None:
    ann = server.client(_token(server, "ann"))
    burst = RATES["what-if"][0]
    codes = [ann.post("/v1/what-if", json={"policy": "las"}).status_code for _ in range(burst + 1)]
    assert codes[-1] == 429 and 429 not in codes[:-1]
    slots = WhatIfSlots()
    with slots.slot("ann"):
        with pytest.raises(Exception, match="429") as e, slots.slot("ann"):
            pass
        assert "one at a time" in str(e.value.detail)  # type: ignore[attr-defined]
        with slots.slot("bob"):
            pass
    with slots.slot("ann"):  # freed once the first ended
        pass


def test_jobs_page_by_cursor_and_the_client_follows(server: Server) -> None:
    ann = server.client(_token(server, "ann"))
    made = [ann.post("/v1/jobs", json=HELD).json()["id"] for _ in range(3)]
    page = ann.get("/v1/jobs", params={"limit": 2}).json()
    assert [j["id"] for j in page["jobs"]] == made[1:] and page["next_cursor"] == made[1]
    rest = ann.get("/v1/jobs", params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [j["id"] for j in rest["jobs"]] == made[:1] and rest["next_cursor"] is None
    with Client(ClientConfig(server.url, ann.headers["Authorization"].split()[1])) as c:
        assert [j["id"] for j in c.jobs(limit=3, page=1)] == made
        assert [j["id"] for j in c.jobs(limit=2, page=1)] == made[1:]
    assert ann.get("/v1/jobs", params={"limit": 10_001}).status_code == 422


def test_the_queue_pages_and_answers_304_while_unchanged(server: Server) -> None:
    admin = server.client()
    made = [admin.post("/v1/jobs", json=HELD).json()["id"] for _ in range(3)]
    r = admin.get("/v1/queue", params={"limit": 2})
    doc = r.json()
    assert doc["total"] == 3 and [j["id"] for j in doc["jobs"]] == made[:2]
    assert doc["jobs"][0]["pending_reason"] == f"held (tesserae release {made[0]})"
    assert [j["id"] for j in admin.get("/v1/queue", params={"limit": 2, "offset": 2}).json()["jobs"]] == made[2:]
    tag = r.headers["ETag"]
    again = admin.get("/v1/queue", params={"limit": 2}, headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    assert admin.post(f"/v1/jobs/{made[0]}/cancel").status_code == 200
    changed = admin.get("/v1/queue", params={"limit": 2}, headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["ETag"] != tag and changed.json()["total"] == 2


def test_the_cluster_view_holds_the_head_of_the_queue_and_its_count(
        servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``/v1/cluster`` no longer carries every waiting job (30,000 of them on a busy server, on every poll):
    the first ``queue_limit`` (100 by default) and ``queue_total``; ``tesserae cluster`` counts them all."""
    s = servers(tmp_path / "state", gpus=1, policy="fifo")
    admin = s.client()
    first = admin.post("/v1/jobs", json={**HELD, "array": "0-119"}).json()["id"]
    info = admin.get("/v1/cluster").json()
    assert info["queue_total"] == 120 and len(info["queue"]) == 100
    assert [q["id"] for q in info["queue"][:2]] == [first, first + 1]
    few = admin.get("/v1/cluster", params={"queue_limit": 3}).json()
    assert few["queue_total"] == 120 and [q["id"] for q in few["queue"]] == [first, first + 1, first + 2]
    assert admin.get("/v1/cluster", params={"queue_limit": 0}).json()["queue"] == []
    assert admin.get("/v1/cluster", params={"queue_limit": 10**6}).status_code == 422
    monkeypatch.setattr(console, "width", 250)
    p = run_here(["cluster"], s.env(), monkeypatch, capsys)
    assert p.returncode == 0 and "queue: 120 waiting" in p.stdout and "... and 70 more" in p.stdout, p.stdout


def test_a_token_over_its_budget_is_refused_before_any_work(tmp_path: Path) -> None:
    """Once a user's list budget is spent, its token's next list requests are answered 429 without a look
    in the store (the early refusal: a flood costs the server next to nothing); another user, and the
    same token once revoked (401), are answered as before."""
    from fastapi.testclient import TestClient

    from tesserae.config import RunSpec, build_scheduler
    from tesserae.profiles.loader import load_profile
    from tesserae.runtime.api.app import create_app
    from tesserae.runtime.api.budgets import Budgets
    from tesserae.runtime.controller.loop import Controller
    from tesserae.runtime.executor.gpus import machine_cluster, virtual_gpus
    from tesserae.runtime.local.executor import LocalExecutor
    from tesserae.runtime.store.database import Store

    cluster, gpus = machine_cluster(virtual_gpus(1))
    store = Store(tmp_path / "t.db")
    controller = Controller(store, LocalExecutor(gpus), build_scheduler(cluster, load_profile(None), RunSpec()),
                            cluster, tmp_path, log=lambda msg: None)
    admin = {"Authorization": f"Bearer {store.create_token('admin', admin=True)}"}
    ann = {"Authorization": f"Bearer {store.create_token('ann')}"}
    bob = {"Authorization": f"Bearer {store.create_token('bob')}"}
    looked_up: list[str] = []
    authenticate = store.authenticate
    store.authenticate = lambda token: looked_up.append(token) or authenticate(token)  # type: ignore[method-assign]
    app = create_app(controller, {}, budgets=Budgets(rates={**RATES, "list": (2, 3600.0)}))
    with TestClient(app) as c:
        assert [c.get("/v1/jobs", headers=ann).status_code for _ in range(3)] == [200, 200, 429]
        seen = len(looked_up)
        r = c.get("/v1/jobs", params={"limit": 5}, headers=ann)
        assert r.status_code == 429 and len(looked_up) == seen, "refused before the token was looked up"
        assert "'list'" in r.json()["detail"] and int(r.headers["Retry-After"]) > 1
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert c.get("/v1/whoami", headers=ann).status_code == 200  # only the budgeted kinds
        assert c.get("/v1/jobs", headers=bob).status_code == 200
        ann_id = next(t["id"] for t in c.get("/v1/tokens", headers=admin).json()["tokens"] if t["user"] == "ann")
        assert c.post(f"/v1/tokens/{ann_id}/revoke", headers=admin).status_code == 200
        assert c.get("/v1/jobs", headers=ann).status_code == 401
    store.close()


def test_a_bucket_peek_takes_nothing() -> None:
    bucket = Buckets(1, 10.0)
    assert bucket.peek("ann", now=0.0) == 0.0 and bucket.take("ann", now=0.0) == 0.0
    assert bucket.peek("ann", now=4.0) == pytest.approx(6.0) == bucket.peek("ann", now=4.0)
    assert bucket.take("ann", now=10.0) == 0.0
