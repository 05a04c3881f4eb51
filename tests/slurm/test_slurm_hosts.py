"""The Slurm executor on two hosts: the network namespaces of the two-host Ray tests (``two_hosts.Hosts``),
``slurmctld`` and node ``a`` on host A, node ``b`` on host B, 4 GPUs each, the state folder on the
shared folder (``support.slurm_cluster``).

- a run that spans both hosts: one Slurm job per host, every rank gets its node's GPUs, its rank
  and the rank-0 host's address and port, and all ranks meet there;
- host B cut off (its link down): Slurm marks node ``b`` not responding, the server revokes its
  run, which stops itself there (its launcher still reads the shared folder) and is started again
  on host A; it never runs on both hosts at once, and loses no more than its last checkpoint.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support import slurm_cluster, two_hosts

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm"),
              pytest.mark.skipif(two_hosts.usable() is not None, reason=str(two_hosts.usable()))]
RANK_JOB = REPO / "tests" / "ray" / "rank_job.py"
TOY = REPO / "examples" / "toy_trainer.py"


@dataclass
class Site:
    hosts: Any
    cluster: Any
    shared: Path
    state: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    why = slurm_cluster.usable()
    if why is not None:
        pytest.skip(why)
    shared = tmp_path_factory.mktemp("shared")
    with two_hosts.Hosts(shared) as hosts:
        cluster = slurm_cluster.SlurmCluster(shared / "slurm", hosts=hosts).start()
        state = shared / "state"
        try:
            hosts.run("a", f"tesserae server --state {two_hosts.SHARED_MOUNT}/state --executor slurm "
                           "--slurm-partition tess --round-seconds 1 --grace-seconds 2 --insecure-same-user "
                           "--host 127.0.0.1 --port 0 --detach", env=cluster.env(), timeout=180)
            yield Site(hosts, cluster, shared, state)
        finally:
            if (state / "server.json").exists():
                two_hosts.stop_server(hosts, state)
            cluster.stop()


def wait(cond: Any, timeout: float, what: str) -> Any:
    return two_hosts.wait_until(cond, timeout * 3, what, 0.1)


def test_a_run_spans_both_hosts_with_ranks_devices_and_its_master(site: Site) -> None:
    with site.hosts.network_of("a") as call:
        api = two_hosts.server_client(site.hosts, "a", site.state, call)
        assert api.cluster()["cluster"] == "2x4:a100"
        job = api.submit([sys.executable, str(RANK_JOB)], gpus=6, nproc=6)
        wait(lambda: api.job(job)["state"] in ("completed", "failed"), 120, "the job to end")
        folder = site.state / "jobs" / str(job)
        assert api.job(job)["state"] == "completed", (folder / "output.log").read_text()
    ranks = [json.loads((folder / "checkpoints" / f"rank-{r}.json").read_text()) for r in range(6)]
    assert all(r["peers"] == list(range(6)) for r in ranks)  # all met at rank 0's host
    by_node: dict[str, list[dict[str, Any]]] = {}
    for r in ranks:
        by_node.setdefault(r["env"]["TESSERAE_NODE_ID"], []).append(r["env"])
    assert sorted(len(v) for v in by_node.values()) == [2, 4]
    (big,) = (k for k, v in by_node.items() if len(v) == 4)
    assert all(e["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" for e in by_node[big])
    assert {e["MASTER_ADDR"] for e in map(lambda r: r["env"], ranks)} == {site.hosts[big].ip}
    assert len({e["MASTER_PORT"] for e in map(lambda r: r["env"], ranks)}) == 1
    assert {e["NNODES"] for e in map(lambda r: r["env"], ranks)} == {"2"}
    assert sorted({e["TESSERAE_NODE_IP"] for e in map(lambda r: r["env"], ranks)}) == ["10.200.0.1", "10.200.0.2"]


def test_host_b_cut_off_its_run_stops_there_before_it_runs_on_host_a(site: Site) -> None:
    hb = site.shared / "b.hb"
    with site.hosts.network_of("a") as call:
        api = two_hosts.server_client(site.hosts, "a", site.state, call)
        toy = [sys.executable, str(TOY), "--iterations", "100000", "--seconds-per-iteration", "0.05"]
        blocker = api.submit([*toy], gpus=4)
        wait(lambda: api.job(blocker)["state"] == "running", 60, "the blocker to run")
        job = api.submit([*toy, "--checkpoint-every", "10", "--heartbeat", f"{two_hosts.SHARED_MOUNT}/b.hb"], gpus=4)
        wait(lambda: api.job(job)["state"] == "running", 60, "the job to run")
        assert two_hosts.host_of(api, job) == "b", api.cluster()["gpus"]
        api.request("POST", f"/v1/jobs/{blocker}/cancel")
        wait(lambda: api.job(blocker)["state"] == "cancelled", 60, "the blocker to leave")
        wait(lambda: (api.job(job).get("iterations_done") or 0) >= 20, 60, "20 iterations")
        cut = time.time()
        site.hosts.link("b", False)
        try:
            wait(lambda: two_hosts.first_event(api, job, "resumed", cut) is not None, 90, "the job to restart")
            assert two_hosts.host_of(api, job) == "a"
        finally:
            site.hosts.link("b", True)
        restarted = two_hosts.first_event(api, job, "resumed", cut)
        wait(lambda: len({line.split()[0] for line in hb.read_text().splitlines()}) == 2, 60, "beats on host A")
        api.request("POST", f"/v1/jobs/{job}/cancel")
        wait(lambda: api.job(job)["state"] == "cancelled", 60, "the job to stop")
        wait(lambda: api.cluster()["cluster"] == "2x4:a100", 120, "host B back in the view")
    alive: dict[int, list[tuple[float, int]]] = {}
    for line in hb.read_text().splitlines():
        run, t, it = line.split()
        alive.setdefault(int(run), []).append((float(t), int(it)))
    first, second = sorted(alive, key=lambda r: alive[r][0])
    assert max(t for t, _ in alive[first]) < restarted  # it had stopped on host B before it started on A
    spans = sorted((min(v)[0], max(v)[0]) for v in alive.values())
    assert all(x[1] < y[0] for x, y in itertools.pairwise(spans))
    last, resumed_at = max(i for _, i in alive[first]), min(i for _, i in alive[second])
    assert last - 10 <= resumed_at - 1 <= last  # nothing lost beyond a checkpoint
