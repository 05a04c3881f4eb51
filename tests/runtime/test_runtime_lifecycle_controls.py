"""Lifecycle controls and waiting-job visibility on a real server (issue 14, item 4 and "Build"):
pending reasons and queue positions, a live WAITED, time limits, retries with backoff,
dependencies, arrays, hold/release, resubmission; each control outlives a controller restart."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from support.cli import one_line_error, run_here
from support.server import PY, Server, toy, wait_for
from tesserae.runtime.commands.common import console


def _sleeper(seconds: float) -> list[str]:
    return [PY, "-c", f"import time; time.sleep({seconds})"]


def test_waiting_jobs_say_why_where_and_how_long(tmp_path: Path, servers: Callable[..., Server],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    s = servers(tmp_path / "state", gpus=2, policy="fifo", grace=1.0)
    big = s.submit(_sleeper(600), gpus=2, name="big")
    s.wait_state(big, "running")
    second = s.submit(_sleeper(1), gpus=2, name="second")
    small = s.submit(_sleeper(1), gpus=1, name="small")
    held = s.submit(_sleeper(1), gpus=1, name="held", hold=True)
    later = s.submit(_sleeper(1), gpus=1, name="later", after=[second])

    j = wait_for(lambda: (v := s.job(second))["queue_position"] == 1 and v, 20, 0.1, "a position")
    assert j["pending_reason"] == "waiting for 2 GPUs (0 free)" and j["waited_seconds"] >= 0
    assert s.job(small)["queue_position"] == 2 and s.job(small)["pending_reason"] == "waiting for 1 GPU (0 free)"
    h = s.job(held)
    assert h["queue_position"] is None and h["pending_reason"] == f"held (tesserae release {held})" and h["held"]
    dep = s.job(later)
    assert dep["queue_position"] is None and dep["pending_reason"].startswith(f"dependency on job {second} (queued")
    first_wait = s.job(second)["waited_seconds"]
    wait_for(lambda: s.job(second)["waited_seconds"] > first_wait + 0.3, 10, 0.1, "WAITED to grow while it waits")
    assert s.job(big)["pending_reason"] is None and s.job(big)["queue_position"] is None

    env = s.env()
    monkeypatch.setattr(console, "width", 250)  # one line per job (capsys is no terminal: 80 columns)
    p = run_here(["jobs"], env, monkeypatch, capsys)
    assert p.returncode == 0 and "#1 waiting for 2 GPUs (0 free)" in p.stdout and "held (tesserae release" in p.stdout
    assert "WAITED" in p.stdout
    p = run_here(["show", str(second)], env, monkeypatch, capsys)
    assert "#1 waiting for 2 GPUs (0 free)" in p.stdout
    p = run_here(["cluster"], env, monkeypatch, capsys)
    assert "queue: 4 waiting" in p.stdout and "waiting for 2 GPUs (0 free)" in p.stdout, p.stdout
    assert p.stdout.index("second") < p.stdout.index("small") < p.stdout.index("held")
    info = s.client().get("/v1/cluster").json()
    assert [q["id"] for q in info["queue"]] == [second, small, held, later]
    assert [q["position"] for q in info["queue"]] == [1, 2, None, None]

    p = run_here(["logs", str(second)], env, monkeypatch, capsys)  # before: nothing printed, exit 0
    assert p.returncode == 1 and p.stdout == ""
    assert f"job {second} has not started yet (queued, #1 in the queue, waiting for 2 GPUs (0 free))" in p.stderr

    assert "only a waiting job can be held" in s.client().post(f"/v1/jobs/{big}/hold").json()["detail"]
    assert s.client().post(f"/v1/jobs/{small}/release").status_code == 409
    s.client().post(f"/v1/jobs/{big}/cancel")
    for job_id in (second, small, later):
        s.wait_state(job_id, "completed", timeout=30)
    assert s.job(held)["state"] == "queued"
    p = run_here(["release", str(held)], env, monkeypatch, capsys)
    assert p.returncode == 0 and f"job {held}: released" in p.stdout
    done = s.wait_state(held, "completed", timeout=30)
    assert [e["kind"] for e in done["events"]][:3] == ["submitted", "released", "started"]
    assert done["waited_seconds"] >= s.job(second)["waited_seconds"] > 0


def test_time_limit_retries_and_dependencies(tmp_path: Path, servers: Callable[..., Server]) -> None:
    s = servers(tmp_path / "state", gpus=2, policy="fifo", grace=1.0)
    limited = s.submit(toy(10000, 0.05), time_limit=1.5, retries=3, retry_backoff=0)
    flaky = s.submit(["test -f tried && exit 0; touch tried; exit 3"], shell=True, retries=2, retry_backoff=0.5)
    hopeless = s.submit(["exit 4"], shell=True, retries=2, retry_backoff=0.2)
    after_any = s.submit(["echo after any"], shell=True, after=[hopeless])
    after_ok = s.submit(["echo never"], shell=True, after_ok=[hopeless])
    chained = s.submit(["echo never either"], shell=True, after_ok=[after_ok])
    after_ok_flaky = s.submit(["echo flaky made it"], shell=True, after_ok=[flaky])

    j = s.wait_state(limited, ("failed", "completed"), timeout=40)
    assert j["state"] == "failed" and j["reason"] == "reached its time limit (1.5 s of run time)", j["reason"]
    assert 1.5 <= j["executed_seconds"] < 6 and j["retries_used"] == 0  # a time limit is not retried
    assert "timeout" in [e["kind"] for e in j["events"]]

    f = s.wait_state(flaky, ("failed", "completed"), timeout=30)
    assert f["state"] == "completed" and f["retries_used"] == 1
    kinds = [e["kind"] for e in f["events"]]
    assert kinds.count("started") == 1 and kinds.count("resumed") == 1 and "retrying" in kinds
    retry_at = next(e for e in f["events"] if e["kind"] == "retrying")
    restart = next(e for e in f["events"] if e["kind"] == "resumed")
    assert restart["time"] >= retry_at["detail"]["at"] - 0.01  # the backoff was waited out

    h = s.wait_state(hopeless, "failed", timeout=30)
    assert h["retries_used"] == 2 and h["exit_code"] == 4 and h["reason"] == "exited with code 4"
    delays = [e["detail"]["at"] - e["time"] for e in h["events"] if e["kind"] == "retrying"]
    assert [round(d, 3) for d in delays] == [0.2, 0.4]  # doubled

    assert s.wait_state(after_any, "completed", timeout=30)["first_start_time"] >= h["finish_time"]
    a = s.wait_state(after_ok, "cancelled", timeout=30)
    assert a["reason"] == f"dependency never satisfied: job {hopeless} failed (it had to complete)"
    c = s.wait_state(chained, "cancelled", timeout=30)
    assert c["reason"] == f"dependency never satisfied: job {after_ok} cancelled (it had to complete)"
    assert s.wait_state(after_ok_flaky, "completed", timeout=30)["first_start_time"] >= f["finish_time"]

    resubmitted = s.client().post(f"/v1/jobs/{hopeless}/resubmit")
    assert resubmitted.status_code == 201, resubmitted.text
    r = resubmitted.json()
    assert r["id"] > chained and r["resubmit_of"] == hopeless and r["retries"] == 2 and r["state"] == "queued"
    assert s.wait_state(r["id"], "failed", timeout=30)["retries_used"] == 2
    assert s.client().post(f"/v1/jobs/{after_any}/resubmit").status_code == 201
    running = s.submit(_sleeper(600))
    s.wait_state(running, "running")
    assert "only an ended job" in s.client().post(f"/v1/jobs/{running}/resubmit").json()["detail"]


def test_arrays_run_one_task_per_index(tmp_path: Path, servers: Callable[..., Server],
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    s = servers(tmp_path / "state", gpus=2, policy="fifo", grace=1.0)
    p = run_here(["submit", "--array", "0-4:2,7", "--", PY, "-c",
                  "import os; print('task', os.environ['TESSERAE_ARRAY_INDEX'], 'of', "
                  "os.environ['TESSERAE_ARRAY_JOB_ID'])"], s.env(), monkeypatch, capsys)
    assert p.returncode == 0, p.stderr
    ids = [int(x) for x in p.stdout.split()]
    assert len(ids) == 4 and ids == list(range(ids[0], ids[0] + 4))
    for job_id, index in zip(ids, (0, 2, 4, 7), strict=True):
        j = s.wait_state(job_id, "completed", timeout=30)
        assert j["array_index"] == index and j["array_job"] == ids[0]
        assert f"task {index} of {ids[0]}" in s.client().get(f"/v1/jobs/{job_id}/logs").text
    # a retried array submission (same key) gets the same tasks back, not new ones
    body = {"command": ["true"], "gpus": 1, "array": "1-3"}
    first = s.client().post("/v1/jobs", json=body, headers={"Idempotency-Key": "arr-1"}).json()
    again = s.client().post("/v1/jobs", json=body, headers={"Idempotency-Key": "arr-1"})
    assert again.status_code == 200 and again.json()["array_job_ids"] == first["array_job_ids"]
    assert len(first["array_job_ids"]) == 3


def test_controls_survive_a_controller_restart(tmp_path: Path, servers: Callable[..., Server]) -> None:
    state = tmp_path / "state"
    s = servers(state, gpus=2, policy="fifo", grace=1.0)
    blocker = s.submit(_sleeper(600))
    limited = s.submit(toy(10000, 0.05), time_limit=4.0)
    held = s.submit(["echo was held"], shell=True, hold=True)
    waiting = s.submit(["echo after the blocker"], shell=True, after=[blocker])
    s.wait_state(blocker, "running")
    wait_for(lambda: s.job(limited)["executed_seconds"] >= 1.0, 20, 0.1, "the limited job to run a while")
    s.kill()  # SIGKILL: its jobs keep running, the next controller adopts them
    s2 = servers(state, gpus=2, policy="fifo", grace=1.0)
    # the run went on while no controller watched it: the limit holds from the moment one is back
    at_restart = s2.job(limited)["executed_seconds"]
    assert s2.job(held)["held"] and s2.job(held)["pending_reason"].startswith("held")
    assert s2.job(waiting)["pending_reason"].startswith(f"dependency on job {blocker}")
    j = s2.wait_state(limited, ("failed", "completed"), timeout=40)
    slack = 3.0 * float(os.environ.get("TESSERAE_TEST_TIMEOUT_SCALE", "3"))  # a check a second, the grace, load
    assert j["reason"].startswith("reached its time limit"), j
    assert 4.0 <= j["executed_seconds"] < max(4.0, at_restart) + slack, (j["executed_seconds"], at_restart)
    assert s2.job(waiting)["state"] == "queued" and s2.job(held)["state"] == "queued"
    s2.client().post(f"/v1/jobs/{blocker}/cancel")
    s2.wait_state(waiting, "completed", timeout=30)
    s2.client().post(f"/v1/jobs/{held}/release")
    s2.wait_state(held, "completed", timeout=30)


@pytest.mark.parametrize(("body", "field"), [
    ({"array": "5-1"}, "array"), ({"array": "0-20000"}, "array"), ({"array": "x"}, "array"),
    ({"after": [99999]}, "after"), ({"after_ok": [0]}, "after_ok.0"), ({"retries": 101}, "retries"),
    ({"time_limit": 0}, "time_limit"), ({"retry_backoff": -1}, "retry_backoff"), ({"hold": "yes"}, "hold"),
    ({"after": list(range(1, 70))}, "after"),
])
def test_bad_lifecycle_input_is_a_422_naming_the_field(shared_server: Server, body: dict, field: str) -> None:
    r = shared_server.client().post("/v1/jobs", json={"command": ["true"], "gpus": 1, **body})
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["errors"]] == [field], r.text


@pytest.mark.parametrize(("args", "needle"), [
    (["submit", "--time-limit", "soon", "--", "true"], "'soon' is not a duration"),
    (["submit", "--array", "3-1", "--", "true"], "the range ends before it begins"),
    (["submit", "--after", "x", "--", "true"], "'x' is not a job id"),
    (["submit", "--retries", "500", "--", "true"], "--retries"),
    (["hold", "99999"], "job 99999 does not exist"),
    (["release"], "name the jobs to release"),
])
def test_bad_lifecycle_arguments_give_one_clear_line(shared_server: Server, args: list[str], needle: str,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert needle in one_line_error(run_here(args, shared_server.env(), monkeypatch, capsys))
