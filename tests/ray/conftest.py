"""Fixtures of the Ray executor tests: one multi-node Ray cluster on this machine for the session (a
head without GPUs and two nodes with 2 virtual GPUs each), and servers on it. Every test gets the
cluster back as it found it: two GPU nodes and no Tesserae agent (a test that removes a node adds
one back). Everything started is stopped at the end: servers, job processes, agents, the cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.ray_cluster import FAST_HEALTH, RayCluster, Server, start_ray_server
from support.server import servers_started_by


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'tesserae[ray]')")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "num_gpus": 0, "_system_config": FAST_HEALTH})
    rc = RayCluster(cluster)
    try:
        rc.add_gpu_node()
        rc.add_gpu_node()
        ray.init(address=cluster.address, namespace="tesserae-tests", include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR")
        yield rc
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def ray_servers(ray_cluster: RayCluster) -> Iterator[Callable[..., Server]]:
    """Factory of `tesserae server --executor ray` on the session cluster; all cleaned up afterwards."""
    def start(state: Path, *extra: str, **kw: Any) -> Server:
        return start_ray_server(state, ray_cluster.address, *extra, **kw)

    with servers_started_by(start) as make:
        yield make
    ray_cluster.free_agents()
    while len(ray_cluster.gpu_nodes) < 2:
        ray_cluster.add_gpu_node()
