"""`tesserae server --executor ray` on a multi-node Ray cluster (``ray.cluster_utils``, virtual GPUs):
gangs over two nodes, a node that dies, a node that joins, a controller that is killed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.ray_cluster import PY, RANK_JOB, REPO, RayCluster, Server, runs_of, toy, toy_value, wait_for
from tesserae.runtime.launch import procs
from tesserae.runtime.store.database import DB_NAME, Store


def _ranks(s: Server, job_id: int, world: int) -> list[dict[str, Any]]:
    folder = s.state / "jobs" / str(job_id) / "checkpoints"
    return [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(world)]


def _events(state: Path, job_id: int) -> list[str]:
    store = Store(state / DB_NAME, create=False)
    try:
        return [r["kind"] for r in store.query("SELECT kind FROM events WHERE job_id=? ORDER BY id", (job_id,))]
    finally:
        store.close()


def test_job_over_two_nodes_gets_one_world_and_stops_as_a_gang(
        tmp_path: Path, ray_cluster: RayCluster, ray_servers: Callable[..., Server]) -> None:
    s = ray_servers(tmp_path / "state")
    info = s.client().get("/v1/cluster").json()
    assert (info["executor"], info["cluster"], info["gpus_total"]) == ("ray", "2x2:v100", 4)
    node_ids = {n.node_id for n in ray_cluster.gpu_nodes}

    # One process per GPU (--nproc = GPUs): ranks 0-1 on the first node, 2-3 on the second.
    a = s.submit([PY, str(RANK_JOB)], gpus=4, nproc=4)
    s.wait_state(a, "completed", 60)
    recs = _ranks(s, a, 4)
    envs = [r["env"] for r in recs]
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"]
    assert [e["NODE_RANK"] for e in envs] == ["0", "0", "1", "1"] and {e["NNODES"] for e in envs} == {"2"}
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    nodes = [e["TESSERAE_NODE_ID"] for e in envs]
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3] and set(nodes) == node_ids
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}) == 1
    assert envs[0]["MASTER_ADDR"] == envs[0]["TESSERAE_NODE_IP"]
    assert {e["CUDA_VISIBLE_DEVICES"] for e in envs} == {"0,1"}  # each node's Ray GPU ids
    assert all(r["peers"] == [0, 1, 2, 3] for r in recs)  # they all met at MASTER_ADDR:MASTER_PORT

    # The default --nproc 1: one process per node.
    b = s.submit([PY, str(RANK_JOB)], gpus=4)
    s.wait_state(b, "completed", 60)
    envs = [r["env"] for r in _ranks(s, b, 2)]
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"]) for e in envs] == [("0", "0", "2"), ("1", "0", "2")]
    assert {e["TESSERAE_NODE_ID"] for e in envs} == node_ids

    # Stopped as a gang: cancelling it stops the processes on both nodes.
    c = s.submit([PY, str(RANK_JOB), "--hold", "120"], gpus=4, nproc=2)
    folder = s.state / "jobs" / str(c) / "checkpoints"
    wait_for(lambda: all((folder / f"rank-{r}.json").exists() for r in range(2)), 60, 0.1, "the rendezvous")
    pids = [r["pid"] for r in _ranks(s, c, 2)]
    assert all(procs.start_ticks(p) is not None for p in pids)
    r = s.client().post(f"/v1/jobs/{c}/cancel")
    assert r.status_code == 200, r.text
    s.wait_state(c, "cancelled", 30)
    wait_for(lambda: all(procs.start_ticks(p) is None for p in pids), 10, 0.05, "every rank to exit")


def test_a_node_that_dies_requeues_its_job_and_a_node_that_joins_runs_it(
        tmp_path: Path, ray_cluster: RayCluster, ray_servers: Callable[..., Server]) -> None:
    s = ray_servers(tmp_path / "state")
    done = tmp_path / "completions"
    # b first: under FIFO it keeps its GPUs when the cluster shrinks (a waits for the new node).
    b = s.submit(toy(500, 0.03, "--completions", str(done)), gpus=2, iterations=500)
    a = s.submit(toy(200, 0.05, "--checkpoint-every", "10", "--completions", str(done)), gpus=2, iterations=200)
    s.wait_state(a, "running")
    s.wait_state(b, "running")
    wait_for(lambda: s.job(a)["iterations_done"] >= 40, 30, 0.1, "job a to checkpoint")
    node_a, node_b = ray_cluster.node_of(s, a), ray_cluster.node_of(s, b)
    assert node_a and node_b and node_a != node_b
    victim = next(n for n in ray_cluster.gpu_nodes if n.node_id.startswith(node_a))

    ray_cluster.remove(victim)
    s.wait_state(a, ("preempted", "queued"), 20)  # requeued: its processes went with the node
    wait_for(lambda: s.client().get("/v1/cluster").json()["gpus_total"] == 2, 20, 0.1, "the node to leave the view")
    assert s.job(b)["state"] == "running" and ray_cluster.node_of(s, b) == node_b  # untouched

    new = ray_cluster.add_gpu_node()
    wait_for(lambda: ray_cluster.node_of(s, a) == new.node_id[:12], 30, 0.1, "job a to resume on the new node")
    assert s.client().get("/v1/cluster").json()["cluster"] == "2x2:v100"
    s.wait_state(a, "completed", 60)
    s.wait_state(b, "completed", 60)

    first, second = runs_of(s.state, a)
    assert first["end"] >= 40 and second["start"] == first["end"]  # resumed from its last checkpoint
    assert len(runs_of(s.state, b)) == 1 and s.job(b)["preemptions"] == 0
    assert "lost" in _events(s.state, a) and "lost" not in _events(s.state, b)
    lines = sorted(done.read_text().splitlines())
    assert lines == sorted([f"{a} {toy_value(200)}", f"{b} {toy_value(500)}"])  # each completed exactly once
    assert not any((s.state / "jobs" / str(j) / "checkpoints" / "overlap.log").exists() for j in (a, b))


def test_a_restarted_controller_adopts_the_gangs_that_kept_running(
        tmp_path: Path, ray_servers: Callable[..., Server]) -> None:
    state = tmp_path / "state"
    # The controller kills itself right after starting the gang, before it records the start (the
    # worst moment: only the write-ahead layout and the agents know the run).
    s = ray_servers(state, env={"TESSERAE_FAULT": "spawn:1"})
    a = s.submit([PY, str(RANK_JOB), "--hold", "8"], gpus=4, nproc=4)  # outlives the restart
    s.proc.wait(30)
    folder = state / "jobs" / str(a) / "checkpoints"
    wait_for(lambda: all((folder / f"rank-{r}.json").exists() for r in range(4)), 60, 0.1, "the rendezvous")
    pids = [r["pid"] for r in _ranks(s, a, 4)]
    assert all(procs.start_ticks(p) is not None for p in pids)  # the agents (detached) kept them running

    s2 = ray_servers(state)
    b = s2.submit(toy(20, 0.05), gpus=1, iterations=20)
    s2.wait_state(a, "completed", 60)
    s2.wait_state(b, "completed", 60)
    assert [r["pid"] for r in _ranks(s2, a, 4)] == pids  # the same processes: adopted, not restarted
    kinds = _events(state, a)
    assert kinds.count("started") == 1 and "adopted" in kinds and "resumed" not in kinds


def test_pytorch_ddp_over_two_nodes_trains_to_the_end(
        tmp_path: Path, ray_servers: Callable[..., Server]) -> None:
    """A real torch.distributed job (gloo on the CPU) whose two ranks are on two Ray nodes and meet at the
    MASTER_ADDR:MASTER_PORT the executor chose."""
    pytest.importorskip("torch", reason="PyTorch is not installed")
    s = ray_servers(tmp_path / "state")
    cmd = [PY, str(REPO / "examples" / "pytorch_trainer.py"), "--iterations", "30", "--device", "cpu",
           "--batch-size", "2", "--seq-len", "8", "--vocab", "32", "--d-model", "16", "--layers", "1", "--heads", "2",
           "--checkpoint-every", "0", "--log-every", "10"]
    j = s.submit(cmd, gpus=4, iterations=30)  # one process per node: world 2
    job = s.wait_state(j, ("completed", "failed"), 120)
    log = s.client().get(f"/v1/jobs/{j}/logs").text
    assert job["state"] == "completed", log
    assert "world 2" in log and "gpt: iteration 30 loss" in log
    manifest = json.loads((s.state / "jobs" / str(j) / "checkpoints" / "latest.json").read_text())
    assert manifest["iteration"] == 30
