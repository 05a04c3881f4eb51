"""Slurm-grade job control on a real server, through the CLI (issue 30): cancel, hold and release by
ids and by filters (scancel -u/-n/-t), with each caller's permissions; update of a waiting job
(scontrol update); predicted times that honour time limits; GPUs of nodes that are not alive."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from support.cli import one_line_error, run_here
from support.server import PY, Server, wait_for


def _sleeper(seconds: float) -> list[str]:
    return [PY, "-c", f"import time; time.sleep({seconds})"]


def _token(s: Server, user: str) -> str:
    r = s.client().post("/v1/tokens", json={"user": user})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def _states(s: Server, ids: list[int]) -> list[str]:
    return [s.job(j)["state"] for j in ids]


def test_cancel_hold_release_by_ids_and_filters(tmp_path: Path, servers: Callable[..., Server],
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    s = servers(tmp_path / "state", gpus=2, policy="fifo", grace=1.0)
    alice, bob = _token(s, "alice"), _token(s, "bob")
    blocker = s.submit(_sleeper(600), gpus=2, name="blocker", token=alice)
    s.wait_state(blocker, "running")
    sweep = [s.submit(_sleeper(1), name="sweep", token=alice) for _ in range(3)]
    other = s.submit(_sleeper(1), name="other", token=alice)
    bobs = [s.submit(_sleeper(1), name="sweep", token=bob) for _ in range(2)]
    as_alice, as_bob, as_admin = s.env(alice), s.env(bob), s.env()

    def cli(env: dict[str, str], *args: str):  # type: ignore[no-untyped-def]
        return run_here(list(args), env, monkeypatch, capsys)

    p = cli(as_alice, "hold", "--name", "sweep")  # alice's jobs named sweep, not bob's
    assert p.returncode == 0, p.stderr
    assert [f"job {j}: held" in p.stdout for j in sweep] == [True] * 3 and "held 3 jobs" in p.stderr
    assert [s.job(j)["held"] for j in (*sweep, other, *bobs)] == [True, True, True, False, False, False]

    assert "only an admin token acts on another user's jobs (bob)" in one_line_error(
        cli(as_alice, "cancel", "--user", "bob"))
    p = cli(as_alice, "cancel", str(bobs[0]), str(other))  # the own one goes; the other is refused
    assert p.returncode == 2 and f"job {other}: cancelled" in p.stdout
    assert f"error: job {bobs[0]} belongs to another user" in p.stderr and "Traceback" not in p.stderr
    assert _states(s, [other, bobs[0]]) == ["cancelled", "queued"]

    p = cli(as_alice, "release", "--name", "sweep", "--state", "queued")
    assert p.returncode == 0 and "released 3 jobs" in p.stderr
    p = cli(as_alice, "hold", str(sweep[0]), str(sweep[0] + 10**6))
    assert p.returncode == 2 and f"job {sweep[0]}: held" in p.stdout and f"job {sweep[0] + 10**6} does not exist" \
        in p.stderr
    p = cli(as_alice, "release", str(sweep[1]))
    assert f"job {sweep[1]}: not released: it is not held" in one_line_error(p)

    p = cli(as_alice, "cancel", "--user", "alice", "--state", "queued")  # scancel -u alice -t PENDING
    assert p.returncode == 0, p.stderr
    assert "cancelled 3 jobs" in p.stderr and _states(s, sweep) == ["cancelled"] * 3
    assert s.job(blocker)["state"] == "running" and _states(s, bobs) == ["queued", "queued"]
    p = cli(as_bob, "cancel", "-n", "nothing-has-this-name")
    assert p.returncode == 0 and "cancelled 0 jobs" in p.stderr
    p = cli(as_admin, "cancel", "-u", "bob")
    assert p.returncode == 0 and "cancelled 2 jobs" in p.stderr and _states(s, bobs) == ["cancelled"] * 2
    p = cli(as_alice, "cancel", "--name", "blocker")
    assert p.returncode == 0 and f"job {blocker}: cancelling" in p.stdout and "(1 running: stopping)" in p.stderr
    s.wait_state(blocker, "cancelled")

    assert "name the jobs to cancel" in one_line_error(cli(as_alice, "cancel"))
    assert "'state'" in one_line_error(cli(as_alice, "cancel", "--state", "completed"))
    assert "'state': hold applies to queued or preempted jobs" in one_line_error(
        cli(as_alice, "hold", "--state", "running"))
    c = s.client(alice)
    assert c.post("/v1/bulk/cancel", json={}).status_code == 422
    assert c.post("/v1/bulk/cancel", json={"ids": list(range(1, 10002))}).status_code == 422
    assert c.post("/v1/bulk/explode", json={"ids": [1]}).status_code == 422
    assert c.post("/v1/bulk/cancel", json={"name": "x" * 201}).status_code == 422


def test_update_a_waiting_job(tmp_path: Path, servers: Callable[..., Server], monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    s = servers(tmp_path / "state", gpus=2, policy="fifo", grace=1.0)
    bob = _token(s, "bob")
    blocker = s.submit(_sleeper(600), gpus=2, name="blocker")
    s.wait_state(blocker, "running")
    waiting = s.submit(_sleeper(1), gpus=1, name="waiting", time_limit=3600.0)
    later = s.submit(_sleeper(1), gpus=1, name="later", after=[waiting])
    env = s.env()

    def cli(*args: str, as_env: dict[str, str] = env):  # type: ignore[no-untyped-def]
        return run_here(list(args), as_env, monkeypatch, capsys)

    p = cli("update", str(waiting), "--time-limit", "20s", "--gpus", "2")
    assert p.returncode == 0 and f"job {waiting}: time limit 20s; 2 GPUs" in p.stdout, p.stdout + p.stderr
    j = s.job(waiting)
    assert j["time_limit_seconds"] == 20 and j["gpus"] == 2 and j["events"][-1]["kind"] == "updated"

    assert "this cluster has 2 GPUs" in one_line_error(cli("update", str(waiting), "--gpus", "3"))
    assert "this server has no queues" in one_line_error(cli("update", str(waiting), "--queue", "research"))
    assert "only a waiting job can be updated" in one_line_error(cli("update", str(blocker), "--time-limit", "1h"))
    assert f"job {waiting} cannot wait for itself" in one_line_error(cli("update", str(waiting), "--after",
                                                                          str(waiting)))
    assert f"a dependency cycle: {waiting} -> {later} -> {waiting}" in one_line_error(
        cli("update", str(waiting), "--after", str(later)))
    assert "does not exist" in one_line_error(cli("update", str(waiting), "--after-ok", "999999"))
    assert "nothing to change" in one_line_error(cli("update", str(waiting)))
    assert "belongs to another user" in one_line_error(cli("update", str(waiting), "--gpus", "1",
                                                           as_env=s.env(bob)))
    assert s.job(waiting)["gpus"] == 2 and s.job(waiting)["time_limit_seconds"] == 20  # refusals changed nothing

    p = cli("update", str(later), "--after", "none")
    assert p.returncode == 0 and "after nothing" in p.stdout and s.job(later)["after"] == []
    r = s.client().patch(f"/v1/jobs/{waiting}", json={"time_limit": -1})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "time_limit"
    assert s.client().patch(f"/v1/jobs/{waiting}", json={"gpus": 1, "command": ["x"]}).status_code == 422

    s.client().post(f"/v1/jobs/{later}/cancel")
    assert "has ended (cancelled)" in one_line_error(cli("update", str(later), "--gpus", "1"))
    s.client().post(f"/v1/jobs/{blocker}/cancel")
    done = s.wait_state(waiting, "completed")
    assert done["gpus"] == 2 and len(s.client().get(f"/v1/jobs/{waiting}/runs").json()["runs"][0]["gpus"]) == 2


def test_predicted_ends_honour_time_limits(tmp_path: Path, servers: Callable[..., Server]) -> None:
    """A job that would run for ages but has --time-limit 20s is predicted to end 20 s after it starts."""
    s = servers(tmp_path / "state", gpus=2, policy="fifo", grace=1.0)
    forever = 10**9  # iterations: days of work at any rate
    blocker = s.submit(_sleeper(600), gpus=2, name="blocker", iterations=forever, time_limit=300.0)
    s.wait_state(blocker, "running")
    limited = s.submit(_sleeper(600), gpus=2, name="limited", iterations=forever, time_limit=20.0)

    def predicted() -> dict | None:  # type: ignore[type-arg]
        j = s.job(limited)
        return j if j["predicted_start"] is not None and j["predicted_finish"] is not None else None

    j = wait_for(predicted, 30, 0.2, "a prediction of the limited job")
    b = s.job(blocker)
    assert b["predicted_finish"] <= b["first_start_time"] + 300 + 5
    assert j["predicted_start"] >= b["predicted_finish"] - 1
    assert j["predicted_finish"] - j["predicted_start"] <= 20 + 5  # not days
    for job_id in (limited, blocker):
        s.client().post(f"/v1/jobs/{job_id}/cancel")


@pytest.mark.parametrize(("command", "where", "needle"), [
    (["python3", "train.py"], None, "'train.py' is a relative path, but the job runs in its own folder"),
    (["python3", "-u", "missing.py", "--lr", "1"], "workdir", "the script 'missing.py' does not exist in "),
    (["bash", "/no/such/run.sh"], None, "the script '/no/such/run.sh' does not exist on the server"),
    (["torchrun", "--nproc-per-node", "2", "train.py"], None, "'train.py' is a relative path"),
])
def test_a_script_that_cannot_exist_where_the_job_runs_is_refused(
        shared_server: Server, tmp_path: Path, command: list[str], where: str | None, needle: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Not accepted with a note and then failing: refused at submission, naming the script."""
    args = ["submit", *(["--workdir", str(tmp_path)] if where else []), "--", *command]
    p = run_here(args, shared_server.env(), monkeypatch, capsys)
    assert needle in one_line_error(p) and "'command'" in p.stderr


def test_scripts_that_exist_are_accepted(shared_server: Server, tmp_path: Path) -> None:
    from tesserae.runtime.api.models import script_argument

    (tmp_path / "ok.py").write_text("print('ok')\n")
    for command in (["python3", "ok.py"], ["python3", "-c", "print(1)"], ["python3", "-m", "json.tool", "--help"],
                    ["sh", "-c", "true"], ["python3", "-W", "ignore", str(tmp_path / "ok.py")]):
        r = shared_server.client().post("/v1/jobs", json={"command": command, "gpus": 1, "workdir": str(tmp_path)})
        assert r.status_code == 201, (command, r.text)
        shared_server.wait_state(int(r.json()["id"]), ("completed", "failed"))
    assert script_argument(["python", "-X", "dev", "t.py"]) == "t.py"
    assert script_argument(["/usr/bin/bash", "-e", "-o", "pipefail", "run.sh", "x"]) == "run.sh"
    assert script_argument(["bash", "-ec", "echo"]) is None and script_argument(["env", "python", "t.py"]) is None
    assert script_argument(["torchrun", "--module", "pkg"]) is None


def _in_process(tmp_path: Path, executor_class: type | None = None):  # type: ignore[no-untyped-def]
    """An app on a real controller and store, without a server process: (TestClient, admin headers, store)."""
    from fastapi.testclient import TestClient

    from tesserae.config import RunSpec, build_scheduler
    from tesserae.profiles.loader import load_profile
    from tesserae.runtime.api.app import create_app
    from tesserae.runtime.controller.loop import Controller
    from tesserae.runtime.executor.gpus import machine_cluster, virtual_gpus
    from tesserae.runtime.local.executor import LocalExecutor
    from tesserae.runtime.store.database import Store

    cluster, gpus = machine_cluster(virtual_gpus(4))
    store = Store(tmp_path / "t.db")
    executor = (executor_class or LocalExecutor)(gpus)
    controller = Controller(store, executor, build_scheduler(cluster, load_profile(None), RunSpec()), cluster,
                            tmp_path, log=lambda msg: None)
    headers = {"Authorization": f"Bearer {store.create_token('admin', admin=True)}"}
    return TestClient(create_app(controller, {"cluster": "4 GPUs"})), headers, store


def test_gpus_of_a_node_that_is_not_alive_are_unavailable_not_free(tmp_path: Path) -> None:
    """/v1/cluster as soon as the executor reports the node unreachable (Ray's agent not answering),
    before its runs are closed."""
    from dataclasses import replace

    from tesserae.runtime.local.executor import LocalExecutor

    class HalfReachable(LocalExecutor):
        def nodes(self):  # type: ignore[no-untyped-def]
            node = super().nodes()[0]
            return [replace(node, id="a", gpus=node.gpus[:2]), replace(node, id="b", gpus=node.gpus[2:],
                                                                       state="unreachable")]

    client, headers, store = _in_process(tmp_path, HalfReachable)
    with client as c:
        info = c.get("/v1/cluster", headers=headers).json()
    assert [g["available"] for g in info["gpus"]] == [True, True, False, False]
    assert [g["node_state"] for g in info["gpus"]][2:] == ["unreachable", "unreachable"]
    assert info["gpus_unavailable"] == 2 and info["gpus_free"] == 2 and info["gpus_in_use"] == 0
    store.close()


def test_a_filter_acts_on_at_most_max_bulk_jobs_per_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tesserae.runtime.api import control

    monkeypatch.setattr(control, "MAX_BULK", 3)
    client, headers, store = _in_process(tmp_path)
    with client as c:
        ids = [c.post("/v1/jobs", json={"command": ["true"], "gpus": 1, "name": "n"}, headers=headers).json()["id"]
               for _ in range(5)]
        first = c.post("/v1/bulk/hold", json={"name": "n"}, headers=headers).json()
        assert (first["count"], first["more"], [d["id"] for d in first["done"]]) == (3, True, ids[:3])
        second = c.post("/v1/bulk/hold", json={"name": "n"}, headers=headers).json()
        assert (second["count"], second["more"]) == (2, False)
        assert c.post("/v1/bulk/hold", json={"name": "n"}, headers=headers).json()["count"] == 0
    store.close()


_SCRIPT = """#!/bin/bash
# trains a model
#TESSERAE --gpus 2 --time-limit 10m
#TESSERAE --name=sweep --output "run-%j.out"

echo "args: $0 $*"
echo "to stderr" >&2
#TESSERAE --gpus 1
"""


def test_batch_reads_directives_and_writes_the_output_file(shared_server: Server, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.sh"
    script.write_text(_SCRIPT)
    env = shared_server.env()
    p = run_here(["batch", "--workdir", str(tmp_path), str(script), "a", "b c"], env, monkeypatch, capsys)
    assert p.returncode == 0, p.stderr
    job_id = int(p.stdout)
    script.write_text("exit 3\n")  # the job runs the copy sent at submission
    j = shared_server.wait_state(job_id, ("completed", "failed"))
    assert j["state"] == "completed" and j["gpus"] == 2 and j["time_limit_seconds"] == 600 and j["name"] == "sweep"
    assert j["output"] == "run-%j.out"
    out = (tmp_path / f"run-{job_id}.out").read_text()
    assert "args: train.sh a b c" in out and "to stderr" in out  # errors follow the output without --error
    script.write_text(_SCRIPT)
    p = run_here(["batch", "--gpus", "1", "--name", "other", "--error", "err-%j.txt", "--workdir", str(tmp_path),
                  str(script)], env, monkeypatch, capsys)  # the command line wins
    job_id = int(p.stdout)
    j = shared_server.wait_state(job_id, ("completed", "failed"))
    assert (j["state"], j["gpus"], j["name"]) == ("completed", 1, "other")
    assert (tmp_path / f"err-{job_id}.txt").read_text() == "to stderr\n"
    assert "args: train.sh" in (tmp_path / f"run-{job_id}.out").read_text()


@pytest.mark.parametrize(("text", "needle"), [
    ("#!/bin/sh\n#TESSERAE --gpus 2\n#TESSERAE --gpus two\ntrue\n", "line 3, field '--gpus': 'two' is not a positive"),
    ("#TESSERAE --time-limit soon\n", "line 1, field '--time-limit': 'soon' is not a duration"),
    ("\n#TESSERAE --colour red\n", "line 2, field '--colour': unknown option '--colour'"),
    ("#TESSERAE --array\n", "line 1, field '--array': needs a value"),
    ("#TESSERAE --name 'unclosed\n", "line 1: cannot split the directive"),
    ("#!/usr/bin/perl\nprint 1;\n", "line 1: the #! line names 'perl'"),
])
def test_a_bad_directive_names_the_script_line_and_option(shared_server: Server, tmp_path: Path, text: str,
                                                          needle: str, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "bad.sh"
    script.write_text(text)
    line = one_line_error(run_here(["batch", str(script)], shared_server.env(), monkeypatch, capsys))
    assert f"{script}, {needle}" in line, line


def test_output_files_stay_where_the_job_works(shared_server: Server, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    env = shared_server.env()
    for args, needle in ((["--output", "../../escape.txt"], "must stay inside the job's working folder"),
                         (["--output", "logs/out.txt"], "the job's own folder starts empty"),
                         (["--error", "/no/such/folder/err.txt"], "the folder /no/such/folder does not exist"),
                         (["--output", "out-%x.txt"], "'%x' is not a pattern")):
        p = run_here(["submit", *args, "--", "true"], env, monkeypatch, capsys)
        assert needle in one_line_error(p), args
    p = run_here(["submit", "--output", "out-%j.txt", "--", PY, "-c", "print('hello')"], env, monkeypatch, capsys)
    job_id = int(p.stdout)
    assert shared_server.wait_state(job_id, ("completed", "failed"))["state"] == "completed"
    found = list(shared_server.state.rglob(f"out-{job_id}.txt"))
    assert len(found) == 1 and found[0].read_text() == "hello\n" and found[0].parent.name == "work"
    assert str(job_id) in found[0].parts


def test_a_job_that_has_not_started_never_starts_and_ends_in_the_past() -> None:
    """The what-if's 'now / now': a prediction as old as the latest decision put a waiting job's start
    (and, with a short guessed run, its end) before now; both move with now, the run's length kept."""
    from tesserae.runtime.controller.prediction import not_started

    assert not_started(100.0, 130.0, now=160.0) == (160.0, 190.0)
    assert not_started(100.0, None, now=160.0) == (160.0, None)
    assert not_started(200.0, 230.0, now=160.0) == (200.0, 230.0)  # still ahead: as predicted
    assert not_started(None, None, now=160.0) == (None, None)


def test_every_server_log_line_carries_a_timestamp(shared_server: Server) -> None:
    import re
    from datetime import datetime

    lines = [line for line in shared_server.log().splitlines() if "tesserae server:" in line]
    assert any("listening on" in line for line in lines)
    for line in lines:
        m = re.match(r"^(\S+) tesserae server: ", line)
        assert m is not None, line
        stamp = datetime.fromisoformat(m.group(1))  # local time with its UTC offset, to the millisecond
        assert stamp.utcoffset() is not None and abs(stamp.timestamp() - datetime.now().timestamp()) < 86400
