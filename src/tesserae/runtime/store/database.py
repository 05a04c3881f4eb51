"""The runtime's store: one SQLite database (WAL mode) under the server's state folder.

Tables: ``jobs`` (spec and current state, and the submission's idempotency key), ``drained_nodes``
(nodes an admin drained: ``nodes``), ``allocations``
(one row per run of a job: GPUs, pid, start and end: the run intervals that attained service is
computed from), ``events`` (what happened to each job, in order), ``users`` and ``tokens`` (only
SHA-256 hashes of tokens), and ``meta`` (schema version, the store's id and epoch, the
controller's heartbeat). What is checked before the store is opened, and why job ids never
repeat, is ``integrity``'s; the queries on these tables are ``jobs``, ``allocations``, ``counts``
and ``accounting`` (``query``, ``one`` and ``execute`` serve them, and tests that look inside a store).

Every state change is committed before the controller acts on it (write-ahead intent: an
allocation is recorded as ``starting`` before its process is spawned, ``stopping`` before the
stop signal is sent), so a controller killed at any instant can reconcile on restart.

One connection is shared by the API threads and the controller thread behind a lock; other
processes (``tesserae token create --state``) open their own, SQLite serialises the writers.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError
from tesserae.runtime.store.integrity import new_store_id

DB_NAME = "tesserae.db"
SCHEMA_VERSION = 6
TOKEN_PREFIX = "tsr_"

JOB_STATES = ("queued", "running", "preempted", "completed", "failed", "cancelled")
RUNNABLE_STATES = ("queued", "preempted")
ACTIVE_STATES = ("queued", "preempted", "running")
FINAL_STATES = ("completed", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS users (
    name TEXT PRIMARY KEY,
    admin INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user TEXT NOT NULL REFERENCES users(name),
    hash TEXT NOT NULL UNIQUE,
    admin INTEGER NOT NULL DEFAULT 0,
    label TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user TEXT NOT NULL,
    name TEXT NOT NULL,
    job_type TEXT NOT NULL,
    num_gpus INTEGER NOT NULL,
    command TEXT NOT NULL,
    shell INTEGER NOT NULL DEFAULT 0,
    env TEXT NOT NULL DEFAULT '{}',
    workdir TEXT,
    nproc INTEGER NOT NULL DEFAULT 1,
    iterations INTEGER,
    total_reported INTEGER,
    state TEXT NOT NULL,
    submit_time REAL NOT NULL,
    first_start REAL,
    last_start REAL,
    last_stop REAL,
    finish_time REAL,
    progress REAL NOT NULL DEFAULT 0,
    attained REAL NOT NULL DEFAULT 0,
    executed REAL NOT NULL DEFAULT 0,
    preemptions INTEGER NOT NULL DEFAULT 0,
    migrations INTEGER NOT NULL DEFAULT 0,
    requeues INTEGER NOT NULL DEFAULT 0,
    exit_code INTEGER,
    reason TEXT NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT,
    request_hash TEXT,
    queue TEXT NOT NULL DEFAULT '',
    priority_class TEXT NOT NULL DEFAULT 'normal',
    time_limit REAL,
    retries INTEGER NOT NULL DEFAULT 0,
    retry_backoff REAL NOT NULL DEFAULT 10,
    retries_used INTEGER NOT NULL DEFAULT 0,
    retry_at REAL,
    held INTEGER NOT NULL DEFAULT 0,
    after TEXT NOT NULL DEFAULT '[]',
    array_job INTEGER,
    array_index INTEGER,
    resubmit_of INTEGER,
    gpu_type TEXT,
    cpus REAL,
    memory_mb INTEGER,
    output TEXT,
    error TEXT,
    node TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_user ON jobs(user);
CREATE TABLE IF NOT EXISTS allocations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL REFERENCES jobs(id),
    gpus TEXT NOT NULL,
    partner INTEGER,
    strategy TEXT,
    phase TEXT NOT NULL,
    start_time REAL NOT NULL,
    end_time REAL,
    pid INTEGER,
    pid_start INTEGER,
    run_dir TEXT NOT NULL,
    stop_reason TEXT,
    stop_deadline REAL,
    outcome TEXT,
    exit_code INTEGER
);
CREATE INDEX IF NOT EXISTS allocations_phase ON allocations(phase);
CREATE INDEX IF NOT EXISTS allocations_job ON allocations(job_id);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE TABLE IF NOT EXISTS drained_nodes (
    name TEXT PRIMARY KEY,
    since REAL NOT NULL,
    by TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
"""
#: The columns version N -> N+1 adds to ``jobs``. 1 -> 2: submissions carry an idempotency key.
#: 2 -> 3: jobs belong to a tenant queue and a priority class. 3 -> 4: lifecycle controls
#: (``lifecycle``: time limit, retries, hold, dependencies, arrays, resubmission) and resource requests
#: (a GPU type, CPUs, memory: ``resources``). 4 -> 5: files for the job's output and errors
#: (``job.output``). 5 -> 6: the node a job is pinned to (``--node``); the ``drained_nodes`` table is
#: made at every open when missing. A column already there is not added again: a version-3
#: store written by the lifecycle branch before it met the queues has the 3 -> 4 columns and lacks the
#: 2 -> 3 ones, so every step's missing columns are added whatever version the store says it is.
_MIGRATIONS: dict[int, tuple[tuple[str, str], ...]] = {
    1: (("idempotency_key", "TEXT"), ("request_hash", "TEXT")),
    2: (("queue", "TEXT NOT NULL DEFAULT ''"), ("priority_class", "TEXT NOT NULL DEFAULT 'normal'")),
    3: (("time_limit", "REAL"), ("retries", "INTEGER NOT NULL DEFAULT 0"),
        ("retry_backoff", "REAL NOT NULL DEFAULT 10"), ("retries_used", "INTEGER NOT NULL DEFAULT 0"),
        ("retry_at", "REAL"), ("held", "INTEGER NOT NULL DEFAULT 0"), ("after", "TEXT NOT NULL DEFAULT '[]'"),
        ("array_job", "INTEGER"), ("array_index", "INTEGER"), ("resubmit_of", "INTEGER"),
        ("gpu_type", "TEXT"), ("cpus", "REAL"), ("memory_mb", "INTEGER")),
    4: (("output", "TEXT"), ("error", "TEXT")),
    5: (("node", "TEXT"),),
}
#: Indexes made at every open when missing: so a store written by an older version gets them too (the
#: migration is ``CREATE INDEX IF NOT EXISTS``: no version bump, nothing to undo). The hot paths read
#: through them, never the whole table (issue 27, point 6): one user's jobs in one state, newest first
#: (``jobs_user_state``: the id is the rowid every index ends with); an array's tasks; a job's open run
#: (``allocations_open``: the few unended runs among every run ever made).
_INDEXES = """
CREATE INDEX IF NOT EXISTS jobs_finish ON jobs(finish_time);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency ON jobs(user, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_user_state ON jobs(user, state);
CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_job) WHERE array_job IS NOT NULL;
CREATE INDEX IF NOT EXISTS allocations_open ON allocations(job_id) WHERE phase != 'ended';
CREATE TABLE IF NOT EXISTS job_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL);
"""
#: Which jobs changed (``job_changes``): the controller re-reads only those at a decision, not every job
#: (``controller.job_rows``). A running job's own updates (progress, a cancellation asked for) are not
#: logged: the controller re-reads every running job anyway. Made at every open when missing.
_CHANGE_LOG = """
CREATE TRIGGER IF NOT EXISTS jobs_changed AFTER UPDATE ON jobs WHEN OLD.state != 'running' OR NEW.state != 'running'
BEGIN INSERT INTO job_changes (job_id) VALUES (NEW.id); END
"""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who sent a request: the user a token belongs to, and whether it is an admin token."""

    user: str
    admin: bool


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class Store:
    """The SQLite store (see module docstring). Thread-safe; each call is its own transaction
    unless grouped with :meth:`tx`."""

    def __init__(self, path: str | Path, *, create: bool = True, store_id: str | None = None,
                 first_job_id: int = 1) -> None:
        """Open (or create) the store. A new store gets ``store_id`` (random when None) and hands out
        job ids from ``first_job_id`` on."""
        self.path = Path(path)
        if not create and not self.path.exists():
            raise InputError(f"no Tesserae store at {self.path}; start the server once with --state "
                             f"{self.path.parent} to create it")
        self._new_id, self._first_job_id = store_id, first_job_id
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False,
                                     timeout=30.0)
        self._conn.row_factory = sqlite3.Row
        self._depth = 0
        with self._lock:
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise InputError(f"cannot put {self.path} in WAL mode (got {mode}); is it on a network file "
                                 "system?")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute("PRAGMA busy_timeout=30000")
            with self.tx():
                self._create_schema()

    def _run_script(self, script: str) -> None:
        for statement in script.split(";"):
            if statement.strip():
                self._conn.execute(statement)

    def _create_schema(self) -> None:
        row = None
        if self._conn.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self._run_script(_SCHEMA)
            now = time.time()
            self._conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._conn.execute("INSERT INTO meta VALUES ('epoch', ?)", (repr(now),))
            if self._first_job_id > 1:  # ids of a lost store are never handed out again
                self._conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)",
                                   (self._first_job_id - 1,))
        elif int(row[0]) in _MIGRATIONS:
            present = {column["name"] for column in self._conn.execute("PRAGMA table_info(jobs)")}
            for version in sorted(_MIGRATIONS):
                for name, declaration in _MIGRATIONS[version]:
                    if name not in present:
                        self._conn.execute(f"ALTER TABLE jobs ADD COLUMN {name} {declaration}")
            self._conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise InputError(f"{self.path} has schema version {row[0]}; this Tesserae reads version "
                             f"{SCHEMA_VERSION}")
        self._run_script(_SCHEMA)  # every table and index a store of an older version lacks (all IF NOT EXISTS)
        self._run_script(_INDEXES)
        self._conn.execute(_CHANGE_LOG)  # one statement: its body holds a ';'
        if self._conn.execute("SELECT 1 FROM meta WHERE key='store_id'").fetchone() is None:
            self._conn.execute("INSERT INTO meta VALUES ('store_id', ?)", (self._new_id or new_store_id(),))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ------------------------------------------------------------------ primitives
    @contextlib.contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (nested calls join the outer one)."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            self._conn.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")
            finally:
                self._depth = 0

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def one(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
        with self._lock:
            return self._conn.execute(sql, params).fetchone()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._conn.execute(sql, params)

    # ------------------------------------------------------------------ meta
    def meta(self, key: str) -> str | None:
        row = self.one("SELECT value FROM meta WHERE key=?", (key,))
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                     (key, value))

    @property
    def epoch(self) -> float:
        return float(self.meta("epoch") or 0.0)

    @property
    def store_id(self) -> str:
        return self.meta("store_id") or ""

    def next_job_id(self) -> int:
        """The id the next job will get (inside a transaction: the one it gets)."""
        row = self.one("SELECT seq FROM sqlite_sequence WHERE name='jobs'")
        return (int(row[0]) if row is not None else 0) + 1

    def continue_job_ids_after(self, last: int) -> None:
        """Hand out job ids after ``last`` from now on (ids below it may be another job's: ``job_ids``)."""
        with self.tx() as c:
            if c.execute("UPDATE sqlite_sequence SET seq=MAX(seq, ?) WHERE name='jobs'", (last,)).rowcount == 0:
                c.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)", (last,))

    # ------------------------------------------------------------------ events
    def event(self, job_id: int | None, kind: str, detail: dict[str, Any] | str = "", t: float | None = None
              ) -> None:
        text = detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True)
        self.execute("INSERT INTO events (job_id, time, kind, detail) VALUES (?, ?, ?, ?)",
                     (job_id, time.time() if t is None else t, kind, text))

    # ------------------------------------------------------------------ users and tokens
    def create_token(self, user: str, *, admin: bool = False, label: str = "") -> str:
        """A new token for ``user`` (created if new). Only its hash is stored: show it once."""
        token = new_token()
        now = time.time()
        with self.tx() as c:
            c.execute("INSERT INTO users (name, admin, created) VALUES (?, ?, ?) "
                      "ON CONFLICT(name) DO UPDATE SET admin = MAX(admin, excluded.admin)",
                      (user, int(admin), now))
            c.execute("INSERT INTO tokens (user, hash, admin, label, created) VALUES (?, ?, ?, ?, ?)",
                      (user, hash_token(token), int(admin), label, now))
        return token

    def authenticate(self, token: str) -> Principal | None:
        digest = hash_token(token)
        row = self.one("SELECT user, hash, admin FROM tokens WHERE hash=? AND revoked=0", (digest,))
        if row is None or not hmac.compare_digest(str(row["hash"]), digest):
            return None
        return Principal(str(row["user"]), bool(row["admin"]))

    def has_admin(self) -> bool:
        return self.one("SELECT 1 FROM tokens WHERE admin=1 AND revoked=0") is not None
