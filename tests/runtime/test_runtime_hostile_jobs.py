"""A job is untrusted (issue 13, points 1, 2, 4, 5, 8): whatever it writes, leaves running or asks for, it
can fail only itself. Every test here failed before its fix; the docstring of each says how."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from support.server import PY, Server, toy, wait_for
from tesserae.runtime.launch import lifetime, procs

# A job that writes its own progress file (any content), reports done, then stays a moment.
WRITE_PROGRESS = ("import os, sys, time; open(os.environ['TESSERAE_PROGRESS_FILE'], 'w').write(sys.argv[1]); "
                  "time.sleep(1.5)")


def _cgroups_usable(tmp_path: Path) -> bool:
    found = lifetime.Cgroups.detect(tmp_path / "probe")
    if found is not None:
        lifetime.remove_empty(found.base)
    return found is not None


@pytest.mark.parametrize("content", [
    '{"iterations": ' + "9" * 400 + ', "total": 5}',
    '{"iterations": 3, "total": ' + str(2**64) + "}",
    '{"iterations": 1e400}',
    "[" * 50000 + "]" * 50000,
])
def test_hostile_progress_files_do_not_crash_the_controller(tmp_path: Path, servers: Callable[..., Server],
                                                            content: str) -> None:
    """Before: a 400-digit ``iterations`` or ``total`` = 2^64 crash-looped the controller (float or SQLite
    overflow)."""
    s = servers(tmp_path / "state", gpus=1, policy="fifo")
    bad = s.submit([PY, "-c", WRITE_PROGRESS, content])
    j = s.wait_state(bad, "completed")
    assert j["iterations_done"] <= 2**53 and (j["iterations_total"] is None or j["iterations_total"] <= 2**53)
    after = s.submit([PY, "-c", "pass"])
    s.wait_state(after, "completed")
    assert s.proc.poll() is None


def test_fifos_in_place_of_progress_and_log_do_not_block_the_controller(tmp_path: Path,
                                                                       servers: Callable[..., Server]) -> None:
    """Before: a FIFO as ``progress.json`` hung the rounds for good; a FIFO as ``output.log`` blocked the
    controller, then killed it when the logs endpoint was read."""
    s = servers(tmp_path / "state", gpus=1, policy="fifo")
    script = ("import os, time; p = os.environ['TESSERAE_PROGRESS_FILE']; log = os.path.join(os.path.dirname(p), "
              "'output.log'); os.unlink(log); os.mkfifo(log); os.mkfifo(p + '.tmp'); os.replace(p + '.tmp', p); "
              "time.sleep(2.5)")
    bad = s.submit([PY, "-c", script])
    s.wait_state(bad, "running")
    r = s.client().get(f"/v1/jobs/{bad}/logs")
    assert r.status_code == 200
    s.wait_state(bad, "completed", timeout=20)
    after = s.submit([PY, "-c", "print('after the fifo job')"])
    s.wait_state(after, "completed", timeout=20)
    assert "after the fifo job" in s.client().get(f"/v1/jobs/{after}/logs").text
    assert s.client().get(f"/v1/jobs/{bad}/logs").status_code == 200


def test_a_job_that_cannot_be_started_fails_alone(tmp_path: Path, servers: Callable[..., Server]) -> None:
    """Before: a NUL in an argument made Popen raise ValueError, which killed the controller, and every
    restart requeued the run and died again. (The API refuses such a job now; this one is put in the
    store directly, as an older server would have stored it.)"""
    s = servers(tmp_path / "state", "--rounds-only", gpus=1, policy="fifo", round_seconds=3600)
    poison = s.submit([PY, "-c", "pass"], name="poison")
    s.stop()
    db = sqlite3.connect(s.state / "tesserae.db")
    db.execute("UPDATE jobs SET command=? WHERE id=?", (json.dumps(["sleep", "3\x00"]), poison))
    db.commit()
    db.close()
    s2 = servers(s.state, gpus=1, policy="fifo")
    j = s2.wait_state(poison, "failed")
    assert j["reason"].startswith("cannot start") and "null" in j["reason"]
    ok = s2.submit([PY, "-c", "pass"])
    s2.wait_state(ok, "completed")
    assert s2.proc.poll() is None


def test_the_server_environment_does_not_leak_into_jobs(tmp_path: Path, servers: Callable[..., Server]) -> None:
    """Before: every variable of the server's environment (cloud keys, say) reached every job."""
    s = servers(tmp_path / "state", "--pass-env", "SITE_PROXY", gpus=1, policy="fifo",
                env={"AWS_SECRET_ACCESS_KEY": "s3cret", "SITE_PROXY": "http://proxy:3128", "LANG": "C.UTF-8"})
    job = s.submit([PY, "-c", "import json, os; print(json.dumps(dict(os.environ)))"], env={"OWN": "mine"})
    s.wait_state(job, "completed")
    line = next(x for x in s.client().get(f"/v1/jobs/{job}/logs").text.splitlines() if x.startswith("{"))
    env = json.loads(line)
    assert "AWS_SECRET_ACCESS_KEY" not in env and "s3cret" not in line
    assert env["SITE_PROXY"] == "http://proxy:3128" and env["OWN"] == "mine" and env["LANG"] == "C.UTF-8"
    assert env["TESSERAE_JOB_ID"] == str(job) and "PATH" in env and "HOME" in env
    allowed = {"PATH", "LANG", "HOME", "USER", "LOGNAME", "SITE_PROXY", "OWN", "CUDA_VISIBLE_DEVICES",
               "CUDA_DEVICE_ORDER", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
               "PYTHONUNBUFFERED", "LC_CTYPE"}
    assert {k for k in env if not k.startswith("TESSERAE_")} <= allowed, sorted(env)


@pytest.mark.parametrize("mode", ["cgroup", "session"])
def test_leftover_processes_are_killed_before_the_gpu_is_handed_out(tmp_path: Path, servers: Callable[..., Server],
                                                                    mode: str) -> None:
    """Before: a job running ``sleep 45 &`` was completed while the sleep ran on, and its GPU went to the
    next job. Now the run ends only when its last process is gone. With a cgroup even a process that
    left the session and scrubbed its environment is found; without one, the session and marker are."""
    if mode == "cgroup" and not _cgroups_usable(tmp_path):
        pytest.skip("no usable cgroup v2 hierarchy here (cgroup v1 only, or not delegated to this user)")
    extra = () if mode == "cgroup" else ("--cgroups", "off")
    s = servers(tmp_path / "state", *extra, gpus=1, policy="fifo")
    assert ("tracked by cgroup" in s.log()) == (mode == "cgroup")
    escape = "env -i setsid sleep 45 &" if mode == "cgroup" else "sleep 45 &"
    first = s.submit([f"{escape} echo left a sleep behind"], shell=True)
    second = s.submit([PY, "-c", "import time; print('second at', time.time())"])
    s.wait_state(first, "completed")
    sleepers = [p for p in _pids_of("sleep 45")]
    assert sleepers == [], f"leftover processes still alive: {sleepers}"
    s.wait_state(second, "completed")
    assert "1 process(es) it left running were killed" in s.client().get(f"/v1/jobs/{first}/logs").text


def _pids_of(cmdline: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            if text == cmdline and procs.start_ticks(int(entry.name)) is not None:
                out.append(int(entry.name))
    return out


def test_a_killed_launcher_is_lost_and_requeued_whoever_started_it(tmp_path: Path,
                                                                   servers: Callable[..., Server]) -> None:
    """Before: a killed launcher made its job 'failed' (killed by SIGKILL) when this server had started the
    run, but 'lost and requeued' when it had adopted it. Both are lost now: the job resumes."""
    s = servers(tmp_path / "state", gpus=1, policy="fifo")
    job = s.submit(toy(60, 0.05, "--checkpoint-every", "5"), iterations=60)
    wait_for(lambda: s.job(job)["iterations_done"] >= 6, 30, 0.05, "progress past a checkpoint")
    _kill_launcher(s.state, job)
    done = s.wait_state(job, "completed", timeout=60)
    kinds = [e["kind"] for e in done["events"]]
    assert "lost" in kinds and "failed" not in kinds, kinds
    assert done["exit_code"] == 0


def _kill_launcher(state: Path, job: int) -> None:
    pids = procs.pids_with_marker_prefix(str(state / "jobs" / str(job)) + "/")
    leaders = [p for p in pids if os.getsid(p) == p]
    assert len(leaders) == 1, pids
    os.kill(leaders[0], signal.SIGKILL)
