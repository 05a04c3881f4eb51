"""HTTP API against a real server: authentication, ownership, validation, cluster, metrics."""

from __future__ import annotations

import pytest

from support.server import PY, Server, toy, wait_for


@pytest.fixture(scope="session")
def users(shared_server: Server) -> dict[str, str]:
    admin = shared_server.client()
    out = {}
    for name in ("alice", "bob"):
        r = admin.post("/v1/tokens", json={"user": name})
        assert r.status_code == 201, r.text
        out[name] = r.json()["token"]
    return out


def test_openapi_schema_and_health_are_served(shared_server: Server) -> None:
    c = shared_server.client("")
    assert c.get("/healthz").json()["ok"] is True
    schema = c.get("/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/jobs/{job_id}/logs", "/v1/cluster",
            "/metrics"} <= set(schema["paths"])
    assert "JobSubmission" in schema["components"]["schemas"]


def test_requests_without_a_valid_token_are_refused(shared_server: Server) -> None:
    anon = shared_server.client("")
    for method, path in (("GET", "/v1/jobs"), ("GET", "/v1/jobs/1"), ("GET", "/v1/cluster"),
                         ("POST", "/v1/jobs/1/cancel"), ("GET", "/v1/jobs/1/logs")):
        r = anon.request(method, path)
        assert r.status_code == 401, (method, path, r.text)
        assert "missing token" in r.json()["detail"]
        assert r.headers["www-authenticate"] == "Bearer"
    r = anon.post("/v1/jobs", json={"command": ["true"], "gpus": 1})
    assert r.status_code == 401
    bad = shared_server.client("tsr_not-a-real-token")
    r = bad.get("/v1/jobs")
    assert r.status_code == 401 and r.json()["detail"] == "invalid or revoked token"


def test_users_see_and_cancel_only_their_own_jobs(shared_server: Server, users: dict[str, str]) -> None:
    alice, bob = users["alice"], users["bob"]
    job = shared_server.submit(toy(400, 0.05), token=alice, name="alice-job")
    b = shared_server.client(bob)
    for method, path in (("GET", f"/v1/jobs/{job}"), ("POST", f"/v1/jobs/{job}/cancel"),
                         ("GET", f"/v1/jobs/{job}/logs")):
        r = b.request(method, path)
        assert r.status_code == 403, (method, path, r.text)
        assert "belongs to another user" in r.json()["detail"]
    assert job not in [j["id"] for j in b.get("/v1/jobs").json()["jobs"]]
    a = shared_server.client(alice)
    assert [j["id"] for j in a.get("/v1/jobs").json()["jobs"]] == [job]
    assert b.post("/v1/tokens", json={"user": "mallory", "admin": True}).status_code == 403
    admin = shared_server.client()
    assert job in [j["id"] for j in admin.get("/v1/jobs").json()["jobs"]]
    assert admin.get("/v1/jobs/999999").status_code == 404
    # Alice cancels her running job; the process gets SIGTERM and the job ends cancelled.
    shared_server.wait_state(job, "running")
    r = a.post(f"/v1/jobs/{job}/cancel")
    assert r.status_code == 200
    done = shared_server.wait_state(job, "cancelled", timeout=20)
    assert done["assigned_gpus"] is None
    r = a.post(f"/v1/jobs/{job}/cancel")
    assert r.status_code == 409 and "already cancelled" in r.json()["detail"]


@pytest.mark.parametrize(("body", "status", "needle"), [
    ({"command": [PY, "-c", "pass"], "gpus": 3}, 422, "asks for 3 GPUs but this cluster has 2"),
    ({"command": [], "gpus": 1}, 422, "the command is empty"),
    ({"command": [""], "gpus": 1}, 422, "program name"),
    ({"command": [PY], "gpus": 1, "colour": "red"}, 422, "unknown field 'colour'"),
    ({"command": [PY], "gpus": "two"}, 422, "'gpus': Input should be a valid integer"),
    ({"command": [PY], "gpus": "2"}, 422, "'gpus'"),
    ({"command": [PY], "gpus": 1.5}, 422, "'gpus'"),
    ({"command": [PY], "gpus": 0}, 422, "'gpus'"),
    ({"command": "python train.py", "gpus": 1}, 422, "'command'"),
    ({"command": [PY]}, 422, "'gpus' is required"),
    ({"command": ["no-such-program-xyz"], "gpus": 1}, 422, "not found on the server's PATH"),
    ({"command": ["./train.sh"], "gpus": 1}, 422, "relative path"),
    ({"command": [PY], "gpus": 1, "env": {"CUDA_VISIBLE_DEVICES": "7"}}, 422, "set by Tesserae"),
    ({"command": [PY], "gpus": 1, "workdir": "/no/such/dir"}, 422, "not a directory"),
    ({"command": ["a", "b"], "gpus": 1, "shell": True}, 422, "exactly one shell command line"),
    ({"command": [PY], "gpus": 1, "iterations": -5}, 422, "'iterations'"),
])
def test_malformed_submissions_are_rejected_clearly(shared_server: Server, body: dict, status: int,
                                                   needle: str) -> None:
    r = shared_server.client().post("/v1/jobs", json=body)
    assert r.status_code == status, r.text
    doc = r.json()
    assert needle in doc["detail"], doc
    assert doc["errors"] and all(e["message"] for e in doc["errors"])


def test_a_body_that_is_not_json_is_rejected(shared_server: Server) -> None:
    r = shared_server.client().post("/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert "not valid JSON" in r.json()["detail"]


def test_cluster_and_metrics(shared_server: Server) -> None:
    c = shared_server.client()
    info = c.get("/v1/cluster").json()
    assert info["gpus_total"] == 2 and info["gpu_source"] == "virtual"
    assert [g["type"] for g in info["gpus"]] == ["v100", "v100"]
    assert info["policy"] == "fifo" and info["executor"] == "local"
    job = shared_server.submit(toy(3, 0.01), iterations=3)
    shared_server.wait_state(job, "completed")
    text = shared_server.client("").get("/metrics").text
    assert 'tesserae_gpus{type="v100"} 2' in text
    assert "# TYPE tesserae_jobs gauge" in text
    completed = next(line for line in text.splitlines() if line.startswith('tesserae_jobs{state="completed"}'))
    assert int(completed.split()[-1]) >= 1
    rounds = next(line for line in text.splitlines() if line.startswith("tesserae_rounds_total"))
    assert int(rounds.split()[-1]) >= 1


def test_logs_by_offset(shared_server: Server) -> None:
    job = shared_server.submit([PY, "-c", "print('hello from the job')"], name="hello")
    shared_server.wait_state(job, "completed")
    c = shared_server.client()
    r = c.get(f"/v1/jobs/{job}/logs")
    assert "hello from the job" in r.text
    assert r.headers["x-job-state"] == "completed"
    nxt = int(r.headers["x-next-offset"])
    assert nxt == len(r.content)
    assert c.get(f"/v1/jobs/{job}/logs", params={"offset": nxt}).content == b""
    j = shared_server.job(job)
    assert j["exit_code"] == 0 and j["name"] == "hello"
    kinds = [e["kind"] for e in j["events"]]
    assert kinds[0] == "submitted" and "started" in kinds and kinds[-1] == "completed"
    wait_for(lambda: j["jct_seconds"] is not None)
