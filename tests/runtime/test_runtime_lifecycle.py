"""Jobs through their life on a real server: run, preempt, resume, complete, fail, cancel."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

from support.server import PY, Server, runs_of, toy, toy_value, wait_for
from tesserae.runtime.launch import procs


def test_preempt_resume_complete_loses_no_progress(tmp_path: Path, servers: Callable[..., Server]) -> None:
    # One GPU, Tiresias 2D-LAS with a 2 GPU-s first queue: the long job is demoted after 2 s of
    # service (policy state that must survive from round to round), so a newcomer preempts it.
    s = servers(tmp_path / "state", "--tiresias-thresholds", "2", gpus=1, policy="tiresias-las", round_seconds=1.0)
    long_job = s.submit(toy(100, 0.05), iterations=100, name="long")
    wait_for(lambda: s.job(long_job)["executed_seconds"] >= 2.5, 20, 0.05, "the long job to pass 2 GPU-s")
    short_job = s.submit(toy(15, 0.05), iterations=15, name="short")
    first = s.wait_state(long_job, "preempted", timeout=20)
    assert first["preemptions"] == 1 and first["assigned_gpus"] is None
    s.wait_state(short_job, "completed", timeout=30)
    done = s.wait_state(long_job, "completed", timeout=30)
    assert s.job(short_job)["finish_time"] < done["finish_time"]

    runs = runs_of(s.state, long_job)
    assert len(runs) >= 2, runs
    assert runs[0]["start"] == 0 and runs[-1]["end"] == 100
    for a, b in itertools.pairwise(runs):
        assert b["start"] == a["end"], f"progress lost or repeated between runs: {runs}"
    result = json.loads((s.state / "jobs" / str(long_job) / "checkpoints" / "result.json").read_text())
    assert result["value"] == toy_value(100)
    assert done["preemptions"] == len(runs) - 1
    assert done["iterations_done"] == 100 and done["iterations_total"] == 100
    assert done["exit_code"] == 0 and done["attained_gpu_seconds"] > 0
    # WAITED counts every wait, the one while preempted too (before: 0.0 s, the first wait only)
    assert done["waited_seconds"] >= done["queueing_seconds"] + 0.5
    kinds = [e["kind"] for e in done["events"]]
    assert kinds.count("preempted") == done["preemptions"] and "resumed" in kinds
    log = s.client().get(f"/v1/jobs/{long_job}/logs").text
    assert "checkpoint saved" in log and "(exit code 75)" in log and "toy: done" in log
    assert not (s.state / "jobs" / str(long_job) / "checkpoints" / "overlap.log").exists()


def test_failures_shell_multiprocess_and_stubborn_jobs(tmp_path: Path, servers: Callable[..., Server]) -> None:
    s = servers(tmp_path / "state", gpus=2, policy="fifo", grace=1.0)
    failing = s.submit(toy(10, 0.01, "--fail-at", "3"))
    shell = s.submit(["echo shell says $((6 * 7)) && echo to stderr >&2"], shell=True)
    ranks = s.submit([PY, "-c", "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], "
                               "'gpus', os.environ['CUDA_VISIBLE_DEVICES'], 'job', os.environ['TESSERAE_JOB_ID'])"],
                     gpus=2, nproc=2)
    j = s.wait_state(failing, "failed")
    assert j["exit_code"] == 3 and j["reason"] == "exited with code 3"
    s.wait_state(shell, "completed")
    out = s.client().get(f"/v1/jobs/{shell}/logs").text
    assert "shell says 42" in out and "to stderr" in out
    s.wait_state(ranks, "completed")
    out = s.client().get(f"/v1/jobs/{ranks}/logs").text
    assert f"rank 0 of 2 gpus 0,1 job {ranks}" in out and f"rank 1 of 2 gpus 0,1 job {ranks}" in out

    # A job that ignores SIGTERM is killed after the grace period when cancelled.
    stubborn = s.submit(toy(1000, 0.05, "--ignore-sigterm"))
    j = s.wait_state(stubborn, "running")
    wait_for(lambda: s.job(stubborn)["iterations_done"] >= 1, 20, 0.05, "progress")
    pids = procs.pids_with_marker_prefix(str(s.state / "jobs" / str(stubborn)))
    assert pids
    assert s.client().post(f"/v1/jobs/{stubborn}/cancel").json()["state"] == "running"
    j = s.wait_state(stubborn, "cancelled", timeout=20)
    assert j["reason"] == "cancelled by admin"
    assert [e["kind"] for e in j["events"]][-3:] == ["cancelling", "killed", "cancelled"]
    assert all(procs.start_ticks(p) is None for p in pids)

    # A queued job is cancelled at once.
    blocker = s.submit(toy(1000, 0.05), gpus=2)
    s.wait_state(blocker, "running")
    queued = s.submit(toy(5, 0.01))
    assert s.job(queued)["state"] == "queued"
    assert s.client().post(f"/v1/jobs/{queued}/cancel").json()["state"] == "cancelled"
    s.client().post(f"/v1/jobs/{blocker}/cancel")
    s.wait_state(blocker, "cancelled")
    assert not (s.state / "jobs" / str(queued) / "runs").exists()


def test_a_two_rank_toy_job_is_preempted_and_resumes(tmp_path: Path, servers: Callable[..., Server]) -> None:
    """`tesserae submit --gpus 2 --nproc 2 -- python toy_trainer.py`: both ranks run, rank 0 writes."""
    import subprocess

    s = servers(tmp_path / "state", gpus=2, policy="las", round_seconds=1.0, grace=5.0)
    p = subprocess.run([PY, "-m", "tesserae.cli", "submit", "--gpus", "2", "--nproc", "2", "--iterations", "60",
                        "--", *toy(60, 0.05)], env=s.env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    pair = int(p.stdout)
    wait_for(lambda: s.job(pair)["iterations_done"] >= 10, 20, 0.05, "the two-rank job to progress")
    newcomer = s.submit(toy(10, 0.05), gpus=2)  # less attained service: LAS preempts the two-rank job
    assert s.wait_state(pair, "preempted", timeout=20)["preemptions"] == 1
    s.wait_state(newcomer, "completed", timeout=30)
    done = s.wait_state(pair, "completed", timeout=30)
    assert done["exit_code"] == 0 and done["iterations_done"] == 60
    runs = runs_of(s.state, pair)
    assert len(runs) == 2 and runs[0]["start"] == 0 and runs[1]["start"] == runs[0]["end"] > 0, runs
    assert runs[1]["end"] == 60
    checkpoints = s.state / "jobs" / str(pair) / "checkpoints"
    assert json.loads((checkpoints / "result.json").read_text())["value"] == toy_value(60)
    assert not (checkpoints / "overlap.log").exists()
    log = s.client().get(f"/v1/jobs/{pair}/logs").text
    assert "two runs at once" not in log
    for rank in (0, 1):
        assert log.count(f"toy[rank {rank}/2]: start iteration=") == 2, log
        assert f"toy[rank {rank}/2]: done, 60 iterations" in log
