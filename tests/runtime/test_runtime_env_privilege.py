"""The job's environment reaches only the job (issue 27, point 1).

Before: the local executor started the launcher, which keeps root's rights to switch each job process
to its account, with the job's whole environment; ``python -I`` does not stop the dynamic loader, so
a submission with ``"env": {"LD_PRELOAD": "/a/library/the/user/wrote.so"}`` ran the user's code as
root (it copied the admin token). Now the launcher runs with a fixed environment and reads the job's
from a file it hands only to the job's processes (``env_handoff``), and a server with job accounts
refuses the variables the loader, the C library, a shell or an interpreter reads at start.

The library used here is a real one, compiled by the test: its constructor records the effective uid
and command line of every process that loads it. The tests need gcc, and the end-to-end one root and
useradd (the server switches each job to its account; CI runs as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_runtime_isolation import job_accounts, needs_root, open_dir  # noqa: F401 (fixtures)

from support.server import PY, Server, wait_for
from tesserae.runtime.executor.gpus import virtual_gpus
from tesserae.runtime.executor.protocol import Launch
from tesserae.runtime.job import env_handoff
from tesserae.runtime.job.isolation import Account
from tesserae.runtime.launch import procs
from tesserae.runtime.local.executor import LocalExecutor

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the LD_PRELOAD library")

_LIBRARY = r"""
#include <stdio.h>
#include <unistd.h>
/* An LD_AUDIT module must answer la_version; as an LD_PRELOAD library it is only a constructor. */
unsigned int la_version(unsigned int v) { return v; }
__attribute__((constructor)) static void record(void) {
    char path[4096], cmd[1024] = {0};
    FILE *c = fopen("/proc/self/cmdline", "r");
    if (c) { size_t n = fread(cmd, 1, sizeof cmd - 1, c); fclose(c);
             for (size_t i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' '; }
    snprintf(path, sizeof path, "%s/%d-%d", MARKS, (int)geteuid(), (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) { fprintf(f, "%d %s\n", (int)geteuid(), cmd); fclose(f); }
}
"""


def build_library(folder: Path) -> tuple[Path, Path]:
    """(the library, the folder its constructor writes to: one file per process that loaded it)."""
    marks = folder / "marks"
    marks.mkdir(mode=0o777)
    os.chmod(marks, 0o1777)  # every account may leave its mark
    src = folder / "mark.c"
    src.write_text(_LIBRARY)
    lib = folder / "libmark.so"
    r = subprocess.run(["gcc", "-shared", "-fPIC", f'-DMARKS="{marks}"', "-o", str(lib), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    os.chmod(lib, 0o755)
    return lib, marks


def loaded_by(marks: Path) -> list[tuple[int, str]]:
    """(effective uid, command line) of every process that loaded the library."""
    out = []
    for f in marks.iterdir():
        uid, _, cmd = f.read_text().partition(" ")
        out.append((int(uid), cmd.strip()))
    return out


#: One variable of each class the loader, the C library, a shell or an interpreter reads at start.
def hostile_env(lib: Path, folder: Path) -> dict[str, str]:
    return {"LD_PRELOAD": str(lib), "LD_AUDIT": str(lib), "LD_LIBRARY_PATH": str(folder),
            "DYLD_INSERT_LIBRARIES": str(lib), "GCONV_PATH": str(folder), "GLIBC_TUNABLES": "glibc.malloc.check=3",
            "MALLOC_CHECK_": "3", "PYTHONPATH": str(folder), "PYTHONSTARTUP": str(folder / "x.py"),
            "PYTHONINSPECT": "1", "BASH_ENV": str(folder / "x.sh"), "ENV": str(folder / "x.sh"), "IFS": "/",
            "PERL5OPT": "-Mx", "NODE_OPTIONS": "--require x", "JAVA_TOOL_OPTIONS": "-javaagent:x.jar",
            "OPENSSL_CONF": str(folder / "x.cnf")}


def _line(path: Path) -> str | None:
    """The whole line a job wrote to ``path``, once it is all there."""
    text = path.read_text() if path.exists() else ""
    return text if text.endswith("\n") else None


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(e.split("=", 1) for e in raw.decode(errors="replace").split("\0") if "=" in e)


@needs_gcc
def test_the_launcher_never_runs_with_the_jobs_environment(tmp_path: Path, open_dir: Path) -> None:  # noqa: F811
    """Before: the launcher's own environment was the job's, so LD_PRELOAD loaded the library into it (as root
    when the server is root). Now it has a fixed one, and the job's processes get the job's whole one."""
    folder = open_dir
    lib, marks = build_library(folder)
    account = None
    if os.geteuid() == 0:  # as a root server does: the job runs under an unprivileged account
        nobody = pwd.getpwnam("nobody")
        account = Account("nobody", nobody.pw_uid, nobody.pw_gid, (), "/")
    run_dir = tmp_path / "state" / "jobs" / "1" / "runs" / "1"
    run_dir.mkdir(parents=True)
    os.chmod(tmp_path / "state", 0o700)
    cwd = folder / "work"
    cwd.mkdir(mode=0o777)
    os.chmod(cwd, 0o777)
    job_vars = {**hostile_env(lib, folder), "MY_SETTING": "kept"}
    job_vars.pop("PYTHONINSPECT")  # the job is a shell here: nothing interactive
    executor = LocalExecutor(virtual_gpus(1))
    script = f"printf '%s|%s|%s\\n' \"$MY_SETTING\" \"$LD_PRELOAD\" \"$(id -u)\" > {cwd}/seen; sleep 30"
    log = tmp_path / "output.log"
    run = executor.spawn(Launch(["/bin/sh", "-c", script], job_vars, cwd, log, run_dir, 1, (0,), account))
    try:
        seen = wait_for(lambda: _line(cwd / "seen"), 20, 0.05, "the job's line")
        launcher_env = _environ(run.pid)
        assert launcher_env == env_handoff.launcher_env({procs.MARKER_VAR: str(run_dir)}), launcher_env
        assert not (run_dir / env_handoff.ENV_FILE).exists()  # read and removed
        job_uid = os.geteuid() if account is None else account.uid
        assert seen.strip() == f"kept|{lib}|{job_uid}", seen
        loads = loaded_by(marks)
        assert loads, "the job's own processes load the job's LD_PRELOAD"
        assert not [c for _, c in loads if "launcher" in c], loads
        assert {uid for uid, _ in loads} == {job_uid}, loads
    finally:
        executor.kill(run)
        wait_for(lambda: executor.exited(run), 20, 0.05, "the run to end")


@needs_root
@needs_gcc
def test_a_user_cannot_hand_the_loader_or_an_interpreter_a_variable(servers: Callable[..., Server],
                                                                    job_accounts: tuple[str, ...],  # noqa: F811
                                                                    open_dir: Path) -> None:  # noqa: F811
    """Before: every submission below was accepted (201) and the first ran the library in the root launcher."""
    lib, marks = build_library(open_dir)
    s = servers(open_dir / "state", gpus=1, policy="fifo", isolation=("--job-user", "tsr-jobs"))
    alice = s.client().post("/v1/tokens", json={"user": "alice"}).json()["token"]
    c = s.client(alice)
    for name, value in hostile_env(lib, open_dir).items():
        r = c.post("/v1/jobs", json={"command": ["true"], "gpus": 1, "env": {"OK_VAR": "1", name: value}})
        assert r.status_code == 422, (name, r.status_code, r.text)
        body = r.json()
        assert body["errors"] == [{"field": f"env.{name}", "message": body["detail"]}], body
        assert name in body["detail"] and "inside the job's command" in body["detail"], body
    # What a job may set still reaches it, run under its account.
    job = s.submit(["/bin/sh", "-c", 'echo "seen $OK_VAR $TMPDIR $(id -un)"'], token=alice,
                   env={"OK_VAR": "yes", "TMPDIR": "/tmp"})
    s.wait_state(job, "completed")
    assert "seen yes /tmp tsr-jobs" in s.client(alice).get(f"/v1/jobs/{job}/logs").text
    # A variable it may not set can still be set inside its command, where it acts on the job alone.
    job = s.submit([f"LD_PRELOAD={lib} /bin/true"], shell=True, token=alice)
    s.wait_state(job, "completed")
    loads = loaded_by(marks)
    assert loads and all(uid == pwd.getpwnam("tsr-jobs").pw_uid for uid, _ in loads), loads


@needs_gcc
def test_a_same_user_server_takes_the_variables_but_keeps_them_from_the_launcher(
        tmp_path: Path, servers: Callable[..., Server]) -> None:
    """With --insecure-same-user the job runs as the server's account anyway: the variables are accepted,
    and still reach the job's processes only."""
    lib, marks = build_library(tmp_path)
    s = servers(tmp_path / "state", gpus=1, policy="fifo")
    job = s.submit([PY, "-c", "import os; print('preload', os.environ['LD_PRELOAD'])"],
                   env={"LD_PRELOAD": str(lib), "PYTHONSAFEPATH": "1"})
    s.wait_state(job, "completed")
    assert f"preload {lib}" in s.client().get(f"/v1/jobs/{job}/logs").text
    loads = loaded_by(marks)
    assert any(sys.executable in c or "python" in c for _, c in loads), loads
    assert not [c for _, c in loads if "launcher" in c], loads
