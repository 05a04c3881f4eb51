"""``tesserae trace import slurm --sacct`` on the history of jobs real Slurm daemons ran.

The jobs cover what a site's month holds: completed, failed, cancelled while running and while
waiting, requeued (two attempts), an array, a job of another user and account, a CPU-only job.
sacct's own dump (``OUT.sacct.txt``) is then imported, and ``trace info`` and ``simulate`` run on
the result.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tesserae.profiles.default_model import DefaultModel
from tesserae.traces.canonical import read_canonical

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]
TESSERAE = [sys.executable, "-m", "tesserae.cli"]


def sbatch(cluster, *args: str) -> str:
    return cluster.command("sbatch", "--parsable", "--partition", "tess", "--output", "/dev/null", "--chdir", "/",
                           *args).stdout.strip().split(";")[0]


def wait_state(cluster, job: str, states: tuple[str, ...], timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = cluster.command("scontrol", "show", "job", job, "-o", check=False).stdout
        state = next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "")
        if state in states:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job} still {state!r}, not {states}")
        time.sleep(0.1)


@pytest.fixture
def open_partition(slurm_one_host):
    """The partition open to jobs of any user (it is root-only for Tesserae's executor) while a test runs."""
    slurm_one_host.command("scontrol", "update", "PartitionName=tess", "RootOnly=NO")
    yield slurm_one_host
    slurm_one_host.command("scontrol", "update", "PartitionName=tess", "RootOnly=YES")


def wait_accounted(cluster, since: str, jobs: set[str], timeout: float = 120.0) -> None:
    """Until slurmdbd has the final record of every job (slurmctld sends them on asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        out = cluster.command("sacct", "-X", "--noheader", "--parsable2", "--allusers", "--starttime", since,
                              "--format", "JobID,State", check=False, env_tz_utc=True).stdout
        final = {line.split("|")[0].split("_")[0] for line in out.splitlines()
                 if line.split("|")[-1].split(" ")[0] not in ("PENDING", "RUNNING", "REQUEUED", "")}
        if jobs <= final:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"slurmdbd has not recorded the end of {sorted(jobs - final)}:\n{out}")
        time.sleep(0.5)


def test_a_real_history_imports_with_every_end_and_runs_in_the_simulator(open_partition, tmp_path: Path) -> None:
    c = open_partition
    for account in ("physics", "chem"):
        c.command("sacctmgr", "-i", "add", "account", account)
    c.command("sacctmgr", "-i", "add", "user", "root", "account=physics,chem")
    c.command("sacctmgr", "-i", "add", "user", "nobody", "account=chem")
    time.sleep(1)  # the jobs of other tests ended before this moment: the import asks for what ran since
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")  # (sacct runs with TZ=UTC)
    done = sbatch(c, "--gres=gpu:a100_0:1,gpu:a100_1:1", "--account=physics", "--job-name=resnet50", "--wrap",
                  "sleep 2")
    failed = sbatch(c, "--gres=gpu:a100_2:1", "--account=physics", "--wrap", "sleep 2; exit 3")
    other = sbatch(c, "--gres=gpu:a100_3:1", "--account=chem", "--uid=nobody", "--wrap", "sleep 1")
    cpu_only = sbatch(c, "--account=physics", "--wrap", "sleep 1")
    for j in (done, failed, other, cpu_only):
        wait_state(c, j, ("COMPLETED", "FAILED"))
    array = sbatch(c, "--gres=gpu:a100_0:1", "--account=chem", "--array=0-1", "--wrap", "sleep 1")
    running = sbatch(c, "--gres=gpu:a100_2:1", "--account=physics", "--wrap", "sleep 300")
    wait_state(c, running, ("RUNNING",))
    waiting = sbatch(c, "--gres=gpu:a100_2:1", "--account=physics", "--wrap", "sleep 1")  # its GPU is busy
    time.sleep(1.5)
    assert wait_state(c, waiting, ("PENDING",)) == "PENDING"
    c.command("scancel", waiting)
    c.command("scancel", running)
    requeued = sbatch(c, "--gres=gpu:a100_1:1", "--account=chem", "--requeue", "--wrap", "sleep 3")
    wait_state(c, requeued, ("RUNNING",))
    time.sleep(1.2)
    c.command("scontrol", "requeue", requeued)
    wait_state(c, requeued, ("PENDING",))
    time.sleep(2)  # a start in the second of the requeue finds its credential revoked
    c.command("scontrol", "update", f"JobId={requeued}", "StartTime=now")  # not Slurm's 120 s wait after a requeue
    wait_state(c, requeued, ("COMPLETED",), timeout=120)
    for j in (f"{array}_0", f"{array}_1", running, waiting):
        wait_state(c, j, ("COMPLETED", "CANCELLED"))
    ours = {done, failed, other, cpu_only, array, running, waiting, requeued}
    wait_accounted(c, since, ours)
    out = tmp_path / "history.csv"
    r = subprocess.run([*TESSERAE, "trace", "import", "slurm", "--sacct", "--since", since, "--out", str(out)],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **c.env()}, timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout
    dump = (tmp_path / "history.csv.sacct.txt").read_text()
    assert "left out: 1 without GPUs" in r.stdout and "left out: 1 never started" in r.stdout, r.stdout + dump
    assert dump.splitlines()[0].startswith("JobIDRaw|JobID|State|")
    jobs = {j.name: j for j in read_canonical(out)}
    assert set(jobs) == {done, failed, other, f"{array}_0", f"{array}_1", running, requeued}
    assert jobs[done].num_gpus == 2 and jobs[done].job_type == "resnet50" and jobs[done].queue == "physics"
    assert jobs[done].controls is None and jobs[done].user == "root" and jobs[done].gpu_type is None
    assert 1 <= jobs[done].duration <= 4 and jobs[done].work == pytest.approx(
        jobs[done].duration * DefaultModel().rate("resnet50", 2, "a100"))
    assert jobs[failed].controls.failures == 1 and jobs[failed].controls.retries == 0
    assert jobs[failed].controls.fail_after == jobs[failed].duration >= 1
    assert jobs[other].user == "nobody" and jobs[other].queue == "chem"  # (it may fail: the spool is root's)
    assert jobs[running].controls.cancel_after == jobs[running].duration >= 1
    assert jobs[f"{array}_0"].job_id != jobs[f"{array}_1"].job_id  # JobIDRaw numbers each task
    # Two attempts of the requeued job: its run time is both (the first ~1.2 s, the second ~3 s).
    assert jobs[requeued].controls is None and jobs[requeued].duration >= 4, jobs[requeued]
    assert "REQUEUED" in dump
    info = subprocess.run([*TESSERAE, "trace", "info", str(out), "--json"], capture_output=True, text=True,
                          timeout=120)
    assert info.returncode == 0 and json.loads(info.stdout)["jobs"] == len(jobs), info.stderr
    sim = subprocess.run([*TESSERAE, "simulate", "--trace", str(out), "--cluster", "1x4:a100", "--queue-config",
                          "derived", "--policy", "tiresias-las", "--out", str(tmp_path / "sim"), "-q"],
                         capture_output=True, text=True, timeout=300)
    assert sim.returncode == 0, sim.stderr
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert summary["lifecycle"]["failed"] >= 1 and summary["lifecycle"]["cancelled"] == 1
    assert {q["path"] for q in summary["queues"]} >= {"physics", "chem"}
