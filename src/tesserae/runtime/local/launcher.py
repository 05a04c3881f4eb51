"""The per-run launcher: ``python -I launcher.py RUN_DIR NPROC [OPTIONS] -- CMD ARGS...``.

The local executor starts this small supervisor (in a session of its own) instead of the job
command itself. It starts NPROC copies of the command (``RANK``/``LOCAL_RANK`` set per copy when
NPROC > 1), forwards SIGTERM/SIGINT to them, and when they have all exited ends whatever they left
behind (a ``sleep 45 &``, a daemon), then writes their exit code to ``RUN_DIR/exit.json``
(atomically) before exiting with the same code. Because that file outlives both the job and the
controller, a controller restarted after a crash still learns how a job that ended meanwhile
ended, and never runs a completed job again; because the leftovers are gone first, a run's GPUs
are free once its launcher has exited.

The launcher runs with a fixed, minimal environment; the job's own is in ``RUN_DIR/env.json``, which
it reads, removes, and gives only to the job's processes (``env_handoff``): nothing of it acts on
the launcher, which keeps root's rights.

Options:

- ``--cgroup PATH``: the run's cgroup v2 folder (see ``lifetime``). The launcher joins it and puts
  the job's processes in its ``job`` child, which it kills as a whole at the end.
- ``--account UID:GID:G1,G2,...``: run the job's processes under this Unix account (the launcher
  itself keeps the server's, which must be root): supplementary groups, group, then user are set
  in the child before ``exec``. Without it the job runs under the launcher's own account.

Exit code: 0 when every copy succeeded; otherwise the first failing copy's code (a copy killed by
signal N counts as -N in ``exit.json``, 128+N as this process's status); 127 when the command
cannot be started (not found), 126 when it is not executable or the account cannot be taken.

What it shares with the Ray part launcher (starting and reaping the copies, forwarding signals,
the exit record) is ``supervise``. It imports only the standard library and standard-library-only
modules of the runtime (``procs``, ``lifetime``, ``supervise``, ``job.files``, ``env_handoff``): it starts in a few
tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable

from tesserae.runtime.job import env_handoff
from tesserae.runtime.job.files import read_exit_record
from tesserae.runtime.launch import lifetime, procs
from tesserae.runtime.launch.supervise import Copies, status_code, write_exit

# How long the leftovers of a run may take to die after SIGKILL before the launcher gives up on them
# (the controller then keeps the run's GPUs until they are gone, or writes the run off).
_SWEEP_TIMEOUT = 10.0
_USAGE = ("usage: python -m tesserae.runtime.local.launcher RUN_DIR NPROC [--cgroup PATH] [--account UID:GID:GROUPS] "
          "-- CMD...")


def read_exit(run_dir: str) -> tuple[int, float] | None:
    """(exit code, time) recorded by the launcher of a run, or None if it wrote nothing (or nonsense)."""
    return read_exit_record(run_dir)


def parse_account(text: str) -> tuple[int, int, list[int]]:
    """``UID:GID:G1,G2`` -> (uid, gid, supplementary groups)."""
    uid, gid, groups = text.split(":")
    return int(uid), int(gid), [int(g) for g in groups.split(",") if g]


def _child_setup(job_cgroup: str | None, account: tuple[int, int, list[int]] | None) -> Callable[[], None]:
    """What each job process does between fork and exec: join the run's ``job`` cgroup while still
    privileged, then drop to the job's account (groups, group, user: in that order)."""

    def setup() -> None:
        if job_cgroup is not None:
            with contextlib.suppress(OSError):  # it stays in the run's cgroup, which is killed as a whole
                lifetime.join(job_cgroup)
        if account is not None:
            uid, gid, groups = account
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
        os.umask(0o022)

    return setup


def _leftovers(cgroup: str | None) -> list[int]:
    """Every process of this run still alive, but this launcher. Its process group counts only when
    the launcher leads it (the executor starts it in a session of its own), never a caller's group."""
    me = os.getpid()
    found = set(procs.pids_in_group(me)) if os.getpgid(0) == me else set()
    marker = os.environ.get(procs.MARKER_VAR)
    if marker:
        found.update(procs.pids_with_marker(marker))
    if cgroup is not None:
        found.update(lifetime.pids(cgroup))
    found.discard(me)
    return sorted(p for p in found if procs.start_ticks(p) is not None)


def end_leftovers(cgroup: str | None, timeout: float = _SWEEP_TIMEOUT) -> int:
    """SIGKILL what the job left running (its ``job`` cgroup as a whole, and what shares this
    launcher's process group or marker) and wait until it is gone. Returns how many there were."""
    job_cgroup = None if cgroup is None else os.path.join(cgroup, lifetime.JOB_CHILD)
    first = _leftovers(cgroup)
    deadline = time.monotonic() + timeout
    left = first
    while left and time.monotonic() < deadline:
        if job_cgroup is not None:
            lifetime.kill(job_cgroup)
        procs.kill_pids(left)
        time.sleep(0.02)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap any that were our own children
                pass
        left = _leftovers(cgroup)
    return len(first)


def _parse(argv: list[str]) -> tuple[str, int, dict[str, str], list[str]] | None:
    if len(argv) < 4 or "--" not in argv[2:]:
        return None
    sep = argv.index("--", 2)
    run_dir, nproc, cmd = argv[0], int(argv[1]), argv[sep + 1:]
    opts: dict[str, str] = {}
    rest = argv[2:sep]
    if len(rest) % 2 or not cmd:
        return None
    for key, value in zip(rest[::2], rest[1::2], strict=True):
        if key not in ("--cgroup", "--account"):
            return None
        opts[key] = value
    return run_dir, nproc, opts, cmd


def main(argv: list[str]) -> int:
    parsed = _parse(argv)
    if parsed is None:
        print(_USAGE, file=sys.stderr)
        return 2
    run_dir, nproc, opts, cmd = parsed
    try:
        job_env = env_handoff.take(run_dir)
    except ValueError as e:
        print(f"tesserae: cannot start the job: its environment cannot be read: {e}", file=sys.stderr, flush=True)
        write_exit(run_dir, 126)
        return 126
    cgroup = opts.get("--cgroup")
    if cgroup is not None:
        try:
            lifetime.join(cgroup)
        except OSError as e:
            print(f"tesserae: cannot join the run's cgroup {cgroup}: {e.strerror}; tracking the job by process "
                  "group and marker", file=sys.stderr, flush=True)
            cgroup = None
    account = parse_account(opts["--account"]) if "--account" in opts else None
    setup = _child_setup(None if cgroup is None else os.path.join(cgroup, lifetime.JOB_CHILD), account)
    copies = Copies()
    copies.catch_signals()
    envs = [{**job_env, **({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(nproc)} if nproc > 1 else {})}
            for r in range(nproc)]
    copies.start(cmd, envs, setup, "" if account is None else f" as uid {account[0]}")
    code = copies.wait()
    left = end_leftovers(cgroup)
    if left:
        print(f"tesserae: the job's command ended; {left} process(es) it left running were killed",
              file=sys.stderr, flush=True)
    write_exit(run_dir, code)
    return status_code(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
