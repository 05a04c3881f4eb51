"""Helpers of the Ray executor tests: a multi-node Ray cluster on this machine (``ray.cluster_utils``)
and `tesserae server --executor ray` subprocesses on it.

The runtime tests' helpers (``support.server``: the server handle, polling, the toy
job) are reused as they are.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.server import PY, REPO, Server, kill_jobs, runs_of, start_server, toy, toy_value, wait_for

__all__ = ["PY", "RANK_JOB", "REPO", "RayCluster", "Server", "kill_jobs", "runs_of", "start_ray_server", "toy",
           "toy_value", "wait_for"]

RANK_JOB = REPO / "tests" / "ray" / "rank_job.py"
AGENT_NAMESPACE = "tesserae"
# Node death is noticed by the GCS after health checks fail: make that quick for the tests.
FAST_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
               "health_check_failure_threshold": 3, "health_check_timeout_ms": 500}


@dataclass
class RayCluster:
    """A head without GPUs and worker nodes with (virtual) GPUs, all on this machine."""

    cluster: Any
    gpu_nodes: list[Any] = field(default_factory=list)

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add_gpu_node(self, gpus: int = 2) -> Any:
        node = self.cluster.add_node(num_cpus=1, num_gpus=gpus)
        self.gpu_nodes.append(node)
        self.cluster.wait_for_nodes()
        return node

    def remove(self, node: Any) -> None:
        self.gpu_nodes.remove(node)
        self.cluster.remove_node(node)

    def total_gpus(self) -> int:
        import ray

        return int(sum(n["Resources"].get("GPU", 0) for n in ray.nodes() if n["Alive"]))

    def free_agents(self, timeout: float = 30.0) -> None:
        """Kill every Tesserae agent left on the cluster and wait until Ray has all GPUs back."""
        import ray

        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["namespace"] == AGENT_NAMESPACE and entry["name"].startswith("tesserae-agent-"):
                with contextlib.suppress(ValueError):
                    ray.kill(ray.get_actor(entry["name"], namespace=AGENT_NAMESPACE))
        wait_for(lambda: ray.available_resources().get("GPU", 0) >= self.total_gpus(), timeout, 0.1,
                 "the agents' GPUs to return to Ray")

    def node_of(self, server: Server, job_id: int) -> str | None:
        """The Ray node id (first 12 characters) whose GPUs run ``job_id``, from the API's GPU names."""
        info = server.client().get("/v1/cluster").json()
        for g in info["gpus"]:
            if any(j["job"] == job_id for j in g["jobs"]):
                return str(g["name"].rsplit("(node ", 1)[1].rstrip(")"))
        return None


def start_ray_server(state: Path, address: str, *extra: str, policy: str = "fifo", round_seconds: float = 1.0,
                     grace: float = 3.0, env: dict[str, str] | None = None, timeout: float = 90.0) -> Server:
    """Start `tesserae server --executor ray --ray-address ADDRESS`; return once it answers /healthz."""
    return start_server(state, *extra, policy=policy, round_seconds=round_seconds, grace=grace, env=env,
                        timeout=timeout, executor_args=("--executor", "ray", "--ray-address", address))
