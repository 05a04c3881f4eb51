"""Jobs cannot escalate (issue 13, point 3): they run under unprivileged accounts and cannot read the admin
token, the store, another user's folder, logs or process environment, nor signal another user's jobs.

Before: jobs ran as the server's own account, so any job could ``cat STATE/admin.token`` and become
admin, read every log and every job's environment, and SIGKILL every job. The end-to-end tests need
root (they create the job accounts with ``useradd`` and the server switches to them); CI runs as root."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.server import PY, Server, wait_for
from tesserae.core.errors import InputError
from tesserae.runtime.job import isolation
from tesserae.runtime.launch import procs

ACCOUNTS = ("tsr-jobs", "tsr-alice", "tsr-bob")
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd: the server switches each job to its own Unix "
                                       "account (CI runs as root)")


@pytest.fixture(scope="session")
def job_accounts() -> tuple[str, ...]:
    """Unprivileged accounts for jobs (created once; left for later runs, as a system account would be)."""
    for name in ACCOUNTS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                               capture_output=True, text=True)
            if r.returncode not in (0, 9):  # 9: created meanwhile by the other test worker
                pytest.fail(f"useradd {name}: {r.stderr}")
    return ACCOUNTS


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every account can pass through (pytest's own are root's, mode 0700, which would hide the
    state folder whatever its mode): the state folder and the job root go in it."""
    root = Path("/tmp") / f"tsr-iso-{uuid.uuid4().hex[:12]}"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _log(s: Server, job: int) -> str:
    return str(s.client().get(f"/v1/jobs/{job}/logs").text)


@needs_root
def test_with_a_job_account_a_job_cannot_reach_the_server(servers: Callable[..., Server],
                                                           job_accounts: tuple[str, ...], open_dir: Path) -> None:
    state, job_root = open_dir / "state", open_dir / "state-jobs"  # the default job root, beside the state
    s = servers(state, gpus=1, policy="fifo", isolation=("--job-user", "tsr-jobs"))
    assert "every job as 'tsr-jobs'" in s.log()
    first = s.submit(["echo first job log: private"], shell=True)
    s.wait_state(first, "completed")
    probe = (f"id -un; cat {state}/admin.token || echo NO-TOKEN; cat {state}/tesserae.db > /dev/null || echo NO-DB; "
             f"cat {state}/jobs/{first}/output.log || echo NO-LOG; ls {state} || echo NO-LIST; "
             "touch $TESSERAE_CHECKPOINT_DIR/mine && echo CKPT-OK; echo '{\"iterations\": 1}' > "
             "$TESSERAE_PROGRESS_FILE && echo PROGRESS-OK; pwd")
    job = s.submit([probe], shell=True)
    s.wait_state(job, "completed")
    out = _log(s, job)
    assert out.splitlines()[1] == "tsr-jobs", out
    for word in ("NO-TOKEN", "NO-DB", "NO-LOG", "NO-LIST", "CKPT-OK", "PROGRESS-OK", f"{job_root}/{job}/work"):
        assert word in out, (word, out)
    assert s.admin_token not in out and "first job log" not in out
    ws = job_root / str(job)
    st = ws.stat()
    assert st.st_uid == pwd.getpwnam("tsr-jobs").pw_uid and stat.S_IMODE(st.st_mode) == 0o700
    assert stat.S_IMODE(state.stat().st_mode) == 0o700 and stat.S_IMODE(job_root.stat().st_mode) == 0o711


@needs_root
def test_with_a_user_map_users_cannot_reach_each_other(tmp_path: Path, servers: Callable[..., Server],
                                                        job_accounts: tuple[str, ...], open_dir: Path) -> None:
    user_map = tmp_path / "users.toml"
    user_map.write_text('[accounts]\nalice = "tsr-alice"\nbob = "tsr-bob"\n')
    job_root = open_dir / "jobs"
    s = servers(open_dir / "state", "--job-root", str(job_root), gpus=2, policy="fifo",
                isolation=("--user-map", str(user_map)))
    admin = s.client()
    tokens = {u: admin.post("/v1/tokens", json={"user": u}).json()["token"] for u in ("alice", "bob", "carol")}
    bob_job = s.submit(["echo bob secret in my log; touch $TESSERAE_CHECKPOINT_DIR/bob-data; exec sleep 60"],
                       shell=True, token=tokens["bob"], env={"BOB_SECRET": "hunter2"})
    s.wait_state(bob_job, "running")
    marker = str(s.state / "jobs" / str(bob_job)) + "/"
    victims = wait_for(lambda: [p for p in procs.pids_with_marker_prefix(marker) if os.getsid(p) != p], 20, 0.05,
                       "bob's job process")
    victim = victims[0]
    probe = (f"id -un; ls {job_root}/{bob_job} || echo NO-FOLDER; cat /proc/{victim}/environ || echo NO-ENVIRON; "
             f"kill -9 {victim} || echo NO-KILL; cat {s.state}/jobs/{bob_job}/output.log || echo NO-LOG")
    alice_job = s.submit([probe], shell=True, token=tokens["alice"])
    s.wait_state(alice_job, "completed")
    out = _log(s, alice_job)
    assert out.splitlines()[1] == "tsr-alice", out
    for word in ("NO-FOLDER", "NO-ENVIRON", "NO-KILL", "NO-LOG"):
        assert word in out, (word, out)
    assert "hunter2" not in out and "bob secret" not in out
    assert s.job(bob_job)["state"] == "running" and procs.start_ticks(victim) is not None
    r = s.client(tokens["carol"]).post("/v1/jobs", json={"command": ["true"], "gpus": 1})
    assert r.status_code == 403 and "no Unix account" in r.json()["detail"]
    s.client().post(f"/v1/jobs/{bob_job}/cancel")
    s.wait_state(bob_job, "cancelled")


@needs_root
def test_a_root_server_refuses_to_run_jobs_as_root_unless_told(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    r = subprocess.run([PY, "-m", "tesserae.cli", "server", "--state", str(tmp_path / "s"), "--virtual-gpus", "1",
                        "--port", "0"], capture_output=True, text=True, env=base, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "--job-user ACCOUNT" in lines[0] and "--insecure-same-user" in lines[0]
    assert not (tmp_path / "s").exists()


def test_choices_that_cannot_isolate_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without root there is no other account to switch to: only the explicit same-user mode starts."""
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    with pytest.raises(InputError, match="run the server as root with --job-user"):
        isolation.resolve(job_user=None, user_map=None, same_user=False)
    with pytest.raises(InputError, match="need the server to run as root"):
        isolation.resolve(job_user="nobody", user_map=None, same_user=False)
    assert isolation.resolve(job_user=None, user_map=None, same_user=True).same_user
    with pytest.raises(InputError, match="does not go with"):
        isolation.resolve(job_user="nobody", user_map=None, same_user=True)
    with pytest.raises(InputError, match="Ray workers"):
        isolation.resolve(job_user=None, user_map=None, same_user=False, executor="ray")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(InputError, match="root; jobs never run as root"):
        isolation.resolve(job_user="root", user_map=None, same_user=False)
    bad = tmp_path / "map.toml"
    bad.write_text('[accounts]\nalice = "tsr-no-such-account-xyz"\n')
    with pytest.raises(InputError, match="no Unix account 'tsr-no-such-account-xyz'"):
        isolation.resolve(job_user=None, user_map=bad, same_user=False)
    bad.write_text('[acounts]\nalice = "x"\n')
    with pytest.raises(InputError, match="unknown key 'acounts'"):
        isolation.resolve(job_user=None, user_map=bad, same_user=False)
