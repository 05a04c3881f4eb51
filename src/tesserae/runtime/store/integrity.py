"""The store is never silently reset: checks before the server opens it, and job ids that never repeat.

Before the store is opened (opening it would replay, or discard, its write-ahead log):

- the write-ahead log (``tesserae.db-wal``) is checked frame by frame as SQLite does (header magic,
  version and checksum; each frame's salts and running checksum). SQLite stops reading a WAL at
  the first bad frame and *silently* drops every transaction after it; a bad frame followed by
  committed ones means committed data would vanish, so the server refuses instead;
- ``PRAGMA quick_check`` on the database, and a write lock taken and released at once (a store
  locked by another process is named, not waited on for ever);
- the store's identity: every store gets a random id (``meta.store_id``) that is also written to
  ``STATE/store.json`` beside it. A database that is missing, empty, or another store's, in a
  state folder that had one, is refused: it was deleted, replaced, or lost its log.

A fresh store is never created over a state folder (or job root) that holds job folders: their
ids would be handed out again and a new job would pick up an old job's checkpoint and log.
``--new-store`` starts an empty store in a state folder that had one (after the job folders were
moved aside): its job ids continue after every id the old store could have handed out.

Job ids are reserved in blocks in ``store.json`` (``reserved_ids``) before they are used, so even
a store lost for good cannot make them repeat; and each new job's folder is made (durably) before
its id is recorded, so a store that lost its latest writes (a write-ahead log moved aside) continues
after the highest job folder instead of handing a lost job's id and folder out again (``job_ids``).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from tesserae.core.errors import InputError

SIDECAR = "store.json"
ID_BLOCK = 1000
_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_VERSION = 3007000


class StoreRefused(InputError):
    """The store cannot be used as it is; the message says which file and what to do."""


# ---------------------------------------------------------------------- the write-ahead log
def _checksum(data: bytes, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    """SQLite's WAL checksum over ``data`` (a multiple of 8 bytes), continuing from (s0, s1)."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def wal_problem(wal: Path) -> str | None:
    """What is wrong with a write-ahead log, in a few words; None when SQLite would lose nothing."""
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    if len(data) < 32:
        return None  # no header yet: SQLite treats it as empty, and so it is
    magic, version, page_size, _, salt1, salt2, c0, c1 = struct.unpack(">8I", data[:32])
    if magic not in _WAL_MAGIC:
        return "its header is damaged (bad magic number)"
    big = bool(magic & 1)
    if version != _WAL_VERSION:
        return f"its header is damaged (format version {version})"
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return f"its header is damaged (page size {page_size})"
    s0, s1 = _checksum(data[:24], 0, 0, big)
    if (s0, s1) != (c0, c1):
        return "its header fails its checksum"
    frame = 24 + page_size
    frames = (len(data) - 32) // frame
    bad_at = None
    for i in range(frames):
        off = 32 + i * frame
        head = data[off:off + 24]
        _, commit, f1, f2, fc0, fc1 = struct.unpack(">6I", head)
        if (f1, f2) != (salt1, salt2):
            if bad_at is None:
                bad_at = i  # the end of the log as SQLite sees it (stale frames of an older generation follow)
            continue
        if bad_at is None:
            s0, s1 = _checksum(head[:8] + data[off + 24:off + frame], s0, s1, big)
            if (s0, s1) != (fc0, fc1):
                bad_at = i
            continue
        if commit:  # a committed transaction of this generation after the end SQLite would stop at
            return (f"frame {bad_at + 1} of {frames} is damaged and committed transactions after it "
                    f"(frame {i + 1}) would be silently dropped")
    return None


# ---------------------------------------------------------------------- store.json
@dataclass
class Sidecar:
    """``STATE/store.json``: which store belongs to this state folder, and the job ids reserved."""

    path: Path
    store_id: str
    created: float
    reserved_ids: int

    @classmethod
    def read(cls, state: Path) -> Sidecar | None:
        path = state / SIDECAR
        try:
            doc = json.loads(path.read_text())
            return cls(path, str(doc["store_id"]), float(doc["created"]), int(doc["reserved_ids"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise StoreRefused(f"{path} is unreadable ({e}); it records which store belongs here: restore it "
                               "from a backup, or remove it if you know tesserae.db is this folder's store") from None

    def write(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"store_id": self.store_id, "created": self.created, "reserved_ids": self.reserved_ids}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def reserve(self, job_id: int) -> None:
        """Make sure ``job_id`` is reserved (durably, before it is used): a new block when needed."""
        if job_id > self.reserved_ids:
            self.reserved_ids = job_id + ID_BLOCK - 1
            self.write()


def job_folder_ids(*roots: Path) -> list[int]:
    """Ids of the job folders (``ROOT/ID``) under each root."""
    out: set[int] = set()
    for root in roots:
        try:
            with os.scandir(root) as it:
                out.update(int(e.name) for e in it if e.name.isdigit())
        except OSError:
            continue
    return sorted(out)


# ---------------------------------------------------------------------- before and after opening
@dataclass(frozen=True)
class Preflight:
    """What the checks found: create a fresh store (ids from ``first_id``) or open the existing one."""

    fresh: bool
    first_id: int
    sidecar: Sidecar | None


def _inspect(db: Path) -> tuple[bool, str | None]:
    """(has a Tesserae schema, its store id) of an existing database, after quick_check and a lock test."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=2.0, isolation_level=None)
    except sqlite3.Error as e:
        raise StoreRefused(f"{db} cannot be opened ({e}): check its owner and mode, or restore it from a backup") \
            from None
    try:
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError as e:
            if "locked" in str(e):
                raise
            raise StoreRefused(f"{db} is not a readable SQLite database ({e}): restore it (and tesserae.db-wal) from "
                               "a backup; the server will not start a new store over it") from None
        if [r[0] for r in rows] != ["ok"]:
            detail = "; ".join(str(r[0]) for r in rows[:2])
            raise StoreRefused(f"{db} is corrupt (integrity check: {detail}): restore it from a backup, or try "
                               f"'sqlite3 {db} .recover' into a new file; the server will not start on it")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            return bool(tables), None
        row = conn.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
        return True, None if row is None else str(row[0])
    except sqlite3.OperationalError as e:
        if "locked" in str(e) or "busy" in str(e):
            raise StoreRefused(f"{db} is locked by another process: close it (an sqlite3 shell, a backup tool; "
                               f"'fuser {db}' shows which) and start the server again") from None
        raise StoreRefused(f"{db} cannot be used ({e}): restore it from a backup") from None
    finally:
        conn.close()


def preflight(state: Path, db: Path, job_roots: list[Path], *, new_store: bool = False) -> Preflight:
    """Every check that must pass before the store is opened (see the module docstring)."""
    sidecar = Sidecar.read(state)
    wal = db.with_name(db.name + "-wal")
    has_db = db.exists() and db.stat().st_size > 0
    if has_db:
        problem = wal_problem(wal)
        if problem:
            raise StoreRefused(f"{wal} is corrupt: {problem}. The store was not opened: restore tesserae.db and "
                               f"tesserae.db-wal from a backup (moving {wal.name} aside keeps only what was "
                               "checkpointed into tesserae.db, and loses the rest)")
        schema, store_id = _inspect(db)
        if schema and store_id is not None:
            if sidecar is not None and sidecar.store_id != store_id:
                raise StoreRefused(f"{db} is not the store of this state folder (store id {store_id}, {sidecar.path} "
                                   f"says {sidecar.store_id}): it was replaced; put the right one back, or restore "
                                   "both from a backup")
            return Preflight(False, 0, sidecar)
        if schema and store_id is None and sidecar is None:
            return Preflight(False, 0, None)  # a store of an older Tesserae: it gets its id when opened
        if schema:
            raise StoreRefused(f"{db} has lost its identity (no store id) while {sidecar.path} names store "  # type: ignore[union-attr]
                               f"{sidecar.store_id}: restore tesserae.db from a backup")  # type: ignore[union-attr]
    folders = job_folder_ids(state / "jobs", *job_roots)
    if folders:
        where = ", ".join(str(r) for r in [state / "jobs", *job_roots] if job_folder_ids(r))
        raise StoreRefused(f"{db} is {'empty' if has_db else 'missing'} but {where} holds {len(folders)} job folder(s) "
                           f"(ids {folders[0]}..{folders[-1]}): a new store would hand their ids out again. Restore "
                           "tesserae.db (and tesserae.db-wal) from a backup; to start over, move the job folders "
                           "aside and start with --new-store")
    if sidecar is not None and not new_store:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(sidecar.created))
        raise StoreRefused(f"{db} is {'empty' if has_db else 'missing'} but {sidecar.path} records store "
                           f"{sidecar.store_id} (created {created}): the store was lost. Restore it from a "
                           "backup, or start with --new-store to begin an empty one (job ids continue after "
                           f"{sidecar.reserved_ids})")
    first = (sidecar.reserved_ids + 1) if sidecar is not None else 1
    return Preflight(True, first, sidecar)


def new_store_id() -> str:
    return secrets.token_hex(8)
