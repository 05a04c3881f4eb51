"""Pinning a job to a node and draining a node, on a real server through the CLI (issue 30).

The local executor with virtual GPUs of two types has two nodes (ids 0 and 1: one per type), so
the tests pin and drain without a second machine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from support.cli import one_line_error, run_here
from support.server import PY, Server, wait_for
from tesserae.runtime.store import nodes as drained_nodes
from tesserae.runtime.store.database import DB_NAME, Store

TWO_NODES = ("--gpu-type", "v100:2,k80:2")


def _sleeper(seconds: float) -> list[str]:
    return [PY, "-c", f"import time; time.sleep({seconds})"]


def _gpus(s: Server, job_id: int) -> list[int]:
    return list(s.wait_state(job_id, "running")["assigned_gpus"])


def test_pinned_jobs_run_on_their_node_or_wait_with_a_reason(tmp_path: Path, servers: Callable[..., Server],
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    s = servers(tmp_path / "state", *TWO_NODES, gpus=4, policy="fifo", grace=1.0)
    env = s.env()

    def cli(*args: str):  # type: ignore[no-untyped-def]
        return run_here(list(args), env, monkeypatch, capsys)

    p = cli("node", "list")
    assert p.returncode == 0 and "v100" in p.stdout and "k80" in p.stdout, p.stdout
    names = {n["id"]: n["name"] for n in s.client().get("/v1/nodes").json()["nodes"]}
    assert set(names) == {"0", "1"}
    assert "no node 'nosuch'" in one_line_error(cli("submit", "--node", "nosuch", "--", *_sleeper(1)))
    assert "'gpus'" in one_line_error(cli("submit", "--node", "1", "--gpus", "3", "--", *_sleeper(1)))
    r = s.client().post("/v1/jobs", json={"command": _sleeper(1), "gpus": 1, "node": "1", "gpu_type": "v100"})
    assert r.status_code == 422 and "k80 GPUs, not v100" in r.text

    p = cli("submit", "--node", names["1"], "--gpus", "2", "--", *_sleeper(600))  # by name
    assert p.returncode == 0, p.stderr
    first = int(p.stdout.split()[0])
    assert _gpus(s, first) == [2, 3], "node 1 holds GPUs 2 and 3"
    p = cli("submit", "--node", "1", "--", *_sleeper(600))
    second = int(p.stdout.split()[0])
    free = s.submit(_sleeper(600))  # unpinned: node 0 has room
    assert set(_gpus(s, free)) <= {0, 1}
    job = s.job(second)
    assert job["state"] == "queued" and job["node"] == "1"
    assert "pinned to node" in job["pending_reason"] and "waiting for 1 GPU there (0 free)" in job["pending_reason"]
    p = cli("show", str(second))
    assert "pinned to node" in p.stdout and "node" in p.stdout

    p = cli("update", str(second), "--node", "any")  # scontrol update: let it run anywhere
    assert p.returncode == 0 and "node any" in p.stdout
    assert set(_gpus(s, second)) <= {0, 1}
    waiting = s.submit(_sleeper(1), node="0")
    assert "no node 'gone'" in one_line_error(cli("update", str(waiting), "--node", "gone"))
    script = tmp_path / "pinned.sh"
    script.write_text("#!/bin/sh\n#TESSERAE --node 1\n#TESSERAE --gpus 1\nsleep 600\n")
    p = cli("batch", str(script))  # sbatch -w: node 1 is full, so it waits there
    assert p.returncode == 0, p.stderr
    job = s.job(int(p.stdout))
    assert job["node"] == "1" and job["state"] == "queued" and "pinned to node" in job["pending_reason"]


def test_drain_keeps_new_runs_off_a_node_its_jobs_go_on_and_it_survives_a_restart(
        tmp_path: Path, servers: Callable[..., Server], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    s = servers(state, *TWO_NODES, gpus=4, policy="fifo", grace=1.0)
    r = s.client().post("/v1/tokens", json={"user": "alice"})
    alice = r.json()["token"]

    def cli(*args: str, token: str | None = None):  # type: ignore[no-untyped-def]
        return run_here(list(args), s.env(token), monkeypatch, capsys)

    on_one = s.submit(_sleeper(600), node="1")
    assert _gpus(s, on_one) == [2]
    assert "only an admin token can drain" in one_line_error(cli("node", "drain", "1", token=alice))
    assert "no node 'nosuch'" in one_line_error(cli("node", "drain", "nosuch"))
    p = cli("node", "drain", "1", "--reason", "bad fan")
    assert p.returncode == 0 and "drained" in p.stderr, p.stderr
    assert s.client().post("/v1/nodes/1/drain", headers={"Authorization": f"Bearer {alice}"}).status_code == 403

    spread = [s.submit(_sleeper(600)) for _ in range(3)]  # 3 one-GPU jobs; only node 0's 2 GPUs are open
    for j in spread[:2]:
        assert set(_gpus(s, j)) <= {0, 1}
    late = s.job(spread[2])
    assert late["state"] == "queued" and "waiting for 1 GPU (0 free)" in late["pending_reason"], late
    pinned = s.submit(_sleeper(600), node="1")
    assert "pinned to node" in s.job(pinned)["pending_reason"] and "drained" in s.job(pinned)["pending_reason"]
    assert s.job(on_one)["state"] == "running", "the drained node's job goes on"
    p = cli("node", "list")
    assert "drained" in p.stdout and "bad fan" in p.stdout

    s.stop()  # the drain is in the store: a new server keeps it
    store = Store(state / DB_NAME, create=False)
    try:
        assert [r["reason"] for r in drained_nodes.drained(store).values()] == ["bad fan"]
    finally:
        store.close()
    s = servers(state, *TWO_NODES, gpus=4, policy="fifo", grace=1.0)
    nodes = s.client().get("/v1/nodes").json()["nodes"]
    assert [n["drained"] is not None for n in nodes] == [False, True]
    assert nodes[1]["drained"]["reason"] == "bad fan"
    wait_for(lambda: all(s.job(j)["state"] != "running" or set(s.job(j)["assigned_gpus"]) <= {0, 1}
                         for j in (*spread, pinned)), 10.0, what="jobs to run on node 0 only")
    running = [s.job(j) for j in (*spread, pinned)]
    assert all(g in (0, 1) for j in running if j["state"] == "running" for g in j["assigned_gpus"])

    p = cli("node", "undrain", "1")
    assert p.returncode == 0 and "back in service" in p.stderr

    def node_one_busy() -> bool:
        gpus = s.client().get("/v1/cluster").json()["gpus"]
        return all(g["jobs"] for g in gpus[2:])

    wait_for(node_one_busy, 20.0, what="node 1's GPUs to take waiting jobs once undrained")
    job = s.job(pinned)
    assert (job["state"] == "running" and set(job["assigned_gpus"]) <= {2, 3}) or \
        "waiting for 1 GPU there (0 free)" in job["pending_reason"], job


def test_a_version_5_store_gets_the_node_column_and_the_drain_table(tmp_path: Path) -> None:
    path = tmp_path / DB_NAME
    store = Store(path)
    store.execute("ALTER TABLE jobs DROP COLUMN node")
    store.execute("DROP TABLE drained_nodes")
    store.execute("UPDATE meta SET value='5' WHERE key='schema_version'")
    store.close()
    store = Store(path, create=False)
    try:
        assert "node" in {c["name"] for c in store.query("PRAGMA table_info(jobs)")}
        assert drained_nodes.drain(store, "n1", "root", "", 1.0) and drained_nodes.drained(store)["n1"]["by"] == "root"
        assert store.meta("schema_version") == "6"
    finally:
        store.close()
