"""Pinning, draining and GPU health on the Ray executor (issue 30): two Ray nodes of one host (the same
host name, so a node is named by its id), each with 2 virtual GPUs, and a fake ``nvidia-smi`` that
each node's agent runs (it says GPU 1 of every node has ECC errors)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support.ray_cluster import RayCluster
from support.server import PY, Server, wait_for

SLEEP = [PY, "-c", "import time; time.sleep(600)"]


def test_pins_drains_and_unhealthy_gpus_on_ray_nodes(tmp_path: Path, ray_cluster: RayCluster,
                                                     ray_servers: Callable[..., Server]) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0, GPU-a, 0, No, No\\n1, GPU-b, 5, No, No\\n'\n")
    smi.chmod(0o755)
    s = ray_servers(tmp_path / "state", "--gpu-health", str(smi), "--gpu-health-interval", "1")

    def nodes() -> list[dict]:  # type: ignore[type-arg]
        return sorted(s.client().get("/v1/nodes").json()["nodes"], key=lambda n: n["gpus"][0])

    wait_for(lambda: len(nodes()) == 2 and all(n["unhealthy"] for n in nodes()), 30.0,
             what="both agents' health probes")
    first, second = nodes()
    assert first["unhealthy"] == {str(first["gpus"][1]): "5 uncorrectable ECC errors since boot"}
    assert first["name"] == second["name"], "two Ray nodes of one host share its name"
    r = s.client().post("/v1/jobs", json={"command": SLEEP, "gpus": 1, "node": first["name"]})
    assert r.status_code == 422 and "give one's id" in r.text

    pinned = s.submit(SLEEP, node=second["id"])
    assert s.wait_state(pinned, "running", 30)["assigned_gpus"] == [second["gpus"][0]], "its healthy GPU"
    assert s.client().post(f"/v1/nodes/{second['id']}/drain").status_code == 200
    waits = s.submit(SLEEP, node=second["id"])
    wait_for(lambda: "which is drained" in (s.job(waits)["pending_reason"] or ""), 20.0, what="the drained reason")
    free = s.submit(SLEEP)
    assert s.wait_state(free, "running", 30)["assigned_gpus"] == [first["gpus"][0]]
    assert s.job(pinned)["state"] == "running", "the drained node's job goes on"
    other = s.submit(SLEEP)  # GPU 1 of each node is unhealthy, node 2 drained: nothing is left
    wait_for(lambda: "waiting for 1 GPU (0 free)" in (s.job(other)["pending_reason"] or ""), 20.0,
             what="the last job to wait")
