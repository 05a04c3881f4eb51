"""The store is never silently reset, and the state folder is private (issue 13, points 6 and 8). Each test
failed before its fix: the docstring says how."""

from __future__ import annotations

import os
import socket
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from support.server import PY, Server
from tesserae.runtime.store.integrity import ID_BLOCK, wal_problem


def _start(state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """A server start expected to fail at once (no timeout needed beyond the start itself)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TESSERAE_")}
    return subprocess.run([PY, "-m", "tesserae.cli", "server", "--state", str(state), "--virtual-gpus", "1",
                           "--port", "0", "--insecure-same-user", *extra], capture_output=True, text=True,
                          env=base, timeout=60)


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def _queued_jobs(servers: Callable[..., Server], state: Path, n: int) -> Server:
    """A server that never decides, with ``n`` queued jobs, SIGKILLed (its WAL is not checkpointed)."""
    s = servers(state, "--rounds-only", gpus=1, policy="fifo", round_seconds=3600)
    for _ in range(n):
        s.submit([PY, "-c", "pass"])
    s.kill()
    return s


def test_a_corrupt_wal_refuses_to_start_instead_of_emptying_the_store(tmp_path: Path,
                                                                     servers: Callable[..., Server]) -> None:
    """Before: the server started with 0 jobs and a new admin token, and job ids restarted at 1."""
    state = tmp_path / "state"
    s = _queued_jobs(servers, state, 3)
    wal = state / "tesserae.db-wal"
    assert wal.stat().st_size > 32 and wal_problem(wal) is None
    token = s.admin_token
    data = bytearray(wal.read_bytes())
    data[0] ^= 0xFF  # the header's magic number
    wal.write_bytes(bytes(data))
    line = _one_line(_start(state))
    assert "tesserae.db-wal is corrupt" in line and "restore" in line
    assert (state / "admin.token").read_text().strip() == token
    data[0] ^= 0xFF
    page = int.from_bytes(data[8:12], "big")
    data[32 + 24 + page // 2] ^= 0xFF  # a byte of the first frame's page: committed frames follow it
    wal.write_bytes(bytes(data))
    assert "frame 1 of" in _one_line(_start(state))
    data[32 + 24 + page // 2] ^= 0xFF
    wal.write_bytes(bytes(data))
    s2 = servers(state, "--rounds-only", gpus=1, policy="fifo", round_seconds=3600)
    assert [j["id"] for j in s2.client().get("/v1/jobs").json()["jobs"]] == [1, 2, 3]


def test_a_lost_store_beside_job_folders_is_refused(tmp_path: Path, servers: Callable[..., Server]) -> None:
    """Before: deleting tesserae.db while keeping jobs/ gave a fresh store whose job 1 reused jobs/1: it
    restored the old job's checkpoint, 'completed' without running and showed the old job's log."""
    state = tmp_path / "state"
    s = servers(state, gpus=1, policy="fifo")
    s.wait_state(s.submit([PY, "-c", "print('old job one')"]), "completed")
    s.stop()
    for f in state.glob("tesserae.db*"):
        f.unlink()
    line = _one_line(_start(state))
    assert "holds 1 job folder(s)" in line and "Restore tesserae.db" in line
    line = _one_line(_start(state, "--new-store"))
    assert "holds 1 job folder(s)" in line
    assert not (state / "tesserae.db").exists()


def test_job_ids_never_repeat_even_after_the_store_is_lost(tmp_path: Path, servers: Callable[..., Server]) -> None:
    """Before: a new store handed out ids from 1 again."""
    state = tmp_path / "state"
    s = servers(state, "--rounds-only", gpus=1, policy="fifo", round_seconds=3600)
    old = [s.submit([PY, "-c", "pass"]) for _ in range(3)]
    s.stop()
    for f in state.glob("tesserae.db*"):
        f.unlink()
    line = _one_line(_start(state))  # every submitted job has its folder (issue 27): they hold its ids
    assert f"holds 3 job folder(s) (ids 1..{max(old)})" in line and "--new-store" in line
    (state / "jobs").rename(tmp_path / "old-jobs")
    line = _one_line(_start(state))
    assert "the store was lost" in line and "--new-store" in line
    s2 = servers(state, "--new-store", "--rounds-only", gpus=1, policy="fifo", round_seconds=3600)
    new = s2.submit([PY, "-c", "pass"])
    assert new > max(old) and new >= ID_BLOCK


def test_a_corrupt_or_locked_store_is_one_line(tmp_path: Path, servers: Callable[..., Server]) -> None:
    """Before: a raw traceback."""
    state = tmp_path / "state"
    s = servers(state, "--rounds-only", gpus=1, policy="fifo", round_seconds=3600)
    s.submit([PY, "-c", "pass"])
    s.stop()
    db = state / "tesserae.db"
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], "
                               "isolation_level=None); c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); "
                               "time.sleep(60)", str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        line = _one_line(_start(state))
        assert "is locked by another process" in line and str(db) in line
    finally:
        holder.kill()
        holder.wait()
    data = bytearray(db.read_bytes())
    data[200:4096] = b"\x5a" * (4096 - 200)  # the first page's b-tree
    db.write_bytes(bytes(data))
    line = _one_line(_start(state))
    assert str(db) in line and ("corrupt" in line or "not a readable SQLite database" in line), line


def test_the_state_folder_becomes_private_whatever_it_was(tmp_path: Path, servers: Callable[..., Server]) -> None:
    """Before: an existing state folder kept mode 0755, and the store (with job environments in plain
    text) and the logs were 0644."""
    state = tmp_path / "state"
    s = servers(state, gpus=1, policy="fifo")
    job = s.submit([PY, "-c", "print('hi')"], env={"SECRET": "x"})
    s.wait_state(job, "completed")
    s.stop()
    os.chmod(state, 0o755)
    for f in [*state.iterdir(), state / "jobs" / str(job) / "output.log"]:
        if f.is_file():
            os.chmod(f, 0o644)
    os.chmod(state / "jobs", 0o755)
    s2 = servers(state, gpus=1, policy="fifo")
    s2.wait_state(s2.submit([PY, "-c", "pass"]), "completed")

    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    assert mode(state) == 0o700 and mode(state / "jobs") == 0o700 and mode(state / "jobs" / str(job)) == 0o700
    for name in ("tesserae.db", "tesserae.db-wal", "admin.token", "server.json", "store.json", "server.lock"):
        assert mode(state / name) == 0o600, name
    assert mode(state / "jobs" / str(job) / "output.log") == 0o600


def test_a_port_clash_leaves_no_state_folder(tmp_path: Path) -> None:
    """Before: the token, the store and the lock were written before the bind failed."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        state = tmp_path / "state"
        r = _start(state, "--port", str(port))
    assert "cannot listen on 127.0.0.1:" in _one_line(r)
    assert not state.exists()


def _old_store(db: Path, version: int, columns: str, state: str) -> None:
    """A store as an earlier Tesserae wrote it: the version-1 jobs table plus ``columns``, one job."""
    old = sqlite3.connect(db)
    old.executescript(f"""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '{version}'), ('epoch', '1.0');
        CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL, name TEXT NOT NULL,
            job_type TEXT NOT NULL, num_gpus INTEGER NOT NULL, command TEXT NOT NULL, shell INTEGER NOT NULL DEFAULT 0,
            env TEXT NOT NULL DEFAULT '{{}}', workdir TEXT, nproc INTEGER NOT NULL DEFAULT 1, iterations INTEGER,
            total_reported INTEGER, state TEXT NOT NULL, submit_time REAL NOT NULL, first_start REAL,
            last_start REAL, last_stop REAL, finish_time REAL, progress REAL NOT NULL DEFAULT 0,
            attained REAL NOT NULL DEFAULT 0, executed REAL NOT NULL DEFAULT 0,
            preemptions INTEGER NOT NULL DEFAULT 0, migrations INTEGER NOT NULL DEFAULT 0,
            requeues INTEGER NOT NULL DEFAULT 0, exit_code INTEGER, reason TEXT NOT NULL DEFAULT '',
            cancel_requested INTEGER NOT NULL DEFAULT 0{columns});
        INSERT INTO jobs (user, name, job_type, num_gpus, command, state, submit_time)
            VALUES ('u', 'old', 'generic', 1, '["true"]', '{state}', 1.0);
    """)
    old.close()


def test_a_store_of_the_previous_schema_is_upgraded(tmp_path: Path) -> None:
    from tesserae.runtime.store.database import Store

    db = tmp_path / "t.db"
    _old_store(db, 1, "", "completed")
    store = Store(db)
    assert store.meta("schema_version") == "6" and store.store_id
    assert store.one("SELECT node FROM jobs WHERE id=1")[0] is None and not store.query("SELECT * FROM drained_nodes")
    assert store.one("SELECT idempotency_key FROM jobs WHERE id=1")[0] is None
    old_job = store.one("SELECT held, retries, after, time_limit FROM jobs WHERE id=1")
    assert (old_job["held"], old_job["retries"], old_job["after"], old_job["time_limit"]) == (0, 0, "[]", None)
    assert tuple(store.one("SELECT queue, priority_class FROM jobs WHERE id=1")) == ("", "normal")
    assert store.next_job_id() == 2
    store.close()


@pytest.mark.parametrize(("version", "columns"), [
    # before tenant queues and lifecycle controls
    (2, ""),
    # version 3 as the tenant queues wrote it
    (3, ", queue TEXT NOT NULL DEFAULT '', priority_class TEXT NOT NULL DEFAULT 'normal'"),
    # version 3 as the lifecycle controls wrote it before they met the queues
    (3, ", time_limit REAL, retries INTEGER NOT NULL DEFAULT 0, retry_backoff REAL NOT NULL DEFAULT 10,"
        " retries_used INTEGER NOT NULL DEFAULT 0, retry_at REAL, held INTEGER NOT NULL DEFAULT 0,"
        " after TEXT NOT NULL DEFAULT '[]', array_job INTEGER, array_index INTEGER, resubmit_of INTEGER,"
        " gpu_type TEXT, cpus REAL, memory_mb INTEGER"),
], ids=["v2", "v3-queues", "v3-lifecycle"])
def test_every_earlier_store_gets_both_queue_and_lifecycle_columns(tmp_path: Path, version: int,
                                                                     columns: str) -> None:
    from tesserae.runtime.store.database import Store

    db = tmp_path / "t.db"
    _old_store(db, version, ", idempotency_key TEXT, request_hash TEXT" + columns, "queued")
    store = Store(db)
    assert store.meta("schema_version") == "6"
    row = store.one("SELECT queue, priority_class, held, retries, after, time_limit, gpu_type, output, error "
                    "FROM jobs WHERE id=1")
    assert tuple(row) == ("", "normal", 0, 0, "[]", None, None, None, None)
    store.close()
    assert Store(db).meta("schema_version") == "6"  # and it opens again as it is


def test_a_torn_last_frame_is_not_corruption(tmp_path: Path) -> None:
    """A crash in the middle of writing the last transaction loses only that transaction: SQLite's own
    recovery, which the check lets through."""
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (x)")
    for i in range(5):
        conn.execute("INSERT INTO t VALUES (?)", (i,))
    wal = db.with_name("t.db-wal")
    data = bytearray(wal.read_bytes())
    conn.close()
    data[-10] ^= 0xFF  # inside the last frame: the end of the last transaction
    wal.write_bytes(bytes(data))
    assert wal_problem(wal) is None
    data[32 + 24 + 100] ^= 0xFF  # inside the first frame: four committed transactions follow it
    wal.write_bytes(bytes(data))
    assert "committed transactions after it" in (wal_problem(wal) or "")


_OLD_JOB = ("import os; print('OLD JOB OUTPUT', flush=True); "
            "open(os.path.join(os.environ['TESSERAE_CHECKPOINT_DIR'], 'ckpt'), 'w').write('old')")
_NEW_JOB = "import os; print('checkpoints:', sorted(os.listdir(os.environ['TESSERAE_CHECKPOINT_DIR'])), flush=True)"


def test_the_advised_recovery_from_a_corrupt_wal_gives_fresh_ids_and_folders(tmp_path: Path,
                                                                              servers: Callable[..., Server]) -> None:
    """Issue 27, point 2. Before: after the WAL was moved aside as the refusal advises, the next submission got
    a lost job's id again, in its old folder: its log showed the old run's lines and its checkpoint was there."""
    state = tmp_path / "state"
    servers(state, gpus=1, policy="fifo").stop()  # a clean stop: the database file holds the admin token
    s = servers(state, gpus=1, policy="fifo")
    old = [s.submit([PY, "-c", _OLD_JOB]) for _ in range(3)]
    for job in old:
        s.wait_state(job, "completed")
    s.kill()  # the jobs are in the write-ahead log only
    wal = state / "tesserae.db-wal"
    data = bytearray(wal.read_bytes())
    page = int.from_bytes(data[8:12], "big")
    data[32 + 24 + page // 2] ^= 0xFF  # a byte of the first frame: committed frames follow it
    wal.write_bytes(bytes(data))
    line = _one_line(_start(state))
    assert "tesserae.db-wal is corrupt" in line and "moving tesserae.db-wal aside" in line
    wal.rename(state / "tesserae.db-wal.corrupt")  # the recovery the message describes
    s2 = servers(state, gpus=1, policy="fifo")
    assert s2.client().get("/v1/jobs").json()["jobs"] == []  # what the log held is lost
    assert f"job ids 1..{max(old)} are skipped" in s2.log()
    new = s2.submit([PY, "-c", _NEW_JOB])
    assert new > max(old)
    s2.wait_state(new, "completed")
    log = s2.client().get(f"/v1/jobs/{new}/logs").text
    assert "checkpoints: []" in log and "OLD JOB OUTPUT" not in log, log
    for job in old:  # the lost jobs' folders are left as they were
        assert "OLD JOB OUTPUT" in (state / "jobs" / str(job) / "output.log").read_text()


def test_an_id_whose_folder_exists_is_never_handed_out(tmp_path: Path) -> None:
    """A folder left by a job the store does not know (its own, or its workspace under the job root) makes
    the next submission skip that id; each claimed id has a new, empty folder."""
    from tesserae.runtime.job.paths import JobPaths
    from tesserae.runtime.store.job_ids import JobIds

    state, root = tmp_path / "state", tmp_path / "state-jobs"
    (state / "jobs" / "2").mkdir(parents=True)
    (root / "3").mkdir(parents=True)
    reserved: list[int] = []
    ids = JobIds(JobPaths(state, root, lambda msg: None), reserved.append)
    assert [ids.claim(1), ids.claim(2), ids.claim(5)] == [1, 4, 5]
    assert 2 in reserved and 3 in reserved and 4 in reserved
    assert all(not any((state / "jobs" / str(j)).iterdir()) for j in (1, 4, 5))
    assert not (root / "1").exists()  # the workspace is made when the job first starts
