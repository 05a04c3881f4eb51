"""`tesserae compare --ray ADDRESS` on a multi-node Ray cluster gives the results of the same sweep run
here: every number of compare.csv but the scheduler's wall time, and every jobs.csv, byte for byte."""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path

from support.ray_cluster import PY, RayCluster

ARGS = ["compare", "--run", "fifo", "--run", "las:first-fit", "--jobs", "40", "--cluster", "2x4",
        "--seeds", "1,2", "--loads", "0.8,1.6", "--quiet"]


def _compare(out: Path, *extra: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    r = subprocess.run([PY, "-m", "tesserae.cli", *ARGS, "--out", str(out), *extra], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return [{k: v for k, v in row.items() if k != "scheduler_seconds"} for row in csv.DictReader(f)]


def test_sweep_on_a_multinode_ray_cluster_matches_the_local_sweep(tmp_path: Path, ray_cluster: RayCluster) -> None:
    import ray

    assert sum(1 for n in ray.nodes() if n["Alive"]) == 3  # a head and two worker nodes
    local, remote = tmp_path / "local", tmp_path / "ray"
    _compare(local)
    _compare(remote, "--ray", ray_cluster.address)
    rows = _rows(local / "compare.csv")
    assert len(rows) == 8 and _rows(remote / "compare.csv") == rows
    files = sorted(p.relative_to(local) for p in local.rglob("jobs.csv"))
    assert len(files) == 8 and files == sorted(p.relative_to(remote) for p in remote.rglob("jobs.csv"))
    for f in files:
        assert (local / f).read_bytes() == (remote / f).read_bytes(), f
