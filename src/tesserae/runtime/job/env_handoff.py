"""How a job's environment reaches the job and nothing else (issue 27).

A launcher (``launcher`` on this machine, ``ray.launcher`` on a Ray node) is started with a fixed,
minimal environment (``launcher_env``: a fixed ``PATH`` and the run's markers) and never with the
job's variables: the local launcher keeps root's rights to switch each job process to its account,
and whatever the dynamic loader (``LD_PRELOAD``, ``LD_AUDIT``...), the C library (``GCONV_PATH``,
``MALLOC_*``, ``GLIBC_TUNABLES``...) or an interpreter (``PYTHON*``) reads at start would act on it
with the job's values. The job's whole environment travels in a file instead: the process that
starts the run (the server, a Ray node's agent) writes ``DIR/env.json`` (mode 0600, in the run's
folder, which the job cannot write) before the launcher starts; the launcher reads it, removes it
and gives it to ``execve`` of each job process only, after the switch to the job's account (as
systemd sets a unit's environment after dropping privileges).

Standard library only: both launchers import it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping

from tesserae.runtime.job.files import read_capped

ENV_FILE = "env.json"
#: The launchers' own PATH, whatever the job's (they run ``execve`` of absolute paths only).
FIXED_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: More than ``execve`` takes (argv and environment together): a larger file is not a job's environment.
MAX_ENV_BYTES = 32 << 20


def launcher_env(markers: Mapping[str, str]) -> dict[str, str]:
    """The fixed environment a launcher runs with: ``PATH`` and the run's markers (by which its
    processes are found), nothing of the job's."""
    return {"PATH": FIXED_PATH, **markers}


def write(folder: str | os.PathLike[str], env: Mapping[str, str]) -> None:
    """``FOLDER/env.json`` (0600), atomically: the job's whole environment for its launcher."""
    path = os.path.join(folder, ENV_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(dict(env), f)
    os.replace(tmp, path)


def take(folder: str | os.PathLike[str]) -> dict[str, str]:
    """The environment in ``FOLDER/env.json``, which is removed. Raises ValueError (one line) when the
    file is missing, not a regular file, too large, or not an object of variable names to strings."""
    path = os.path.join(folder, ENV_FILE)
    data = read_capped(path, MAX_ENV_BYTES)
    if data is None:
        raise ValueError(f"{path} is missing, not a regular file, or larger than {MAX_ENV_BYTES} bytes")
    with contextlib.suppress(OSError):
        os.unlink(path)
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{path} is not JSON") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path} is not a JSON object")
    for key, value in doc.items():
        if not key or "=" in key or "\0" in key or not isinstance(value, str) or "\0" in value:
            raise ValueError(f"{path}: {key[:64]!r} is not a variable with a text value")
    return doc
