"""Who a job runs as, and what it can reach on disk.

Jobs are untrusted code. They never run as the server's Unix account (which can read the admin
token and the store) unless the operator says so explicitly:

- **Root server, one job account** (``--job-user ACCOUNT``): every job runs as ACCOUNT, an
  unprivileged account made for the purpose. Jobs cannot read the state folder, but jobs of
  different Tesserae users share that account (they can see each other's files and processes).
- **Root server, a user map** (``--user-map FILE``, TOML ``[accounts]`` of ``tesserae_user =
  "unix_account"``): each Tesserae user's jobs run as their own Unix account; users missing from
  the map run as ``--job-user`` if given, else their submissions are refused.
- **Same user** (``--insecure-same-user``): jobs run as the server's own account, which is the
  only choice of a server that is not root. Nothing separates a job from the server then: it is
  meant for a machine one person uses.

A server started without any of these refuses to start, with one line saying which to choose.

On disk the state folder (store, tokens, the server's files, logs and exit records) is 0700 and
its files 0600, whatever they were before. With job accounts, what a job may write lives apart,
under the *job root* (``--job-root``, default ``STATE-jobs`` beside the state folder, mode 0711
owned by root): ``JOBROOT/ID`` (its checkpoints, progress file and default working folder) is
0700 and owned by the job's account.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tesserae.core.errors import InputError

SECURITY_DOC = "docs/runtime.md#security"


@dataclass(frozen=True)
class Account:
    """A Unix account jobs run as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    @classmethod
    def lookup(cls, name: str, *, where: str) -> Account:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise InputError(f"{where}: there is no Unix account '{name}' on this machine (create one, e.g. "
                             f"'useradd --system --no-create-home --shell /usr/sbin/nologin {name}')") from None
        if pw.pw_uid == 0:
            raise InputError(f"{where}: '{name}' is root; jobs never run as root")
        if pw.pw_uid == os.geteuid():
            raise InputError(f"{where}: '{name}' is the server's own account; jobs need another one")
        groups = tuple(g for g in os.getgrouplist(name, pw.pw_gid) if g != 0)
        return cls(name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir)

    def launcher_arg(self) -> str:
        return f"{self.uid}:{self.gid}:{','.join(map(str, self.groups))}"

    def env(self) -> dict[str, str]:
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}


@dataclass(frozen=True)
class Isolation:
    """The server's choice (see the module docstring); ``same_user`` or else accounts."""

    same_user: bool
    default: Account | None = None
    accounts: Mapping[str, Account] = field(default_factory=dict)
    map_file: str | None = None

    def account_for(self, user: str) -> Account | None:
        """The account of ``user``'s jobs; None in same-user mode. Raises PermissionError for a user
        with no account."""
        if self.same_user:
            return None
        account = self.accounts.get(user, self.default)
        if account is None:
            raise PermissionError(f"user '{user}' has no Unix account on this server (not in the user map "
                                  f"{self.map_file}, and no --job-user for the others)")
        return account

    def describe(self) -> str:
        if self.same_user:
            return f"jobs run as the server's own account ({_me()}, insecure: --insecure-same-user)"
        parts = []
        if self.accounts:
            parts.append(f"{len(self.accounts)} user(s) mapped to their own accounts ({self.map_file})")
        if self.default is not None:
            parts.append(f"{'the others' if self.accounts else 'every job'} as '{self.default.name}'")
        return "jobs run " + "; ".join(parts)


def _me() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def read_user_map(path: Path) -> dict[str, Account]:
    """The ``[accounts]`` table of a user map file: Tesserae user -> Unix account."""
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as e:
        raise InputError(f"cannot read the user map: {e.strerror}", path=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"the user map is not valid TOML: {e}", path=str(path)) from None
    unknown = sorted(set(doc) - {"accounts"})
    if unknown:
        raise InputError(f"unknown key '{unknown[0]}' (the user map has one table, [accounts])", path=str(path))
    table = doc.get("accounts")
    if not isinstance(table, dict) or not table:
        raise InputError("no [accounts] table (lines 'tesserae_user = \"unix_account\"')", path=str(path))
    out = {}
    for user, account in table.items():
        if not isinstance(account, str) or not account:
            raise InputError(f"accounts.{user}: expected the name of a Unix account", path=str(path))
        out[user] = Account.lookup(account, where=f"{path}: accounts.{user}")
    return out


def resolve(*, job_user: str | None, user_map: Path | None, same_user: bool, executor: str = "local") -> Isolation:
    """The server's isolation from its options; an InputError (one line) when it cannot be had."""
    if same_user and (job_user or user_map):
        raise InputError("--insecure-same-user runs jobs as the server's account: it does not go with --job-user or "
                         "--user-map", field="insecure-same-user")
    if same_user:
        return Isolation(same_user=True)
    if executor == "ray":
        raise InputError(f"--executor {executor} runs jobs as the account of the Ray workers, which Tesserae cannot "
                         "change: pass --insecure-same-user to accept that (see " + SECURITY_DOC + ")",
                         field="executor")
    if os.geteuid() != 0:
        if job_user or user_map:
            raise InputError("--job-user and --user-map need the server to run as root (it switches each job to its "
                             "account)", field="job-user" if job_user else "user-map")
        raise InputError(f"jobs would run as your own account ({_me()}) and could read the admin token and the store: "
                         "run the server as root with --job-user ACCOUNT or --user-map FILE, or pass "
                         f"--insecure-same-user on a machine you do not share (see {SECURITY_DOC})",
                         field="insecure-same-user")
    if not job_user and not user_map:
        raise InputError("the server runs as root and jobs never do: give --job-user ACCOUNT (an unprivileged account "
                         "for jobs) or --user-map FILE (each user's own account), or --insecure-same-user (see "
                         f"{SECURITY_DOC})", field="job-user")
    default = Account.lookup(job_user, where="--job-user") if job_user else None
    accounts = read_user_map(user_map) if user_map else {}
    return Isolation(same_user=False, default=default, accounts=accounts,
                     map_file=None if user_map is None else str(user_map))


# ---------------------------------------------------------------------- the state folder on disk
_PRIVATE_DIRS = ("jobs",)


def secure_state(state: Path) -> None:
    """Make the state folder 0700 and the server's files in it 0600, whatever existed before.

    Covers the folder, its files (store, WAL, token, server files), ``jobs/`` and every private
    job folder with its log and run records. A job's own workspace content (checkpoints, work)
    is the job's and is left as it is.
    """
    _chmod(state, 0o700)
    for entry in _scandir(state):
        if entry.is_symlink():
            continue
        if entry.is_file():
            _chmod(Path(entry.path), 0o600)
        elif entry.is_dir() and entry.name in _PRIVATE_DIRS:
            _chmod(Path(entry.path), 0o700)
    for job in _scandir(state / "jobs"):
        if job.is_symlink() or not job.is_dir():
            continue
        _chmod(Path(job.path), 0o700)
        log = Path(job.path) / "output.log"
        if log.is_file() and not log.is_symlink():
            _chmod(log, 0o600)
        runs = Path(job.path) / "runs"
        if runs.is_dir() and not runs.is_symlink():
            _chmod(runs, 0o700)


def _scandir(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _chmod(path: Path, mode: int) -> None:
    with contextlib.suppress(OSError):
        if stat.S_IMODE(path.lstat().st_mode) != mode:
            os.chmod(path, mode, follow_symlinks=False)


def default_job_root(state: Path, isolation: Isolation) -> Path:
    """Same-user mode keeps each job's workspace in its state folder (``STATE/jobs/ID``); with job
    accounts it lives beside it (``STATE-jobs/ID``), since a job cannot pass through a 0700 folder."""
    return state / "jobs" if isolation.same_user else state.parent / f"{state.name}-jobs"


def prepare_job_root(root: Path, state: Path, isolation: Isolation) -> None:
    """Create the job root; with job accounts it must lie outside the state folder and be 0711 root's."""
    if isolation.same_user:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return
    if root == state or state in root.parents:
        raise InputError(f"--job-root {root} lies inside the state folder, which jobs cannot enter (0700); choose "
                         "a folder beside it", field="job-root")
    for folder in root.parents:  # every folder above the job root must let the job accounts pass
        with contextlib.suppress(OSError):
            if not folder.stat().st_mode & stat.S_IXOTH:
                raise InputError(f"jobs cannot reach the job root {root}: {folder} is not searchable by other "
                                 f"accounts (mode {stat.S_IMODE(folder.stat().st_mode):04o}); choose a --job-root "
                                 "they can reach, e.g. /var/lib/tesserae-jobs", field="job-root")
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o711)
        st = root.lstat()
        if not stat.S_ISDIR(st.st_mode):
            raise InputError(f"{root} is not a folder", field="job-root")
        if st.st_uid != 0:
            os.chown(root, 0, 0, follow_symlinks=False)
        os.chmod(root, 0o711, follow_symlinks=False)
    except OSError as e:
        raise InputError(f"cannot prepare the job root {root}: {e.strerror}", field="job-root") from None


def prepare_workspace(root: Path, job_id: int, account: Account | None) -> Path:
    """``JOBROOT/ID`` with ``checkpoints`` and ``work`` in it, owned by the job's account (0700).

    Made once, on the job's first start, while nothing of it belongs to the job yet (so no link a
    job planted is ever followed with the server's rights). Later starts only check that it is a
    folder of the right owner. Raises OSError.
    """
    ws = root / str(job_id)
    if account is None:  # same-user mode: the job's folder in the state folder, as the server's own
        for sub in ("checkpoints", "work"):
            (ws / sub).mkdir(parents=True, exist_ok=True)
        return ws
    try:
        st = ws.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(f"the job's folder {ws} is not a folder")
        if st.st_uid != account.uid:
            raise OSError(f"the job's folder {ws} belongs to uid {st.st_uid}, not to {account.name}")
        return ws
    tmp = root / f".{job_id}.new"
    with contextlib.suppress(FileNotFoundError):
        for sub in ("checkpoints", "work"):
            with contextlib.suppress(FileNotFoundError):
                (tmp / sub).rmdir()
        tmp.rmdir()
    tmp.mkdir(mode=0o700)
    for sub in ("checkpoints", "work"):
        (tmp / sub).mkdir(mode=0o700)
        os.chown(tmp / sub, account.uid, account.gid, follow_symlinks=False)
    os.chown(tmp, account.uid, account.gid, follow_symlinks=False)
    os.rename(tmp, ws)
    return ws
