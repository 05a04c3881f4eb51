"""The environment a job starts with: an explicit allowlist, never the server's whole environment.

A job gets a minimal base (``PATH``, ``LANG``, and ``HOME``/``USER``/``LOGNAME`` of the account it
runs as), the variables an administrator passed on by name (``tesserae server --pass-env NAME``),
its own ``env`` from the submission, and the ``TESSERAE_*``/rank variables of the job contract.
Nothing else of the server's environment reaches it: secrets set for the server (cloud keys, a
Ray token, a Tesserae token) stay with the server.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

#: Taken from the server's (or a Ray node's) environment when set there.
BASE_VARS = ("PATH", "LANG")
#: The account's own, set from the password database when the job runs under another account.
ACCOUNT_VARS = ("HOME", "USER", "LOGNAME")
#: A safe PATH when the server has none.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
