"""The Ray executor's pure parts (no Ray needed): the cluster view and GPU identity across membership
changes, the gang layout (processes and ranks per node), the exit of a gang, and the part launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ray_helpers import wait_for

from tesserae.runtime import procs, ray_launcher
from tesserae.runtime.gpus import Gpu
from tesserae.runtime.ray_layout import NodeInfo, aggregate_exit, build_view, plan_parts, remap, split_processes


def _node(node_id: str, n: int, gpu_type: str = "v100", ip: str = "10.0.0.1") -> NodeInfo:
    return NodeInfo(node_id, ip, node_id, gpu_type, tuple(Gpu(str(i), gpu_type, "virtual", None, True)
                                                          for i in range(n)))


def test_view_numbers_gpus_node_by_node_and_remaps_through_stable_identities() -> None:
    a, b, c = _node("a", 2), _node("b", 4, "a100"), _node("c", 2)
    v1 = build_view([a, b, c])
    assert v1.cluster is not None and v1.cluster.describe() == "2x2:v100,1x4:a100" and v1.cluster.num_gpus == 8
    assert v1.keys[2] == ("b", 0) and v1.gpus[7].device == "1"
    v2 = build_view([a, c, _node("d", 2)])  # b died, d joined
    m = remap(v1, v2)
    assert m[0] == 0 and m[1] == 1 and all(m[g] is None for g in range(2, 6)) and m[6] == 2 and m[7] == 3
    assert build_view([]).cluster is None


def test_processes_split_over_nodes_in_proportion_to_gpus() -> None:
    assert split_processes(1, [4]) == [1] and split_processes(3, [4]) == [3]
    assert split_processes(4, [2, 2]) == [2, 2]  # one per GPU
    assert split_processes(1, [2, 2]) == [1, 1]  # one per node
    assert split_processes(3, [2, 1]) == [2, 1]
    assert split_processes(8, [3, 1]) == [6, 2]
    assert split_processes(2, [1, 1, 1]) == [1, 1, 1]  # at least one per node


def test_plan_puts_rank_zero_on_the_node_of_the_lowest_gpu() -> None:
    view = build_view([_node("a", 2, ip="10.0.0.1"), _node("b", 2, ip="10.0.0.2"), _node("c", 2, ip="10.0.0.3")])
    parts, world = plan_parts(view, [5, 2, 3, 4], nproc=4)
    assert world == 4
    assert [(p.node_id, p.ip, p.devices, p.first_rank, p.nproc) for p in parts] == [
        ("b", "10.0.0.2", ("0", "1"), 0, 2), ("c", "10.0.0.3", ("0", "1"), 2, 2)]
    assert parts[1].keys == (("c", 0), ("c", 1))
    parts, world = plan_parts(view, [1], nproc=1)
    assert world == 1 and [(p.node_id, p.devices) for p in parts] == [("a", ("1",))]


def test_a_lost_part_makes_the_gang_lost_else_the_first_failure_counts() -> None:
    assert aggregate_exit([(0, 1.0, False), (0, 2.0, False)]) == (0, 2.0)
    assert aggregate_exit([(75, 2.0, False), (3, 1.0, False)]) == (3, 2.0)
    assert aggregate_exit([(1, 1.0, False), (None, None, True)]) == (None, None)
    assert aggregate_exit([(None, None, False), (75, 3.0, False)]) == (75, 3.0)
    assert aggregate_exit([(None, None, False)]) == (None, None)


def _launch(tmp_path: Path, agent: subprocess.Popen[bytes], *cmd: str, nproc: int = 2) -> int:
    part = tmp_path / "part-1"
    part.mkdir()
    env = {**os.environ, procs.MARKER_VAR: str(part), ray_launcher.PART_VAR: str(part)}
    r = subprocess.run([sys.executable, "-I", ray_launcher.__file__, str(part), str(tmp_path / "log"), str(nproc), "4",
                        "8", str(agent.pid), str(procs.start_ticks(agent.pid)), "--", *cmd],
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def test_part_launcher_detaches_sets_ranks_and_records_the_exit(tmp_path: Path) -> None:
    agent = subprocess.Popen(["sleep", "60"])
    try:
        script = "import json,os,sys; print(json.dumps({k: os.environ[k] for k in sys.argv[1:]}), flush=True)"
        _launch(tmp_path, agent, sys.executable, "-c", script, "RANK", "LOCAL_RANK", "WORLD_SIZE",
                      "LOCAL_WORLD_SIZE")
        wait_for(lambda: ray_launcher.read_exit(str(tmp_path / "part-1")) is not None, 15, 0.05, "the exit record")
        assert ray_launcher.read_exit(str(tmp_path / "part-1"))["code"] == 0  # type: ignore[index]
        seen = sorted(json.loads(line)["RANK"] for line in (tmp_path / "log").read_text().splitlines())
        assert seen == ["4", "5"]
        assert all(json.loads(line)["WORLD_SIZE"] == "8" for line in (tmp_path / "log").read_text().splitlines())
    finally:
        agent.kill()
        agent.wait()


def test_part_launcher_kills_its_job_at_once_when_the_agent_is_gone(tmp_path: Path) -> None:
    agent = subprocess.Popen(["sleep", "60"])
    # Two copies, each with a child that left the process group (its own session): all must go.
    escape = "import subprocess, time; subprocess.Popen(['sleep', '60'], start_new_session=True); time.sleep(60)"
    pid = _launch(tmp_path, agent, sys.executable, "-c", escape)
    part = str(tmp_path / "part-1")
    wait_for(lambda: len(procs.pids_with_marker(part)) == 5, 15, 0.05, "the launcher, two copies, two children")
    jobs = [p for p in procs.pids_with_marker(part) if p != pid]
    assert os.getsid(pid) == pid and os.getppid() != pid  # detached: a session of its own
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    t0 = time.monotonic()
    wait_for(lambda: not procs.pids_with_marker(part), 5, 0.02, "the orphaned part to be killed")
    assert time.monotonic() - t0 < 2.0
    rec = ray_launcher.read_exit(part)
    assert rec is not None and rec["orphaned"] and rec["code"] == -signal.SIGKILL
    assert all(procs.start_ticks(p) is None for p in jobs)
