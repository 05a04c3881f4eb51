"""The server's state folder: made private, locked (one server per folder), its store checked and opened.

``STATE`` is 0700 and its files 0600 (``isolation.secure_state``); ``STATE/server.lock`` is held
with ``flock`` for the server's life; the store is checked before it is opened
(``store.integrity.preflight``), ``store.json`` kept up to date, and job ids continue after every
job folder (``job_ids``); the admin token is created at first start (``STATE/admin.token``, mode
0600, written atomically).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError
from tesserae.runtime.job import isolation as iso

ADMIN_TOKEN_FILE = "admin.token"
SERVER_FILE = "server.json"
LOCK_FILE = "server.lock"
LOG_FILE = "server.log"


@dataclass
class StateFolder:
    """An opened state folder: the path, the lock held, the job root, the store and its sidecar."""

    path: Path
    lock_fd: int
    job_root: Path
    store: Any
    sidecar: Any
    #: (first, last) job ids skipped at start-up: job folders hold them but the store does not.
    skipped_ids: tuple[int, int] | None = None


def _lock(state: Path) -> int:
    fd = os.open(state / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        other = ""
        with contextlib.suppress(OSError, ValueError):
            other = f" (pid {json.loads((state / SERVER_FILE).read_text())['pid']})"
        raise InputError(f"another tesserae server is using {state}{other}; one server per state folder") from None
    return fd


def write_private(path: Path, text: str) -> None:
    """Write ``path`` (mode 0600) atomically: a reader sees nothing or all of it, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _open_store(state: Path, job_root: Path, new_store: bool) -> tuple[Any, Any, tuple[int, int] | None]:
    """The checked store (``store.integrity``), its ``store.json``, written or brought up to date, and the
    ids skipped because job folders hold them (``job_ids``: the store lost its latest writes)."""
    from tesserae.runtime.store.database import DB_NAME, Store
    from tesserae.runtime.store.integrity import ID_BLOCK, SIDECAR, Sidecar, preflight
    from tesserae.runtime.store.job_ids import folder_floor

    db = state / DB_NAME
    check = preflight(state, db, [job_root] if job_root != state / "jobs" else [], new_store=new_store)
    sidecar = check.sidecar
    store = Store(db, store_id=sidecar.store_id if (check.fresh and sidecar is not None and not new_store) else None,
                  first_job_id=check.first_id)
    if sidecar is None or sidecar.store_id != store.store_id:
        start = max(store.next_job_id() - 1, sidecar.reserved_ids if sidecar else 0)
        sidecar = Sidecar(state / SIDECAR, store.store_id, time.time(), start + ID_BLOCK)
        sidecar.write()
    floor = folder_floor(state, job_root)
    skipped = None
    if floor >= store.next_job_id():  # job folders the store does not know: it lost its latest writes
        skipped = (store.next_job_id(), floor)
        store.continue_job_ids_after(floor)
    sidecar.reserve(store.next_job_id())
    return store, sidecar, skipped


def open_state(state: Path, isolation: iso.Isolation, *, job_root: Path | None, new_store: bool,
               log_to_state: bool) -> StateFolder:
    """Make the state folder (private), lock it, prepare the job root, open the checked store."""
    state = state.resolve()
    os.umask(0o077)  # the store, its log, tokens: the server's files are private
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise InputError(f"cannot create the state folder: {e.strerror}", path=str(state)) from None
    iso.secure_state(state)
    lock_fd = _lock(state)
    try:
        if log_to_state:  # --detach: from here on the server's output goes to STATE/server.log
            log_fd = os.open(state / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.close(log_fd)
        root = job_root.resolve() if job_root else iso.default_job_root(state, isolation)
        iso.prepare_job_root(root, state, isolation)
        store, sidecar, skipped = _open_store(state, root, new_store)
    except BaseException:
        os.close(lock_fd)
        raise
    return StateFolder(state, lock_fd, root, store, sidecar, skipped)


def ensure_admin_token(folder: StateFolder, say: Callable[[str], None]) -> None:
    """Create the admin token at first start (``STATE/admin.token``, 0600); say where it is."""
    token_path = folder.path / ADMIN_TOKEN_FILE
    store = folder.store
    if not store.has_admin():
        write_private(token_path, store.create_token("admin", admin=True, label="created at first start") + "\n")
        say(f"created the admin token in {token_path} (mode 0600); "
            f"export TESSERAE_TOKEN=$(cat {token_path})")
    elif token_path.exists():
        say(f"admin token in {token_path}")
