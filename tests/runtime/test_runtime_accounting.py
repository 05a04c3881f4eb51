"""Accounting (issue 14, "Build"): jobs over a window with chosen fields, GPU-hours per user, and the log's tail."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from support.cli import one_line_error, run_here
from support.server import PY, Server
from tesserae.core.errors import InputError
from tesserae.runtime.commands import common
from tesserae.runtime.commands.job_fields import parse_time
from tesserae.runtime.store import accounting
from tesserae.runtime.store.database import Store


def _job(store: Store, user: str, submit: float, finish: float | None, runs: list[tuple[float, float | None, int]]
         ) -> int:
    job_id = int(store.execute(
        "INSERT INTO jobs (user, name, job_type, num_gpus, command, state, submit_time, finish_time) "
        "VALUES (?, 'j', 'generic', ?, '[\"true\"]', ?, ?, ?)",
        (user, runs[0][2] if runs else 1, "completed" if finish else "running", submit, finish)).lastrowid)
    for start, end, gpus in runs:
        store.execute("INSERT INTO allocations (job_id, gpus, phase, start_time, end_time, pid, run_dir) "
                      "VALUES (?, ?, 'ended', ?, ?, 1, '')", (job_id, json.dumps(list(range(gpus))), start, end))
    return job_id


def test_usage_counts_the_part_of_each_run_inside_the_window(tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    _job(store, "ann", 0, 200, [(0, 100, 2), (150, 200, 2)])  # 2 GPUs: 100 s, then 50 s
    _job(store, "bob", 50, None, [(60, None, 4)])  # 4 GPUs, still running at now=260
    _job(store, "bob", 300, None, [])  # never ran
    everything = accounting.usage(store, None, None, None, now=260)
    store.execute("UPDATE jobs SET cpus=3 WHERE user='bob'")  # CPU-hours: the request x the run time
    everything = accounting.usage(store, None, None, None, now=260)
    assert everything["users"] == [{"user": "ann", "jobs": 1, "gpu_hours": round(300 / 3600, 6), "cpu_hours": 0.0},
                                   {"user": "bob", "jobs": 1, "gpu_hours": round(800 / 3600, 6),
                                    "cpu_hours": round(600 / 3600, 6)}]
    window = accounting.usage(store, 90, 160, None, now=260)  # ann: 10 s + 10 s on 2 GPUs; bob: 70 s on 4
    assert [(u["user"], round(u["gpu_hours"] * 3600)) for u in window["users"]] == [("ann", 40), ("bob", 280)]
    halves = [accounting.usage(store, a, b, None, now=260)["total_gpu_hours"] for a, b in ((0, 130), (130, 260))]
    assert sum(halves) == pytest.approx(everything["total_gpu_hours"], abs=1e-5)  # windows add up
    assert accounting.usage(store, 101, 149, "ann", now=260)["users"] == []
    store.close()


def test_times() -> None:
    now = 1_800_000_000.0
    assert parse_time("now", "f", now) == now and parse_time("2h", "f", now) == now - 7200
    assert parse_time("now-1d", "f", now) == now - 86400 and parse_time("@1700000000", "f", now) == 1.7e9
    assert parse_time("2026-12-01", "f", now) > 1.7e9
    for bad in ("yesterday", "@x", "2026-13-01", "now-", "@-5"):
        with pytest.raises(InputError, match="is not a time"):
            parse_time(bad, "--since", now)


def test_jobs_fields_window_usage_and_tail(tmp_path: Path, servers: Callable[..., Server],
                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    s = servers(tmp_path / "state", gpus=2, policy="fifo", grace=1.0)
    bob = s.client().post("/v1/tokens", json={"user": "bob"}).json()["token"]
    mine = s.submit([PY, "-c", "import time; [print('line', i) for i in range(5)]; time.sleep(1)"], gpus=2)
    theirs = s.submit([PY, "-c", "import time; time.sleep(1)"], token=bob)
    for job_id in (mine, theirs):
        s.wait_state(job_id, "completed", timeout=30)
    env, bob_env = s.env(), s.env(bob)

    def cli(*args: str, who: dict[str, str] = env) -> str:
        p = run_here(list(args), who, monkeypatch, capsys)
        assert p.returncode == 0, p.stderr
        return p.stdout

    rows = json.loads(cli("jobs", "--fields", "id,user,gpus,gpu_hours,exit", "--json"))
    assert [r["id"] for r in rows] == [mine, theirs] and set(rows[0]) == {"id", "user", "gpus", "gpu_hours", "exit"}
    assert rows[0]["gpu_hours"] >= 2 * 1.0 / 3600 and rows[0]["exit"] == 0
    assert [r["id"] for r in json.loads(cli("jobs", "--user", "bob", "--fields", "id", "--json"))] == [theirs]
    assert [r["id"] for r in json.loads(cli("jobs", "--fields", "id", "--json", who=bob_env))] == [theirs]
    assert json.loads(cli("jobs", "--since", "now", "--fields", "id", "--json")) == []  # both ended before now
    assert len(json.loads(cli("jobs", "--since", "1h", "--until", "now", "--fields", "id", "--json"))) == 2
    assert [r["id"] for r in json.loads(cli("jobs", "--limit", "1", "--fields", "id", "--json"))] == [theirs]
    table = cli("jobs", "--fields", "id,user,gpu_hours")
    assert "GPU-H" in table and "bob" in table

    usage = json.loads(cli("usage", "--json"))
    by_user = {u["user"]: u for u in usage["users"]}
    jobs = {j["id"]: j for j in s.client().get("/v1/jobs").json()["jobs"]}
    assert by_user["admin"]["gpu_hours"] == pytest.approx(jobs[mine]["gpu_hours"], abs=1e-5)
    assert by_user["bob"]["gpu_hours"] == pytest.approx(jobs[theirs]["gpu_hours"], abs=1e-5)
    assert [u["user"] for u in json.loads(cli("usage", "--json", who=bob_env))["users"]] == ["bob"]
    assert "total" in cli("usage", "--since", "1d") and "GPU-hours from" in cli("usage")
    for columns in (80, 160):  # issue 30: the span, as the table's title, wrapped at the table's width
        monkeypatch.setattr(common.console, "_width", columns)  # a terminal this wide (COLUMNS is read once)
        out = cli("usage", "--since", "1d").splitlines()
        assert re.fullmatch(r"GPU-hours from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d to now", out[0]), out
        assert out[1].split() == ["USER", "JOBS", "GPU-HOURS", "CPU-HOURS"] and out[-1].split()[0] == "total", out
        assert max(map(len, out)) <= columns

    assert cli("logs", str(mine), "--tail", "2") == "line 4\n" + next(
        line for line in s.client().get(f"/v1/jobs/{mine}/logs").text.splitlines(keepends=True)[-1:])
    assert "line 3" in cli("logs", str(mine), "-n", "3")

    # a run over several nodes (Ray) writes node K's ranks to runs/RUN/part-K/output.log: made by hand here
    run_id = s.client().get(f"/v1/jobs/{mine}/runs").json()["runs"][-1]["run"]
    part = s.state / "jobs" / str(mine) / "runs" / str(run_id) / "part-1"
    part.mkdir(parents=True)
    (part / "output.log").write_text("rank 2 on node 1\nrank 3 on node 1\n")
    assert cli("logs", str(mine), "--node", "1") == "rank 2 on node 1\nrank 3 on node 1\n"
    assert cli("logs", str(mine), "--node", "1", "--run", str(run_id), "--tail", "1") == "rank 3 on node 1\n"
    (part.parent / "part-2").mkdir()
    (part.parent / "part-2" / "output.log").symlink_to(s.state / "admin.token")  # a job's planted link
    assert s.client().get(f"/v1/jobs/{mine}/logs", params={"node": 2}).content == b""

    def error(*args: str, who: dict[str, str] = env) -> str:
        return one_line_error(run_here(list(args), who, monkeypatch, capsys))

    assert f"run {run_id} of job {mine} has no node 3" in error("logs", str(mine), "--node", "3")
    assert f"job {mine} has no run 99999" in error("logs", str(mine), "--node", "1", "--run", "99999")
    assert "--run goes with --node" in error("logs", str(mine), "--run", "1")

    assert "only an admin token sees another user's jobs (admin)" in error("jobs", "--user", "admin", who=bob_env)
    assert "only an admin token sees another user's usage" in error("usage", "--user", "admin", who=bob_env)
    assert "unknown field 'bogus'; the fields are id, name" in error("jobs", "--fields", "id,bogus")
    assert "'someday' is not a time" in error("usage", "--since", "someday")
    assert "--until" in error("jobs", "--since", "now", "--until", "1d")
    r = s.client().get("/v1/jobs", params={"since": 10, "until": 5})
    assert r.status_code == 422 and "'until' is before 'since'" in r.json()["detail"]
    r = s.client().get("/v1/accounting", params={"since": -1})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "since"
    r = s.client().get("/v1/jobs/1/logs", params={"tail": 0})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "tail"
