"""The Ray executor's pure parts (no Ray needed): the cluster view and GPU identity across membership
changes, the gang layout (processes and ranks per node), the exit of a gang, the part launcher (its
agent and its lease), the leases' arithmetic, and the interface that carries an address."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from support.ray_cluster import wait_for
from tesserae.runtime.executor import node_net
from tesserae.runtime.executor.gpus import Gpu
from tesserae.runtime.job import env_handoff
from tesserae.runtime.launch import procs
from tesserae.runtime.ray import launcher as ray_launcher
from tesserae.runtime.ray.layout import NodeInfo, aggregate_exit, build_view, plan_parts, remap, split_processes
from tesserae.runtime.ray.lease import LeaseBook, LeaseFile, grant, held_until


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


def _launch(tmp_path: Path, agent: subprocess.Popen[bytes], *cmd: str, nproc: int = 2, lease: float = 60.0) -> int:
    """Start a part launcher with ``agent`` as its agent and a lease of ``lease`` seconds from now."""
    part = tmp_path / "part-1"
    part.mkdir()
    leases = LeaseFile(tmp_path / "leases.json")
    leases.write({str(part): time.monotonic() + lease}, force=True)
    env = {**os.environ, procs.MARKER_VAR: str(part), ray_launcher.PART_VAR: str(part)}
    env_handoff.write(part, env)  # the part's environment, as the agent hands it over
    r = subprocess.run([sys.executable, "-I", ray_launcher.__file__, str(part), str(tmp_path / "log"), str(nproc), "4",
                        "8", str(agent.pid), str(procs.start_ticks(agent.pid)), str(leases.path), "--", *cmd],
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def test_part_launcher_detaches_sets_ranks_and_records_the_exit(tmp_path: Path) -> None:
    agent = subprocess.Popen(["sleep", "60"])
    try:
        # One write per rank (the log is O_APPEND): print's line and newline could interleave under load.
        script = ("import json,os,sys; os.write(1, (json.dumps({k: os.environ[k] for k in sys.argv[1:]}) + "
                  "'\\n').encode())")
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


def test_part_launcher_kills_its_job_when_its_lease_runs_out_and_records_it_after(tmp_path: Path) -> None:
    agent = subprocess.Popen(["sleep", "60"])
    try:
        escape = "import subprocess, time; subprocess.Popen(['sleep', '60'], start_new_session=True); time.sleep(60)"
        pid = _launch(tmp_path, agent, sys.executable, "-c", escape, lease=1.5)
        part = str(tmp_path / "part-1")
        wait_for(lambda: len(procs.pids_with_marker(part)) == 5, 15, 0.05, "the launcher, two copies, two children")
        t0 = time.monotonic()
        wait_for(lambda: ray_launcher.read_exit(part) is not None, 10, 0.01, "the lease to run out")
        # The record is written once the part's processes are gone (only the launcher itself may remain).
        assert [p for p in procs.pids_with_marker(part) if p != pid] == []
        assert time.monotonic() - t0 < 3.0  # 1.5 s of lease (less the start-up), then at most 0.25 s
        rec = ray_launcher.read_exit(part)
        assert rec is not None and rec["orphaned"] and "lease" in str(rec["why"])
        wait_for(lambda: not procs.pids_with_marker(part), 5, 0.02, "the launcher to end")
    finally:
        agent.kill()
        agent.wait()


def test_a_renewal_counts_from_its_sending_and_the_controller_waits_a_lease_and_a_margin(tmp_path: Path) -> None:
    # A call that took 4 s to arrive renews a 10 s lease for 6 s only; one older than the lease renews nothing.
    assert grant(100.0, 10.0, now_wall=104.0, now_mono=50.0) == 56.0
    assert grant(100.0, 10.0, now_wall=99.0, now_mono=50.0) == 60.0  # a clock behind: the margin covers it
    assert grant(100.0, 10.0, now_wall=111.0, now_mono=50.0) is None
    book = LeaseBook(10.0, margin=2.0)
    before = time.monotonic()
    renewal = book.renewal("n1")
    assert renewal["seconds"] == 10.0 and abs(renewal["sent"] - time.time()) < 1.0
    assert before + 12.0 <= book.expiry("n1") <= time.monotonic() + 12.0
    assert book.expiry("never-renewed") < time.monotonic()  # no lease was granted there by this controller
    # A restarted controller counts from the last renewal its predecessor recorded (plus the slack of the record).
    book2 = LeaseBook(10.0, margin=2.0)
    book2.inherit({"sent": time.time() - 5.0, "seconds": 20.0}, slack=1.0)
    assert abs(book2.expiry("n1") - (time.monotonic() - 5.0 + 1.0 + 20.0 + 2.0)) < 0.5
    book2.inherit(None, slack=1.0)
    assert abs(book2.expiry("n1") - (time.monotonic() + 10.0 + 2.0)) < 0.5
    assert book.due_record(time.monotonic(), 1.0) == book.record()
    assert book.due_record(time.monotonic(), 1.0) is None  # nothing sent since
    f = LeaseFile(tmp_path / "l.json")
    f.write({"a": 5.0}, force=True)
    assert held_until(str(f.path), "a") == 5.0 and held_until(str(f.path), "b") is None
    f.remove()
    assert held_until(str(f.path), "a") is None


def test_the_interface_that_carries_an_address() -> None:
    assert node_net.interface_of("127.0.0.1") is not None  # loopback's
    assert node_net.interface_of("203.0.113.254") is None and node_net.interface_of("not an address") is None
    lo = node_net.interface_of("127.0.0.1")
    assert node_net.interface_env("127.0.0.1", already={}) == {"GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": lo}
    assert node_net.interface_env("127.0.0.1", already={"NCCL_SOCKET_IFNAME": "ib0"}) == {"GLOO_SOCKET_IFNAME": lo}


def test_master_ports_come_from_the_range_given() -> None:
    assert node_net.parse_ports("29500-29599") == (29500, 29599)
    for bad in ("29500", "a-b", "29599-29500", "80-90", "1024-70000"):
        try:
            node_net.parse_ports(bad)
        except ValueError as e:
            assert bad in str(e)
        else:
            raise AssertionError(f"{bad} accepted")
    assert 1024 <= (node_net.free_port() or 0) <= 65535
    with socket.socket() as held:  # a range of one port, taken: none free
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        assert node_net.free_port((port, port)) is None
    low = node_net.free_port()
    assert low is not None and node_net.free_port((low, low)) == low


def test_sweep_ends_parts_on_evidence_only(tmp_path: Path) -> None:
    """A late node's part ends on its exit record (a crash seen at once), never on the lease alone; an
    unreachable node's part ends on its record, or once its lease is surely over."""
    from types import SimpleNamespace

    from tesserae.runtime.ray.gangs import GangBook, RayRun, RunPart
    from tesserae.runtime.ray.layout import PartPlan

    roster = SimpleNamespace(agents={"n1": object(), "n2": object()}, unreachable=set())
    leases = LeaseBook(3.0, margin=0.0)
    book = GangBook(None, roster, 1.0, lambda _: None, leases)  # type: ignore[arg-type]
    parts = {}
    for node in ("n1", "n2"):
        d = tmp_path / node
        d.mkdir()
        parts[node] = RunPart(PartPlan(0, node, "10.0.0.1", (), (), 0, 1), str(d))
        book.register(RayRun(f"run-{node}", [parts[node]], 1))
    leases.renewal("n1")
    leases.renewal("n2")
    now = time.monotonic()
    book.sweep(now, late={"n1"})  # late, no record: nothing ends, however late
    book.sweep(now + 100, late={"n1"})
    assert not parts["n1"].ended and not parts["n2"].ended
    (tmp_path / "n1" / "exit.json").write_text(json.dumps({"code": -9, "time": 5.0, "orphaned": True, "why": "x"}))
    (tmp_path / "n2" / "exit.json").write_text(json.dumps({"code": 0, "time": 6.0}))
    book.sweep(now)  # answering nodes: their agents say how parts end
    assert not parts["n1"].ended and not parts["n2"].ended
    assert book.sweep(now, late={"n1"}) == {"n1"}  # its launcher stopped it there: n1 is suspect
    assert parts["n1"].ended and parts["n1"].lost and parts["n1"].time == 5.0 and not parts["n2"].ended
    (tmp_path / "n2" / "exit.json").unlink()
    roster.unreachable.add("n2")
    book.sweep(now + 1.0)  # unreachable, no record, lease not over: still held
    assert not parts["n2"].ended
    assert book.sweep(now + 3.5) == set()  # the lease (3 s from the renewal) is over: written off
    assert parts["n2"].ended and parts["n2"].lost
