"""The API bounds what it accepts (issue 13, points 1 and 8): NUL and lone surrogates, integers past 2^53,
bodies past the limit are 422/413 with a body that matches the published schema, never a 500; a retried
submission with its idempotency key is stored once; an unknown job type is a hint (learned throughputs) or
refused (profile)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from support.server import PY, Server, wait_for
from tesserae.runtime.client import Client, ClientConfig

BIG = 2**63


def _error_schema(server: Server) -> dict[str, Any]:
    """The 422 response schema the server publishes, resolved against its components."""
    doc = server.client("").get("/openapi.json").json()
    ref = doc["paths"]["/v1/jobs"]["post"]["responses"]["422"]["content"]["application/json"]["schema"]
    return {**ref, "components": doc["components"]}


def _raw_post(server: Server, body: str) -> httpx.Response:
    """A JSON text sent as is (httpx would refuse to encode a lone surrogate itself)."""
    return server.client().post("/v1/jobs", content=body.encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("body", [
    '{"command": ["sleep", "3"], "gpus": 1, "name": "a\\u0000b"}',
    '{"command": ["sleep", "3\\u0000"], "gpus": 1}',
    '{"command": ["sleep", "3"], "gpus": 1, "env": {"A": "x\\u0000y"}}',
    '{"command": ["sleep", "\\ud800"], "gpus": 1}',
    '{"command": ["sleep", "3"], "gpus": 1, "env": {"A": "\\udfff"}}',
    '{"command": ["sleep", "3"], "gpus": 1, "name": "\\ud83d"}',
    '{"command": ["sleep", "3"], "gpus": 1, "workdir": "/tmp/\\u0000"}',
])
def test_nul_and_lone_surrogates_are_refused_in_every_string(shared_server: Server, body: str) -> None:
    # Before: NUL or a lone surrogate reached Popen, which raised ValueError / UnicodeEncodeError: the
    # controller died and crash-looped on every restart; GET /v1/jobs answered 500 for good.
    r = _raw_post(shared_server, body)
    assert r.status_code == 422, r.text
    doc = r.json()
    assert "NUL" in doc["detail"] or "surrogate" in doc["detail"], doc
    jsonschema.validate(doc, _error_schema(shared_server))
    assert shared_server.client().get("/v1/jobs").status_code == 200
    assert shared_server.client().get("/healthz").status_code == 200


@pytest.mark.parametrize(("method", "path", "params"), [
    ("GET", f"/v1/jobs/{BIG}", {}),
    ("POST", f"/v1/jobs/{BIG}/cancel", {}),
    ("GET", f"/v1/jobs/{BIG}/logs", {}),
    ("GET", "/v1/jobs/1/logs", {"offset": str(BIG)}),
    ("GET", f"/v1/jobs/{2**53 + 1}", {}),
])
def test_integers_past_2_to_the_53_are_422_not_500(shared_server: Server, method: str, path: str,
                                                   params: dict[str, str]) -> None:
    # Before: SQLite raised OverflowError on 2^63: an unhandled 500.
    r = shared_server.client().request(method, path, params=params)
    assert r.status_code == 422, r.text
    jsonschema.validate(r.json(), _error_schema(shared_server))


def test_submitted_integers_are_bounded(shared_server: Server) -> None:
    for field in ("iterations", "gpus"):
        r = shared_server.client().post("/v1/jobs", json={"command": [PY, "-c", "pass"], "gpus": 1, field: BIG})
        assert r.status_code == 422 and f"'{field}'" in r.json()["detail"], r.text
        jsonschema.validate(r.json(), _error_schema(shared_server))


def test_a_body_over_the_limit_is_413_and_stores_nothing(shared_server: Server) -> None:
    # Before: a 100 MB env value was accepted and grew the store by twice that.
    c = shared_server.client()
    before = len(c.get("/v1/jobs").json()["jobs"])
    big = {"command": [PY, "-c", "pass"], "gpus": 1, "env": {"BIG": "x" * (1 << 20)}}
    r = c.post("/v1/jobs", json=big)
    assert r.status_code == 413, r.text
    assert "larger than this server accepts" in r.json()["detail"]

    def chunks() -> Any:  # the same, streamed without a Content-Length
        yield json.dumps(big).encode()

    r = c.post("/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert len(c.get("/v1/jobs").json()["jobs"]) == before


def test_the_body_limit_is_configurable(tmp_path: Path, servers: Callable[..., Server]) -> None:
    s = servers(tmp_path / "state", "--max-body-bytes", "2048", gpus=1)
    r = s.client().post("/v1/jobs", json={"command": [PY, "-c", "pass"], "gpus": 1, "env": {"A": "x" * 3000}})
    assert r.status_code == 413 and "2048 bytes" in r.json()["detail"]
    r = s.client().post("/v1/jobs", json={"command": [PY, "-c", "pass"], "gpus": 1, "env": {"A": "x" * 1000}})
    assert r.status_code == 201, r.text


def test_validation_errors_match_the_published_schema(shared_server: Server) -> None:
    schema = _error_schema(shared_server)
    assert "ErrorBody" in json.dumps(schema) and "HTTPValidationError" not in json.dumps(schema)
    for body in ({"command": [], "gpus": 1}, {"command": [PY], "gpus": "two"}, {"colour": 1}):
        r = shared_server.client().post("/v1/jobs", json=body)
        assert r.status_code == 422
        jsonschema.validate(r.json(), schema)


def test_a_stored_lone_surrogate_does_not_break_the_listing(tmp_path: Path, servers: Callable[..., Server]) -> None:
    # A store written by an older server may hold such text: it is served (escaped), not a 500 for good.
    s = servers(tmp_path / "state", "--rounds-only", gpus=1, policy="fifo", round_seconds=3600.0)
    job = s.submit([PY, "-c", "pass"], name="legacy")
    s.stop()
    db = sqlite3.connect(s.state / "tesserae.db")
    db.execute("UPDATE jobs SET command=?, state='failed' WHERE id=?", ('["sleep", "\\ud800"]', job))
    db.commit()
    db.close()
    s2 = servers(s.state, gpus=1, policy="fifo", round_seconds=3600.0)
    for path in ("/v1/jobs", f"/v1/jobs/{job}"):
        r = s2.client().get(path)
        assert r.status_code == 200, r.text


def test_an_unknown_job_type_is_a_hint_or_refused_and_cannot_reset_the_policy(
        shared_server: Server, tmp_path: Path, servers: Callable[..., Server]) -> None:
    # Before: any user could restart the Tiresias state of every job with --type nonsense.
    body = {"command": [PY, "-c", "pass"], "gpus": 1, "job_type": "no-such-model"}
    # With learned throughputs (the default) a type is a hint for the job's prior: any name will do, and the
    # policy's table still counts it as 'generic'.
    r = shared_server.client().post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    assert shared_server.wait_state(int(r.json()["id"]), "completed")["job_type"] == "no-such-model"
    assert "per-job state restarts" not in shared_server.log()
    # Deciding on the profile, a type it does not know is refused.
    s = servers(tmp_path / "state", "--throughputs", "profile", gpus=1, policy="fifo", round_seconds=3600.0)
    r = s.client().post("/v1/jobs", json=body)
    assert r.status_code == 422
    assert "unknown job type 'no-such-model'" in r.json()["detail"] and "generic" in r.json()["detail"]


def test_a_retried_submission_with_its_key_is_stored_once(shared_server: Server) -> None:
    c = shared_server.client()
    body = {"command": [PY, "-c", "pass"], "gpus": 1, "name": "once"}
    first = c.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k-once-1"})
    again = c.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k-once-1"})
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    other = c.post("/v1/jobs", json={**body, "name": "other"}, headers={"Idempotency-Key": "k-once-1"})
    assert other.status_code == 409 and "already used" in other.json()["detail"]
    assert c.post("/v1/jobs", json=body, headers={"Idempotency-Key": "has space"}).status_code == 422
    shared_server.wait_state(first.json()["id"], "completed")


def test_the_client_retries_a_lost_answer_with_the_same_key(shared_server: Server) -> None:
    # Before: a submission whose answer was lost (a timeout, a dropped connection) could be stored while
    # the client saw an error; retrying it stored a second job. The client now sends a key and retries.
    real = httpx.HTTPTransport()
    calls: list[str | None] = []

    class LoseFirstAnswer(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            calls.append(request.headers.get("Idempotency-Key"))
            response = real.handle_request(request)
            if len(calls) == 1:
                response.read()
                raise httpx.ReadTimeout("the answer was lost", request=request)
            return response

    client = Client(ClientConfig(shared_server.url, shared_server.admin_token))
    client.http = httpx.Client(base_url=shared_server.url, transport=LoseFirstAnswer(),
                               headers={"Authorization": f"Bearer {shared_server.admin_token}"})
    before = {j["id"] for j in shared_server.client().get("/v1/jobs").json()["jobs"]}
    job = client.submit({"command": [PY, "-c", "pass"], "gpus": 1, "name": "lost-answer"})
    client.close()
    assert len(calls) == 2 and calls[0] == calls[1] and calls[0]
    after = {j["id"] for j in shared_server.client().get("/v1/jobs").json()["jobs"]}
    assert after - before == {job["id"]}
    shared_server.wait_state(job["id"], "completed")
    wait_for(lambda: shared_server.job(job["id"])["state"] == "completed")


def test_errors_outside_validation_match_the_schema_too(shared_server: Server) -> None:
    c = shared_server.client()
    r = c.request("OPTIONS", "/v1/jobs")
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"  # not only the first route's methods
    r = c.get("/v1/jobs", params={"state": "bogus"})
    assert r.status_code == 422 and "'state'" in r.json()["detail"]
    jsonschema.validate(r.json(), _error_schema(shared_server))
    r = c.post("/v1/jobs", content=b"\xff\xfe{", headers={"Content-Type": "application/json"})
    assert r.status_code in (400, 422) and r.json()["detail"]


#: Integers no path or query parameter may turn into a 5xx: past SQLite's int64, past uint64, huge, negative.
FUZZ_INTEGERS = (str(2**63), str(2**64), str(10**26), "-1")


def _integer_params(doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(method, path, where, name) of every integer path or query parameter of the schema."""
    out = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for p in op.get("parameters", []):
                schema = p.get("schema", {})
                kinds = {schema.get("type")} | {s.get("type") for s in schema.get("anyOf", [])}
                if p["in"] in ("path", "query") and "integer" in kinds:
                    out.append((method.upper(), path, p["in"], p["name"]))
    return out


def test_every_integer_parameter_of_the_schema_is_bounded(shared_server: Server) -> None:
    """Issue 27, point 3. Before: GET /v1/jobs/{id}/runs with an id >= 2^63 answered 500 (OverflowError)."""
    job = shared_server.submit([PY, "-c", "pass"], hold=True)
    doc = shared_server.client("").get("/openapi.json").json()
    params = _integer_params(doc)
    assert ("GET", "/v1/jobs/{job_id}/runs", "path", "job_id") in params
    assert ("GET", "/v1/jobs/{job_id}/logs", "query", "offset") in params
    c = shared_server.client()
    tried = 0
    for method, path, where, name in params:
        for value in FUZZ_INTEGERS:
            url = path.replace("{job_id}", str(job))
            query = {}
            if where == "path":
                url = path.replace("{" + name + "}", value).replace("{job_id}", str(job))
            else:
                query[name] = value
            r = c.request(method, url, params=query, json={} if method == "POST" else None)
            assert 400 <= r.status_code < 500, (method, url, query, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/json"), (method, url, query)
            tried += 1
    assert tried >= 4 * 8
    assert shared_server.job(job)["state"] == "queued"  # nothing acted on the job
    shared_server.client().post(f"/v1/jobs/{job}/cancel")


def test_a_nul_in_an_env_key_is_not_echoed(shared_server: Server) -> None:
    """Issue 27, 'smaller'. Before: the 422 named the field with the key as sent, NUL included."""
    r = _raw_post(shared_server, '{"command": ["true"], "gpus": 1, "env": {"A\\u0000B": "x"}}')
    assert r.status_code == 422, r.text
    assert "\\u0000" not in r.text and "\0" not in r.text, r.text
    assert "NUL" in r.json()["detail"], r.text
    jsonschema.validate(r.json(), _error_schema(shared_server))
