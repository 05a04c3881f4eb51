"""``tesserae server --executor slurm`` against real Slurm daemons on one host (``slurm_one_host``).

- a run is a Slurm job pinned to the GPUs the placement chose (its per-GPU GRES), runs as the job's
  account, and the job's environment reaches the job only (never the root launcher);
- preemption: SIGTERM through ``scancel``, the job checkpoints, the other job runs, it resumes;
- a drained node leaves the view: its run is lost and requeued, and runs again once resumed;
- across a ``slurmd`` kill, a server SIGKILL and a ``slurmctld`` restart no run of a job ever runs
  twice, nor after it was declared lost (the job's own heartbeat file), and nothing is lost beyond
  a checkpoint;
- a run a SIGKILLed slurmctld forgot (started within its 5 s state-save window), which Slurm kills on
  its node and may start again, is lost once and never runs twice; the run it had saved goes on;
- a slurm.conf that would let Slurm start or stop runs on its own stops the server with one line.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.server import PY, Server, start_server, toy, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]


@pytest.fixture
def servers(slurm_one_host: Any) -> Iterator[Callable[..., Server]]:
    """Factory of servers on the partition; every one stopped, and the partition emptied, afterwards."""
    started: list[Server] = []

    def make(state: Path, *extra: str, **kw: Any) -> Server:
        kw.setdefault("policy", "las")
        kw.setdefault("grace", 3.0)
        s = start_server(state, *extra, env=slurm_one_host.env(), timeout=90,
                         executor_args=("--executor", "slurm", "--slurm-partition", "tess"), **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()
    slurm_one_host.command("scancel", "--partition", "tess", check=False)
    slurm_one_host.resume("n1")
    c, seen = slurm_one_host, []
    try:
        wait_for(lambda: seen.append(c.node_state("n1")) or seen[-1] == "idle", 60, 0.2, "the node to be idle")
    except AssertionError:
        raise AssertionError(f"node n1 is {seen[-1]}: {c.command('squeue', '--states=all').stdout}") from None


def slurm_jobs(cluster: Any) -> dict[str, str]:
    """Slurm job name -> its GRES per node, of the jobs running now."""
    out = cluster.command("squeue", "--noheader", "--states=running", "--format=%j|%b").stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def run_id(server: Server, job: int) -> int:
    return max(int(p.name) for p in (server.state / "jobs" / str(job) / "runs").iterdir())


def test_runs_are_pinned_to_the_chosen_gpus_and_only_the_job_sees_its_environment(servers: Any, slurm_one_host: Any,
                                                                                  tmp_path: Path) -> None:
    job_root = Path(tempfile.mkdtemp(prefix="tsr-slurm-jobs-", dir="/tmp"))
    os.chmod(job_root, 0o711)
    try:
        s = servers(tmp_path / "state", "--job-user", "nobody", "--job-root", str(job_root / "jobs"), isolation=())
        hold = "id -u; echo secret=$JOB_SECRET cvd=$CUDA_VISIBLE_DEVICES node=$TESSERAE_NODE_ID; sleep 120"
        jobs = [s.submit(["/bin/sh", "-c", hold], gpus=g, env={"JOB_SECRET": "s3cret"}) for g in (1, 2)]
        logs = [s.state / "jobs" / str(j) / "output.log" for j in jobs]
        wait_for(lambda: all("cvd=" in (p.read_text() if p.exists() else "") for p in logs), 60, 0.1,
                 "both jobs to start")
        running = slurm_jobs(slurm_one_host)
        for j, log in zip(jobs, logs, strict=True):
            gpus = s.job(j)["assigned_gpus"]
            name = next(n for n in running if n.endswith(f"-r{run_id(s, j)}-p0"))
            pinned = sorted(int(x.split(":")[2].split("_")[1]) for x in running[name].split(","))
            assert pinned == sorted(gpus), (running, gpus)  # one node: global GPU ids are its indices
            text = log.read_text()
            assert "65534" in text and "secret=s3cret" in text and "node=n1" in text, text
            assert f"cvd={','.join(map(str, gpus))}" in text, text
        # The launchers are root's and never had the job's variables; the job's processes are nobody's.
        launchers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(s.state) in _cmdline(p)
                     and "slurm/launcher.py" in _cmdline(p)]
        assert len(launchers) == 2
        for p in launchers:
            assert b"JOB_SECRET" not in (p / "environ").read_bytes() and _uid(p) == 0
            assert os.getpgid(int(p.name)) == int(p.name)  # it leads its group (its fence kills the group)
            kids = [c for c in Path("/proc").iterdir() if c.name.isdigit() and _ppid(c) == int(p.name)]
            assert kids and all(_uid(c) == 65534 for c in kids)
            assert all(b"JOB_SECRET=s3cret" in (c / "environ").read_bytes() for c in kids)
        for j in jobs:
            s.cancel(j)
        for j in jobs:
            s.wait_state(j, "cancelled", 60)
    finally:
        shutil.rmtree(job_root, ignore_errors=True)


def _cmdline(p: Path) -> str:
    try:
        return (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _status(p: Path, key: str) -> str:
    try:
        return next(line.split()[1] for line in (p / "status").read_text().splitlines() if line.startswith(key))
    except (OSError, StopIteration):
        return "-1"


def _uid(p: Path) -> int:
    return int(_status(p, "Uid:"))


def _ppid(p: Path) -> int:
    return int(_status(p, "PPid:"))


def beats(path: Path) -> dict[int, list[float]]:
    """Run id -> the times of its heartbeats (the toy trainer's ``--heartbeat`` file)."""
    out: dict[int, list[float]] = {}
    for line in path.read_text().splitlines():
        run, t, _it = line.split()
        out.setdefault(int(run), []).append(float(t))
    return out


def test_preemption_checkpoints_and_the_other_job_runs_on_the_freed_gpus(servers: Any, tmp_path: Path) -> None:
    s = servers(tmp_path / "state")
    hb_a, hb_b = tmp_path / "a.hb", tmp_path / "b.hb"
    a = s.submit(toy(300, 0.05, "--checkpoint-every", "10", "--heartbeat", str(hb_a)), gpus=4)
    wait_for(lambda: (s.job(a).get("iterations_done") or 0) >= 20, 60, 0.1, "job A to make progress")
    b = s.submit(toy(20, 0.05, "--heartbeat", str(hb_b)), gpus=4)  # las: the newcomer first
    s.wait_state(b, "completed", 90)
    s.wait_state(a, "completed", 180)
    kinds = [e["kind"] for e in s.job(a)["events"]]
    assert "preempting" in kinds and "preempted" in kinds and kinds.count("resumed") == 1, kinds
    runs = json.loads((s.state / "jobs" / str(a) / "checkpoints" / "result.json").read_text())["runs"]
    assert len(runs) == 2 and runs[1]["start"] == runs[0]["end"] > 0  # resumed where SIGTERM saved it
    first_a, second_a = sorted(beats(hb_a).values(), key=min)
    b_beats = next(iter(beats(hb_b).values()))
    assert max(first_a) < min(b_beats) and max(b_beats) < min(second_a)  # the GPUs held by one job at a time


def test_a_drained_node_leaves_the_view_and_its_run_is_requeued(servers: Any, slurm_one_host: Any,
                                                                tmp_path: Path) -> None:
    s = servers(tmp_path / "state")
    hb = tmp_path / "a.hb"
    a = s.submit(toy(200, 0.05, "--checkpoint-every", "10", "--heartbeat", str(hb)), gpus=2)
    wait_for(lambda: (s.job(a).get("iterations_done") or 0) >= 10, 60, 0.1, "job A to make progress")
    slurm_one_host.command("scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=tesserae-test")
    wait_for(lambda: "lost" in [e["kind"] for e in s.job(a)["events"]], 60, 0.1, "the run to be lost")
    wait_for(lambda: s.client().get("/v1/nodes").json()["nodes"][0]["state"] == "draining", 30, 0.1,
             "the node to show as draining")
    assert s.job(a)["state"] == "preempted"
    slurm_one_host.resume("n1")
    s.wait_state(a, "completed", 180)
    assert len(beats(hb)) == 2


def test_no_run_runs_twice_across_slurmd_server_and_slurmctld_failures(servers: Any, slurm_one_host: Any,
                                                                       tmp_path: Path) -> None:
    c = slurm_one_host
    state = tmp_path / "state"
    s = servers(state)
    hb = tmp_path / "a.hb"
    a = s.submit(toy(100000, 0.05, "--checkpoint-every", "10", "--heartbeat", str(hb)), gpus=2)

    def progress(at_least: int) -> None:
        done = s.job(a).get("iterations_done") or 0
        wait_for(lambda: s.job(a)["state"] == "running" and (s.job(a).get("iterations_done") or 0) >= done + at_least,
                 90, 0.1, f"job A to make {at_least} more iterations")

    progress(10)
    c.kill("slurmd-n1")  # its slurmstepd and the job live on: Slurm cannot stop them, the lease does
    wait_for(lambda: "lost" in [e["kind"] for e in s.job(a)["events"]], 60, 0.1, "the run to be lost")
    c.start_slurmd("n1")
    progress(10)
    s.kill()  # the server SIGKILLed: the run goes on under Slurm; the next server adopts it
    s = servers(state)
    wait_for(lambda: "adopted" in [e["kind"] for e in s.job(a)["events"]], 60, 0.1, "the run to be adopted")
    progress(10)
    # slurmctld SIGKILLed and started again: its jobs go on, once it has saved their start (it saves at most
    # every 5 s; one killed sooner kills the runs it forgot: the next test)
    c.save_jobs()
    wait_for(c.jobs_saved, 30, 0.2, "slurmctld to save the run's start")
    c.restart_ctld()
    progress(10)
    s.cancel(a)
    s.wait_state(a, "cancelled", 60)
    events = s.job(a)["events"]
    kinds = [e["kind"] for e in events]
    assert kinds.count("lost") == 1 and kinds.count("adopted") == 1, _told(kinds, events, s)
    lost = next(int(e["detail"]["allocation"]) for e in events if e["kind"] == "lost")
    restarted = min(float(e["time"]) for e in events if e["kind"] == "resumed")
    alive = beats(hb)
    assert max(alive[lost]) < restarted, (lost, restarted, alive)  # it had stopped before the job started again
    spans = sorted((min(v), max(v)) for v in alive.values())
    assert len(spans) == 2 and all(x[1] < y[0] for x, y in itertools.pairwise(spans)), spans  # never two at once
    assert not (state / "jobs" / str(a) / "checkpoints" / "overlap.log").exists()
    iterations = {r: [int(line.split()[2]) for line in hb.read_text().splitlines() if int(line.split()[0]) == r]
                  for r in alive}
    first, second = sorted(alive, key=lambda r: min(alive[r]))
    assert max(iterations[first]) - 10 <= min(iterations[second]) - 1 <= max(iterations[first])  # a checkpoint lost


def test_a_run_a_restarted_slurmctld_forgot_is_lost_once_and_never_runs_twice(servers: Any, slurm_one_host: Any,
                                                                            tmp_path: Path) -> None:
    """slurmctld saves its state at most every 5 s: SIGKILLed within 5 s of starting a run's job, it comes back with
    that job pending (or without it) and kills it when the node's slurmd registers (the flake of issue 28's test
    above, on a fast machine). Slurm then no longer vouches for that part, and its word (pending, or no such job)
    is no proof that it stopped: the part is revoked (its launcher stops on its lease), lost once, its job requeued;
    it never runs twice, nor beside its next run, and Slurm does not start it again. The run whose start Slurm had
    saved goes on untouched, on a node that stays in the view."""
    c = slurm_one_host
    s = servers(tmp_path / "state")
    hb_a, hb_b = tmp_path / "a.hb", tmp_path / "b.hb"
    a = s.submit(toy(100000, 0.05, "--checkpoint-every", "10", "--heartbeat", str(hb_a)), gpus=2)
    wait_for(lambda: (s.job(a).get("iterations_done") or 0) >= 10, 60, 0.1, "job A to make progress")
    # A's start saved, and no save for 5 s: B's submission is saved at once (pending), its start 5 s later.
    c.save_jobs()
    wait_for(lambda: c.jobs_saved() and c.state_quiet(), 60, 0.2, "slurmctld to save A's start, then nothing")
    b = s.submit(toy(100000, 0.05, "--checkpoint-every", "10", "--heartbeat", str(hb_b)), gpus=2)
    runs = tmp_path / "state" / "jobs" / str(b) / "runs"
    wait_for(lambda: runs.exists() and any(runs.iterdir()), 30, 0.02, "B's run to be submitted")
    rb = run_id(s, b)
    out = runs / str(rb) / "part-0" / "slurm.out"
    wait_for(out.exists, 30, 0.02, "Slurm to start B's run")  # slurmstepd opens it as it starts the launcher
    c.restart_ctld()
    forgot = c.command("squeue", "--noheader", "--states=all", "--format=%j|%T").stdout.replace(" ", "")
    assert f"-r{rb}-p0|RUNNING" not in forgot, f"slurmctld saved B's start after all: {forgot}"
    wait_for(lambda: "resumed" in [e["kind"] for e in s.job(b)["events"]], 90, 0.1, "B to be requeued and resumed")
    again = next(int(e["detail"]["allocation"]) for e in s.job(b)["events"] if e["kind"] == "resumed")
    wait_for(lambda: hb_b.exists() and again in beats(hb_b), 60, 0.1, "B's next run to beat")
    time.sleep(8)  # slurmd registered long ago (ping at +3 s): whatever Slurm kills or restarts has happened
    s.cancel(a)
    s.cancel(b)
    s.wait_state(a, "cancelled", 60)
    s.wait_state(b, "cancelled", 60)
    kinds_a = [e["kind"] for e in s.job(a)["events"]]
    events_b = s.job(b)["events"]
    kinds_b = [e["kind"] for e in events_b]
    assert "lost" not in kinds_a and len(beats(hb_a)) == 1, _told(kinds_a, s.job(a)["events"], s)
    assert kinds_b.count("lost") == 1 and kinds_b.count("resumed") == 1, _told(kinds_b, events_b, s)
    resumed = min(float(e["time"]) for e in events_b if e["kind"] == "resumed")
    alive = beats(hb_b)  # the forgotten run may have been stopped before its command beat at all
    assert set(alive) <= {rb, again}, alive
    assert max(alive.get(rb, [0.0])) < resumed < min(alive[again]), (resumed, alive)  # stopped before the next
    gaps = [y - x for x, y in itertools.pairwise(alive.get(rb, []))]
    assert max(gaps, default=0.0) < 2.0, gaps  # one run, never started again by Slurm
    assert not [n for n in slurm_jobs(c) if n.endswith(f"-r{rb}-p0")], slurm_jobs(c)  # nor left it running


def _told(kinds: list[str], events: list[dict[str, Any]], server: Server) -> str:
    """A failure's message: the events in full and the server's Slurm lines (what the executor saw)."""
    lines = [ln for ln in server.log().splitlines() if "slurm" in ln or "adopted" in ln]
    return "\n".join([f"kinds: {kinds}", f"events: {events}", "server log:", *lines[-40:]])


def test_a_slurm_conf_that_would_let_slurm_decide_stops_the_server_with_one_line(slurm_one_host: Any,
                                                                                tmp_path: Path) -> None:
    c = slurm_one_host
    cmd = [PY, "-m", "tesserae.cli", "server", "--executor", "slurm", "--insecure-same-user", "--port", "0"]
    env = {**os.environ, **c.env()}
    r = subprocess.run([*cmd, "--state", str(tmp_path / "a"), "--slurm-partition", "nope"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 2 and "PartitionName=nope: there is no such partition (Slurm has: tess)" in r.stderr
    c.command("scontrol", "update", "PartitionName=tess", "RootOnly=NO")
    try:
        r = subprocess.run([*cmd, "--state", str(tmp_path / "b"), "--slurm-partition", "tess"], capture_output=True,
                           text=True, env=env, timeout=120)
    finally:
        c.command("scontrol", "update", "PartitionName=tess", "RootOnly=YES")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "field 'RootOnly': RootOnly=NO on partition tess" in lines[0]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_stop_asked_before_slurm_started_the_run_is_carried_out_at_once(slurm_one_host: Any, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A preemption decided while the run's Slurm job is still pending or configuring (issue 28, the sim-vs-real
    gap of plain LAS): ``scancel --signal`` cannot reach such a job (Slurm answers "Job can not be altered now"
    and scancel retries 5 s later, the controller blocked meanwhile; the job ran on, or was killed after the grace
    period). The stop must not block the controller and must reach the run as soon as it starts: it then ends
    with the preemption code without having started the job's command."""
    from tesserae.job import PREEMPTED_EXIT_CODE
    from tesserae.runtime.executor.protocol import Launch
    from tesserae.runtime.slurm.executor import SlurmExecutor
    from tesserae.runtime.store.database import Store

    for key, value in slurm_one_host.env().items():
        monkeypatch.setenv(key, value)
    state = tmp_path / "state"
    state.mkdir()
    store = Store(state / "tesserae.db")
    executor = SlurmExecutor("tess", grace_seconds=20.0, python=PY)
    executor.prepare()
    executor.open(state, store)
    ran = tmp_path / "ran"
    try:
        times = []
        for k in range(3):
            run_dir = state / "jobs" / "1" / "runs" / str(k + 1)
            argv = [PY, "-c", f"open({str(ran)!r}, 'a').write('ran\\n'); import time; time.sleep(60)"]
            run = executor.spawn(Launch(argv, {}, tmp_path, tmp_path / "job.log", run_dir, 1, (0, 1, 2, 3)))
            t0 = time.monotonic()
            executor.terminate(run)  # at once: Slurm has not started the job yet
            times.append(time.monotonic() - t0)
            # Within the grace period (20 s): a run that needed the grace's SIGKILL to end fails here.
            wait_for(lambda run=run: executor.exited(run), 19, 0.05, "the stopped run to end")
            code, _ = executor.exit_code(run, run_dir)
            executor.release(str(run_dir))
            assert times[-1] < 1.0, f"terminate() blocked the controller for {times[-1]:.1f} s"
            assert code == PREEMPTED_EXIT_CODE, (code, (run_dir / "part-0" / "slurm.out").read_text())
        assert not ran.exists(), "the job's command started although its stop was asked before"
    finally:
        executor.close()
        store.close()
