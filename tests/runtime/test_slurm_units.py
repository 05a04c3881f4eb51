"""The Slurm executor's pieces without daemons: Slurm's output parsed, the slurm.conf checks, the lease,
and the part launcher run by hand (revoked, it stops at once; the job's environment reaches only the
job). Against real daemons: ``tests/slurm``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tesserae.core.errors import InputError
from tesserae.runtime.slurm import lease, settings
from tesserae.runtime.slurm.commands import fields
from tesserae.runtime.slurm.launcher import SPEC_FILE
from tesserae.runtime.slurm.nodes import Roster, parse_gres, parse_node
from tesserae.runtime.slurm.runs import read_exit

NODE = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 Gres=gpu:a100_0:1(S:0),gpu:a100_1:1(S:0),gpu:a100_2:1 "
        "NodeAddr=10.0.0.1 NodeHostName=host1 OS=Linux 6.1 #1 SMP PREEMPT_DYNAMIC  RealMemory=16000 State=IDLE "
        "Partitions=tess  Reason=a reason with spaces [root@2024-01-01T00:00:00]")


def test_scontrol_one_liners_with_spaces_in_values() -> None:
    f = fields(NODE)
    assert f["NodeName"] == "n1" and f["OS"] == "Linux 6.1 #1 SMP PREEMPT_DYNAMIC" and f["State"] == "IDLE"
    assert f["Reason"] == "a reason with spaces [root@2024-01-01T00:00:00]" and f["Partitions"] == "tess"


@pytest.mark.parametrize(("gres", "gpus", "model", "problem"), [
    ("gpu:a100_0:1(S:0),gpu:a100_1:1(S:0-1),gpu:a100_3:1", (0, 1, 3), "a100", None),
    ("gpu:H100_2:1,gpu:H100_0:1,license:x:2", (0, 2), "H100", None),
    ("(null)", (), "", None),
    ("gpu:a100:4", (), "", "does not name each GPU"),
    ("gpu:4", (), "", "does not name each GPU"),
    ("gpu:a100_0:2", (), "", "does not name each GPU"),
    ("gpu:a100_0:1,gpu:v100_1:1", (), "", "mixes GPU models"),
    ("gpu:a100_0:1,gpu:a100_0:1", (), "", "twice"),
])
def test_per_gpu_gres(gres: str, gpus: tuple[int, ...], model: str, problem: str | None) -> None:
    got = parse_gres(gres)
    assert got[:2] == (gpus, model)
    assert (got[2] is None) if problem is None else (problem in (got[2] or ""))


@pytest.mark.parametrize(("state", "usable", "silent"), [
    ("IDLE", True, False), ("MIXED", True, False), ("ALLOCATED", True, False), ("IDLE+DRAIN", False, False),
    ("MIXED+DRAIN", False, False), ("DOWN+NOT_RESPONDING", False, True), ("IDLE+NOT_RESPONDING", False, True),
    ("IDLE*", True, False), ("FAIL", False, True), ("IDLE+POWERED_DOWN", False, True),
    ("MIXED+COMPLETING", True, False),
])
def test_node_states(state: str, usable: bool, silent: bool) -> None:
    n = parse_node(fields(NODE.replace("State=IDLE", f"State={state}")))
    assert (n.usable, n.silent) == (usable, silent)


def test_the_view_follows_usable_nodes_and_keeps_gpu_identity() -> None:
    r = Roster("tess")
    two = [fields(NODE), fields(NODE.replace("n1", "n2").replace("10.0.0.1", "10.0.0.2"))]
    r.update(two)
    r.view, r.changed = r.view_change(), False
    assert r.view.cluster is not None and r.view.cluster.describe() == "2x3:a100"
    assert [g.device for g in r.view.gpus] == ["0", "1", "2", "0", "1", "2"]
    drained = [two[0], fields(NODE.replace("n1", "n2").replace("State=IDLE", "State=IDLE+DRAIN"))]
    lost = r.update(drained)
    assert [n.name for n in lost] == ["n2"] and r.changed
    new = r.view_change()
    assert new is not None and new.node_ids == ("n1",)
    assert [s.state for s in r.states()] == ["alive", "draining"]
    other = [fields(NODE.replace("Partitions=tess", "Partitions=debug"))]
    assert [n.name for n in r.update(other)] == ["n1", "n2"]  # not in the partition any more: gone


CONFIG = {"SLURM_CONF": "/etc/slurm/slurm.conf", "SelectType": "select/cons_tres", "GresTypes": "gpu",
          "PreemptType": "preempt/none", "SchedulerParameters": "batch_sched_delay=0,sched_min_interval=0",
          "SlurmdTimeout": "30 sec"}
PART = {"PartitionName": "tess", "State": "UP", "RootOnly": "YES", "MaxTime": "UNLIMITED", "PreemptMode": "OFF"}


def _check(config: dict[str, str] | None = None, part: dict[str, str] | None = None, node: str = NODE,
           others: list[dict[str, str]] | None = None, root: bool = True) -> list[str]:
    return settings.check({**CONFIG, **(config or {})}, [{**PART, **(part or {})}, *(others or [])],
                          [parse_node(fields(node))], "tess", as_root=root)


@pytest.mark.parametrize(("kw", "needle"), [
    ({"config": {"SelectType": "select/cons_res"}}, "SelectType=select/cons_res"),
    ({"config": {"GresTypes": "mps"}}, "GresTypes=mps"),
    ({"part": {"PartitionName": "other"}}, "PartitionName=tess: there is no such partition (Slurm has: other)"),
    ({"part": {"State": "DOWN"}}, "State=DOWN on partition tess"),
    ({"part": {"RootOnly": "NO"}}, "RootOnly=NO on partition tess"),
    ({"root": False}, "run the Tesserae server as root"),
    ({"part": {"MaxTime": "1-00:00:00"}}, "MaxTime=1-00:00:00 on partition tess"),
    ({"config": {"PreemptType": "preempt/partition_prio"}, "part": {"PreemptMode": "REQUEUE"}},
     "PreemptType=preempt/partition_prio with PreemptMode=REQUEUE"),
    ({"node": NODE.replace("Partitions=tess", "Partitions=tess,debug"),
      "others": [{"PartitionName": "debug", "State": "UP"}]}, "node n1 is also in partition debug"),
    ({"node": NODE.replace("gpu:a100_0:1(S:0),gpu:a100_1:1(S:0),gpu:a100_2:1", "gpu:a100:3")},
     "NodeName=n1 Gres=gpu:a100:3: does not name each GPU"),
    ({"node": NODE.replace("Partitions=tess", "Partitions=debug")}, "the partition has no node"),
    ({"config": {"SelectTypeParameters": "CR_Core_Memory", "DefMemPerNode": "UNLIMITED"}},
     "SelectTypeParameters=CR_Core_Memory: memory is a consumable resource but has no default"),
])
def test_settings_that_break_tesserae_stop_the_server_naming_them(kw: dict, needle: str) -> None:
    with pytest.raises(InputError) as e:
        _check(**kw)
    assert needle in str(e.value) and str(e.value).startswith("/etc/slurm/slurm.conf, field '")
    assert "docs/slurm.md" in str(e.value) and "\n" not in str(e.value)
    assert e.value.field == needle.split("=")[0].split(" ")[0] or needle.startswith(("node n1", "run the", "the "))


def test_settings_that_only_delay_starts_are_warnings() -> None:
    assert _check() == []
    assert _check(config={"PreemptType": "preempt/qos"}) == []  # preemption is off on the partition
    assert _check(config={"SelectTypeParameters": "CR_Core_Memory"}, part={"DefMemPerGPU": "20000"}) == []
    assert _check(node=NODE.replace("Partitions=tess", "Partitions=tess,debug"),
                  others=[{"PartitionName": "debug", "State": "INACTIVE"}]) == []
    warnings = _check(config={"SchedulerParameters": "(null)", "SlurmdTimeout": "300 sec"})
    assert any("batch_sched_delay=3 (the default)" in w for w in warnings)
    assert any("sched_min_interval=2000000 (the default)" in w for w in warnings)
    assert any("SlurmdTimeout=300 s" in w for w in warnings)
    assert any("defer" in w for w in _check(config={"SchedulerParameters": "defer,batch_sched_delay=0,"
                                                                            "sched_min_interval=0"}))


def test_a_lease_holds_from_the_servers_sending_time_until_revoked(tmp_path: Path) -> None:
    path = str(tmp_path / lease.LEASE_FILE)
    mine = lease.Lease(path, "/state/jobs/1/runs/2/part-0")
    assert not mine.refresh() and "holds no lease" in (mine.why_stop(time.monotonic()) or "")
    lease.write(path, time.time() - 25.0, 30.0, [])  # sent 25 s ago: 5 s left, however late it is read
    assert mine.refresh() and mine.until is not None and 4.0 < mine.until - time.monotonic() <= 5.0
    assert mine.why_stop(time.monotonic()) is None and "ran out" in (mine.why_stop(time.monotonic() + 6) or "")
    lease.write(path, time.time() - 40.0, 30.0, [])  # an old file renews nothing
    before = mine.until
    assert mine.refresh() and mine.until == before
    lease.write(path, time.time(), 30.0, ["/state/jobs/1/runs/2/part-0"])
    mine.refresh()
    assert "revoked" in (mine.why_stop(time.monotonic()) or "")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def _launch(tmp_path: Path, argv: list[str], env: dict[str, str], lease_file: Path) -> tuple[Path, subprocess.Popen]:
    run_dir = tmp_path / "runs" / "7"
    part = run_dir / "part-0"
    part.mkdir(parents=True)
    spec = {"argv": argv, "env": env, "cwd": str(tmp_path), "log": str(tmp_path / "output.log"), "account": None,
            "nproc": 1, "first_rank": 0, "world": 1, "index": 0, "parts": 1, "run_dir": str(run_dir),
            "master_addr": "127.0.0.1", "node": "n1", "node_addr": "127.0.0.1", "master_ports": None,
            "lease_file": str(lease_file)}
    (part / SPEC_FILE).write_text(json.dumps(spec))
    from tesserae.runtime.slurm import launcher

    proc = subprocess.Popen([sys.executable, "-I", launcher.__file__, str(part)], env={"PATH": os.environ["PATH"]})
    return part, proc


def test_the_launcher_gives_the_job_its_environment_and_stops_it_when_revoked(tmp_path: Path) -> None:
    path = tmp_path / lease.LEASE_FILE
    lease.write(str(path), time.time(), 30.0, [])
    out = tmp_path / "seen.json"
    job = f"import json, os, time; json.dump(dict(os.environ), open({str(out)!r}, 'w')); time.sleep(60)"
    part, proc = _launch(tmp_path, [sys.executable, "-c", job], {"JOB_SECRET": "s3", "PATH": os.environ["PATH"]}, path)
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = json.loads(out.read_text())
        assert seen["JOB_SECRET"] == "s3" and seen["TESSERAE_NODE_ID"] == "n1" and seen["MASTER_PORT"].isdigit()
        assert "JOB_SECRET" not in Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
        t0 = time.monotonic()
        lease.write(str(path), time.time(), 30.0, [str(part)])
        assert proc.wait(15) != 0 and time.monotonic() - t0 < 5
    finally:
        proc.kill()
    code, _t, orphaned, why = read_exit(str(part)) or (0, 0.0, False, "")
    assert orphaned and "revoked" in why and code == -9
    assert "stopping this part at once" in (tmp_path / "output.log").read_text()


def test_the_launcher_starts_nothing_without_a_lease(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    part, proc = _launch(tmp_path, ["/bin/sh", "-c", f"touch {marker}"], {}, tmp_path / "no-such-lease.json")
    assert proc.wait(30) != 0 and not marker.exists()
    assert (read_exit(str(part)) or (0, 0, False, ""))[2]


def test_a_stop_in_the_lease_file_reaches_the_job_as_sigterm_or_starts_nothing(tmp_path: Path) -> None:
    """The server's graceful stop through the lease file (Slurm cannot signal a job it has not started): a running
    job gets SIGTERM and checkpoints; a part asked to stop before it started its command starts none."""
    path = tmp_path / lease.LEASE_FILE
    lease.write(str(path), time.time(), 30.0, [])
    started, termed = tmp_path / "started", tmp_path / "termed"
    job = (f"import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: (open({str(termed)!r}, 'w'), "
           f"sys.exit(75))); open({str(started)!r}, 'w'); time.sleep(60)")
    part, proc = _launch(tmp_path, [sys.executable, "-c", job], {"PATH": os.environ["PATH"]}, path)
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        lease.write(str(path), time.time(), 30.0, [], [str(part)])
        assert proc.wait(15) == 75 and time.monotonic() - t0 < 2 and termed.exists()
    finally:
        proc.kill()
    code, _t, orphaned, _why = read_exit(str(part)) or (0, 0.0, True, "")
    assert code == 75 and not orphaned

    asked = tmp_path / "asked"
    asked.mkdir()
    started.unlink()
    lease.write(str(path), time.time(), 30.0, [], [str(asked / "runs" / "7" / "part-0")])
    part, proc = _launch(asked, [sys.executable, "-c", job], {"PATH": os.environ["PATH"]}, path)
    assert proc.wait(30) == 75 and not started.exists()
    assert (read_exit(str(part)) or (0,))[0] == 75


def test_a_launcher_slurm_starts_a_second_time_starts_nothing(tmp_path: Path) -> None:
    """A slurmctld restarted without its last state save kills a job it forgot on its node and may start it again
    (issue 28): the part's second launcher starts nothing and records ``orphaned`` (the run is lost and requeued);
    one started again after the part ended leaves the first one's record alone."""
    from tesserae.runtime.slurm.launcher import LAUNCHED_FILE

    path = tmp_path / lease.LEASE_FILE
    lease.write(str(path), time.time(), 30.0, [])
    ran = tmp_path / "ran"
    part, proc = _launch(tmp_path, ["/bin/sh", "-c", f"echo x >> {ran}"], {"PATH": os.environ["PATH"]}, path)
    assert proc.wait(30) == 0 and ran.read_text() == "x\n" and (part / LAUNCHED_FILE).exists()
    assert (read_exit(str(part)) or (1,))[0] == 0
    from tesserae.runtime.slurm import launcher

    again = subprocess.run([sys.executable, "-I", launcher.__file__, str(part)], env={"PATH": os.environ["PATH"]},
                           timeout=30)
    assert again.returncode == 0 and ran.read_text() == "x\n" and (read_exit(str(part)) or (1,))[0] == 0
    (part / "exit.json").unlink()  # the first launcher was killed (SIGKILL: no record)
    again = subprocess.run([sys.executable, "-I", launcher.__file__, str(part)], env={"PATH": os.environ["PATH"]},
                           timeout=30)
    code, _t, orphaned, why = read_exit(str(part)) or (0, 0.0, False, "")
    assert again.returncode != 0 and ran.read_text() == "x\n", "the command ran a second time"
    assert orphaned and code == -9 and "second time" in why


def test_slurms_word_that_it_forgot_a_part(tmp_path: Path) -> None:
    """No such job, or pending after it ran (a poll showed it running, or its launcher's file was seen before the
    poll started), is slurmctld forgetting the part (a restart without its last state save); pending before that,
    or a poll that may predate the launcher's start, is not."""
    from tesserae.runtime.ray.layout import PartPlan
    from tesserae.runtime.slurm.commands import JobState
    from tesserae.runtime.slurm.launcher import LAUNCHED_FILE
    from tesserae.runtime.slurm.runs import Part

    def job(state: str) -> JobState:
        return JobState(5, "tsr-r1-p0", state, "n1" if state != "PENDING" else "", "None")

    def part(d: Path) -> Part:
        d.mkdir(parents=True)
        return Part(PartPlan(0, "n1", "127.0.0.1", (("n1", 0),), ("0",), 0, 1), str(d))

    assert part(tmp_path / "none").forgotten_by(None, 1.0, 1.0)
    p = part(tmp_path / "a")
    assert not p.forgotten_by(job("PENDING"), 1.0, 1.0) and not p.forgotten_by(job("RUNNING"), 2.0, 2.0)
    assert p.forgotten_by(job("PENDING"), 3.0, 3.0)
    assert p.forgotten_by(job("CANCELLED"), 4.0, 4.0)  # once forgotten, Slurm's word is no proof (its scancel)
    assert not part(tmp_path / "c").forgotten_by(job("COMPLETED"), 4.0, 4.0)
    q = part(tmp_path / "b")
    (Path(q.part_dir) / LAUNCHED_FILE).write_text("1.0 5\n")
    assert not q.forgotten_by(job("PENDING"), 9.0, 10.0)  # the poll began before the file was seen
    assert not q.forgotten_by(job("PENDING"), 10.0, 10.5)
    assert q.forgotten_by(job("PENDING"), 10.1, 11.0)  # a poll begun after: Slurm ran it, shows it pending
