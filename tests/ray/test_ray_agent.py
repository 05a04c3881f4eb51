"""The node agent as a Ray actor on a node of the test cluster: what it reports, the environment its
job processes get (the node's interface for gloo and NCCL), the lease of a part, and its exit once
idle (so a server gone for good leaves no actor behind)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from support.ray_cluster import PY, RayCluster, wait_for


def test_agent_starts_a_part_with_the_node_environment_and_exits_when_idle(
        tmp_path: Path, ray_cluster: RayCluster) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from tesserae.runtime.ray.agent import NodeAgent

    node = ray_cluster.gpu_nodes[0]
    name = "tesserae-agent-test-idle"
    agent = ray.remote(NodeAgent).options(
        name=name, namespace="tesserae", lifetime="detached", num_cpus=0, num_gpus=2, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)).remote(node.node_id, 1.5)
    info = ray.get(agent.info.remote("a100"), timeout=60)
    assert info["node_id"] == node.node_id
    assert [(d, t, virtual) for d, t, _, _, virtual in info["gpus"]] == [("0", "a100", True), ("1", "a100", True)]

    run = tmp_path / "run"
    part = run / "part-0"
    spec = {"part_dir": str(part), "log": str(tmp_path / "out.log"), "cwd": str(tmp_path), "marker": str(run),
            "argv": [PY, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
            "env": {"CUDA_VISIBLE_DEVICES": "1", "JOB_OWN": "x"}, "nproc": 1, "first_rank": 0, "world": 1,
            "node_ip": info["ip"], "renewal": {"sent": time.time(), "seconds": 60.0}}
    assert "error" in ray.get(agent.spawn.remote({**spec, "renewal": {"sent": time.time() - 61, "seconds": 60.0}}))
    assert "pid" in ray.get(agent.spawn.remote(spec), timeout=30)
    wait_for(lambda: not ray.get(agent.poll.remote())[str(part)]["alive"], 20, 0.1, "the part to end")
    st = ray.get(agent.poll.remote())[str(part)]
    assert st["code"] == 0 and not st["orphaned"]
    env = json.loads((tmp_path / "out.log").read_text().splitlines()[0])
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["JOB_OWN"] == "x" and env["RANK"] == "0"
    assert env["TESSERAE_RAY_PART"] == str(part) and env["TESSERAE_RUN_MARKER"] == str(run)
    assert not [k for k in env if k.startswith("RAY_")] and "OMP_NUM_THREADS" not in env  # Ray's, not the job's
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == info["iface"] is not None

    # A part whose lease is not renewed is stopped on its node: polls without a renewal do not count.
    leased = run / "part-1"
    long = {**spec, "part_dir": str(leased), "argv": [PY, "-c", "import time; time.sleep(60)"],
            "renewal": {"sent": time.time(), "seconds": 2.0}}
    assert "pid" in ray.get(agent.spawn.remote(long), timeout=30)
    t0 = time.monotonic()
    wait_for(lambda: not ray.get(agent.poll.remote())[str(leased)]["alive"], 20, 0.1, "the lease to run out")
    assert 1.0 < time.monotonic() - t0 < 10.0
    assert ray.get(agent.poll.remote())[str(leased)]["orphaned"]

    def gone() -> bool:
        return name not in {e["name"] for e in ray.util.list_named_actors(all_namespaces=True)}

    wait_for(gone, 20, 0.2, "the idle agent to exit")
    wait_for(lambda: ray.available_resources().get("GPU", 0) >= ray_cluster.total_gpus(), 20, 0.1,
             "its GPUs to return to Ray")
