"""Tenant queues on a real server: the config file, who may submit where, borrowing and reclaim
through the checkpoint/resume path, the queue API and commands, and /metrics."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import one_line_error, run_here
from support.server import Server, toy, wait_for
from tesserae.runtime.commands import common

CONFIG = """\
queues:
  - name: research
    guarantee: 1
    users: [alice]
  - name: prod
    guarantee: 1
    borrow_limit: 1
    users: [bob]
"""


def token(server: Server, user: str) -> str:
    r = server.client().post("/v1/tokens", json={"user": user})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def test_queues_quotas_reclaim_and_permissions(servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "server.yaml"
    cfg.write_text(CONFIG)
    s = servers(tmp_path / "state", "--config", str(cfg), gpus=2, policy="fifo", grace=5.0)
    alice, bob = token(s, "alice"), token(s, "bob")

    # Who may submit where: 403 for another team's queue, 404 for an unknown one, 422 for a gang
    # the queue can never hold, and a user's own queue by default.
    r = s.client(alice).post("/v1/jobs", json={"command": toy(5, 0.01), "gpus": 1, "queue": "prod"})
    assert r.status_code == 403 and "may not submit to queue 'prod'" in r.json()["detail"]
    r = s.client(alice).post("/v1/jobs", json={"command": toy(5, 0.01), "gpus": 1, "queue": "nope"})
    assert r.status_code == 404 and "unknown queue 'nope'" in r.json()["detail"]
    r = s.client(alice).post("/v1/jobs", json={"command": toy(5, 0.01), "gpus": 2,
                                               "priority_class": "production"})
    assert r.status_code == 422 and "queue 'research' can never give it more than 1" in r.json()["detail"]

    # bob borrows research's idle GPU (prod: guarantee 1, borrowing limit 1) ...
    b1 = s.submit(toy(4000, 0.05), token=bob, iterations=4000)
    b2 = s.submit(toy(4000, 0.05), token=bob, iterations=4000)
    assert s.job(b1, bob)["queue"] == "prod"
    s.wait_state(b1, "running")
    s.wait_state(b2, "running")
    wait_for(lambda: s.client().get("/v1/queues/prod").json()["gpus_borrowed"] == 1, what="prod to borrow")
    b3 = s.submit(toy(10, 0.01), token=bob)  # beyond prod's limit: waits, and says why
    # (before the next decision it waits for GPUs, as every job does; then its queue says why)
    queue_reasons = ("queue at its borrowing limit", "queue at its share; waiting for idle GPUs to borrow")
    wait_for(lambda: s.job(b3, bob).get("pending_reason") in queue_reasons, what="the queue's pending reason")
    assert s.job(b3, bob)["queue_position"] is None

    # ... and gives it back when alice's job arrives: bob's lowest-ranked job is preempted (it
    # checkpoints) and resumes later from its checkpoint.
    a1 = s.submit(toy(20, 0.05), token=alice)
    s.wait_state(a1, "running")
    wait_for(lambda: s.job(b2, bob)["preemptions"] >= 1, what="the reclaim of bob's borrowed GPU")
    assert s.job(b1, bob)["state"] == "running" and s.job(b1, bob)["preemptions"] == 0
    q = s.client().get("/v1/queues").json()
    by_name = {x["name"]: x for x in q["queues"]}
    assert by_name["research"]["gpus_in_use"] == 1 and by_name["prod"]["gpus_borrowed"] == 0
    assert by_name["prod"]["reclaims"] >= 1
    metrics = s.client("").get("/metrics").text
    assert 'tesserae_queue_guarantee_gpus{queue="prod"} 1' in metrics
    assert 'tesserae_queue_gpus_in_use{queue="research"} 1' in metrics
    s.wait_state(a1, "completed")
    wait_for(lambda: s.job(b2, bob)["state"] == "running", what="bob's job to resume")

    # The commands.
    env = s.env()
    p = run_here(["queue", "list"], env, monkeypatch, capsys)
    assert p.returncode == 0 and "research" in p.stdout and "prod" in p.stdout and "BORROWED" in p.stdout
    p = run_here(["queue", "show", "prod"], env, monkeypatch, capsys)
    assert p.returncode == 0 and "bob" in p.stdout and "borrowing limit" in p.stdout
    p = run_here(["jobs"], env, monkeypatch, capsys)
    assert "QUEUE" in p.stdout and "prod" in p.stdout
    assert "queue 'nope' does not exist" in one_line_error(run_here(["queue", "show", "nope"], env, monkeypatch,
                                                                    capsys))

    # Changing the queues: admins only, validated, never stranding an active job.
    new = tmp_path / "new.yaml"
    new.write_text(CONFIG.replace("users: [alice]", "weight: 3\n    users: [alice]"))
    bob_env = {**env, "TESSERAE_TOKEN": bob}
    assert "only an admin" in one_line_error(run_here(["queue", "set", str(new)], bob_env, monkeypatch, capsys))
    r = s.client().put("/v1/queues", json={"queues": [{"name": "research", "guarantee": 5}]})
    assert r.status_code == 422 and "cluster has 2" in r.json()["detail"]
    # Issue 27: a boolean is not a number (before: "weight": true was stored as 1).
    r = s.client().put("/v1/queues", json={"queues": [{"name": "research", "weight": True}, {"name": "prod"}]})
    assert r.status_code == 422 and "queues[0].weight" in r.json()["detail"], r.text
    assert "expected a number, got true" in r.json()["detail"]
    r = s.client().put("/v1/queues", json={"queues": [{"name": "research", "guarantee": 1, "users": ["alice"]}]})
    assert r.status_code == 409 and "would have no queue" in r.json()["detail"]
    p = run_here(["queue", "set", str(new)], env, monkeypatch, capsys)
    assert p.returncode == 0, p.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONFIG + "    colour: red\n")
    assert f"{bad}, line 9, field 'queues[1].colour': unknown key 'colour'" in one_line_error(
        run_here(["queue", "set", str(bad)], env, monkeypatch, capsys))
    wait_for(lambda: {x["name"]: x for x in s.client().get("/v1/queues").json()["queues"]}["research"]["weight"] == 3,
             what="the new config")
    for j in (b1, b2, b3):
        s.client().post(f"/v1/jobs/{j}/cancel")


def test_a_server_without_queues_refuses_queue_names(shared_server: Server) -> None:
    r = shared_server.client().post("/v1/jobs", json={"command": toy(1, 0.01), "gpus": 1, "queue": "research"})
    assert r.status_code == 422 and "this server has no queues" in r.json()["detail"]
    assert shared_server.client().get("/v1/queues").json()["queues"] == []


@pytest.mark.parametrize(("text", "needle"), [
    (CONFIG + "pools: 3\n", "line 9, field 'pools': unknown key 'pools'"),
    (CONFIG.replace("guarantee: 1\n    borrow", "guarantee: 7\n    borrow"), "cluster has 2"),
    (CONFIG.replace("  - name: prod\n", "  - name: prod\n    parent: nowhere\n"), "unknown parent 'nowhere'"),
])
def test_the_server_refuses_a_bad_config_file(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "server.yaml"
    cfg.write_text(text)
    p = subprocess.run([sys.executable, "-m", "tesserae.cli", "server", "--state", str(tmp_path / "state"),
                        "--virtual-gpus", "2", "--port", "0", "--insecure-same-user", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and needle in p.stderr and str(cfg) in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "state").exists()  # refused before anything was written


def test_predicted_start_show_jobs_and_what_if(servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    s = servers(tmp_path / "state", gpus=1, policy="fifo", round_seconds=2.0)
    first = s.submit(toy(200, 0.05), iterations=200)  # ~10 s on the one GPU
    s.wait_state(first, "running")
    second = s.submit(toy(20, 0.05), iterations=20)
    j = wait_for(lambda: (x := s.job(second)).get("predicted_start") and x, what="a predicted start")
    assert j["state"] == "queued"
    # FIFO: the second job starts when the first ends, which is predicted too.
    assert j["predicted_start"] == pytest.approx(s.job(first)["predicted_finish"], abs=1.0)
    assert j["predicted_finish"] > j["predicted_start"] > j["submit_time"]
    env = s.env()
    p = run_here(["show", str(second)], env, monkeypatch, capsys)
    assert p.returncode == 0 and "predicted start" in p.stdout and "predicted finish" in p.stdout
    for columns in (80, 160):  # issue 30: at 80 columns the table was cut to '...' and 'runni...'
        monkeypatch.setattr(common.console, "_width", columns)  # a terminal this wide (COLUMNS is read once)
        p = run_here(["jobs"], env, monkeypatch, capsys)
        lines = p.stdout.splitlines()
        assert max(len(line) for line in lines) <= columns, p.stdout
        assert re.match(r"ID +NAME .*STATE +GPUS .*STARTS +ENDS *$", lines[0]), p.stdout
        assert "running" in p.stdout and "queued" in p.stdout and "in " in p.stdout, p.stdout
        assert ("left out at 80 columns" in p.stdout) == (columns == 80), p.stdout
    r = s.client().post("/v1/what-if", json={"policy": "las"})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["policy"] == "fifo" and doc["what_if_policy"] == "las"
    assert {x["id"] for x in doc["jobs"]} == {first, second}
    p = run_here(["what-if", "--policy", "las"], env, monkeypatch, capsys)
    assert p.returncode == 0 and "average JCT of the active jobs" in p.stdout and "under las" in p.stdout
    r = s.client().post("/v1/what-if", json={"policy": "nope"})
    assert r.status_code == 422 and "unknown policy 'nope'" in r.json()["detail"]
    s.client().post(f"/v1/jobs/{first}/cancel")
