"""The environment a job starts with: an explicit allowlist, never the server's whole environment.

A job gets, in this order (a later layer wins):

1. a minimal base (``PATH``, ``LANG``, and ``HOME``/``USER``/``LOGNAME`` of the account it runs as)
   and the variables an administrator passed on by name (``tesserae server --pass-env NAME``):
   ``base_env``, taken by the executor where the job starts (the server, or a Ray node);
2. its own ``env`` from the submission and the ``TESSERAE_*`` variables of the job contract:
   ``contract``, formed by the controller;
3. its devices and ranks (``CUDA_VISIBLE_DEVICES``, ``MASTER_ADDR``/``MASTER_PORT``, ``RANK``...):
   ``device_env``, from the executor, which knows its GPUs' devices and nodes (the launchers then
   set ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` per process of a multi-process job).

Nothing else of the server's environment reaches it: secrets set for the server (cloud keys, a
Ray token, a Tesserae token) stay with the server. And none of it reaches a privileged process:
the launchers run with a fixed environment and hand this one to the job's processes only
(``env_handoff``). With job accounts, a submission may not set the variables that the loader, the
C library, a shell or an interpreter reads at start (``refused``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tesserae.runtime.job import resources

#: Taken from the server's (or a Ray node's) environment when set there.
BASE_VARS = ("PATH", "LANG")
#: The account's own, set from the password database when the job runs under another account.
ACCOUNT_VARS = ("HOME", "USER", "LOGNAME")
#: A safe PATH when the server has none.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Variables that change what the dynamic loader, the C library, a shell or an interpreter loads or
#: runs at start, by the name prefix or name: refused in a submission's ``env`` unless jobs run as the
#: server's own account (``refused``). They never reach a privileged process anyway (``env_handoff``);
#: refusing them keeps a second wall, as glibc ignores the first two classes for set-uid programs.
REFUSED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("LD_", "the dynamic loader"), ("DYLD_", "the dynamic loader"), ("MALLOC_", "the C library's allocator"),
    ("PYTHON", "the Python interpreter"), ("BASH_FUNC_", "bash (exported functions)"), ("PERL5", "Perl"),
    ("RUBY", "Ruby"), ("LUA_", "Lua"))
REFUSED_NAMES: dict[str, str] = {
    **dict.fromkeys(("GLIBC_TUNABLES", "GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
                     "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR"), "the C library"),
    **dict.fromkeys(("BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH", "GLOBIGNORE",
                     "PROMPT_COMMAND", "ZDOTDIR"), "the shell"),
    **dict.fromkeys(("PERLLIB", "PERLIO"), "Perl"),
    **dict.fromkeys(("NODE_OPTIONS", "NODE_PATH"), "Node.js"),
    **dict.fromkeys(("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS"), "the Java VM"),
    **dict.fromkeys(("OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES"), "OpenSSL"),
    "TCLLIBPATH": "Tcl", "PHPRC": "PHP",
}


def check_pass_env(names: Iterable[str]) -> tuple[str, ...]:
    """Validate ``--pass-env`` names (environment variable names; not Tesserae's own)."""
    out = []
    for name in names:
        if not _NAME.match(name):
            raise ValueError(f"'{name}' is not an environment variable name")
        if name.startswith("TESSERAE_"):
            raise ValueError(f"{name}: the server's TESSERAE_* variables are never passed to jobs")
        out.append(name)
    return tuple(dict.fromkeys(out))


def refused(name: str) -> str | None:
    """Why a job may not set ``name`` in its ``env`` on a server with job accounts; None if it may."""
    reader = REFUSED_NAMES.get(name) or next((who for prefix, who in REFUSED_PREFIXES if name.startswith(prefix)),
                                             None)
    if reader is None:
        return None
    return (f"{name} is read by {reader} when a process starts, and this server refuses such variables in a job's "
            "env (see docs/runtime.md#security); set it inside the job's command instead, e.g. with shell=true: "
            f"'{name}=... exec python train.py'")


def base_env(source: Mapping[str, str] | None = None, *, pass_env: Iterable[str] = (),
             account: Mapping[str, str] | None = None) -> dict[str, str]:
    """The base of every job's environment, before the job's own ``env`` and the contract's variables.

    ``source`` is the environment of the process that starts the job (the server's, or a Ray
    node's); ``account`` gives ``HOME``/``USER``/``LOGNAME`` of the job's Unix account when it is
    not the server's own (else they come from ``source``).
    """
    src = os.environ if source is None else source
    env = {k: src[k] for k in (*BASE_VARS, *ACCOUNT_VARS) if k in src}
    env.setdefault("PATH", DEFAULT_PATH)
    if account is not None:
        for k in ACCOUNT_VARS:
            env.pop(k, None)
        env.update({k: v for k, v in account.items() if k in ACCOUNT_VARS})
    for name in pass_env:
        if name in src and not name.startswith("TESSERAE_"):
            env[name] = src[name]
    return env


def contract(job: Mapping[str, Any], workspace: Path, gpus: tuple[int, ...], run_id: int,
             strategy: str | None, gpu_type: str | None = None) -> dict[str, str]:
    """The job's own ``env`` (a stored job row's) and the job contract's ``TESSERAE_*`` variables over it
    (``TESSERAE_GPU_TYPE``: the type of the run's GPUs, when known)."""
    env = dict(json.loads(job["env"]))
    env.update({
        "TESSERAE_JOB_ID": str(job["id"]),
        "TESSERAE_JOB_NAME": str(job["name"]),
        "TESSERAE_USER": str(job["user"]),
        "TESSERAE_RUN_ID": str(run_id),
        "TESSERAE_CHECKPOINT_DIR": str(workspace / "checkpoints"),
        "TESSERAE_PROGRESS_FILE": str(workspace / "progress.json"),
        "TESSERAE_NUM_GPUS": str(len(gpus)),
        "TESSERAE_GPU_IDS": ",".join(str(g) for g in gpus),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "PYTHONUNBUFFERED": "1",
    })
    if job["iterations"] is not None:
        env["TESSERAE_ITERATIONS"] = str(job["iterations"])
    if strategy:
        env["TESSERAE_STRATEGY"] = strategy
    if gpu_type:
        env["TESSERAE_GPU_TYPE"] = gpu_type
    if "array_index" in job.keys() and job["array_index"] is not None:  # noqa: SIM118 (a sqlite3.Row's `in` is its values)
        env["TESSERAE_ARRAY_INDEX"] = str(job["array_index"])
        env["TESSERAE_ARRAY_JOB_ID"] = str(job["array_job"])
    return {**resources.env_for(job), **env}


def device_env(devices: Iterable[str], master_addr: str, master_port: int) -> dict[str, str]:
    """A run's devices and its rank-0 address; one process of rank 0 until a launcher says otherwise."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(devices), "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
            "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
