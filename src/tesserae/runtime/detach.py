"""``tesserae server --detach`` and ``--ready-file``: a server in the background, and how to know it answers.

The detached server is this same command in a session of its own, its output in
``STATE/server.log``; the parent returns once the server has written its ready file (url and pid,
atomically, once uvicorn accepts requests: the admin token is written by then), or exits with
the server's own error.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tesserae.core.errors import InputError
from tesserae.runtime.store.state_folder import LOG_FILE, write_private

READY_FILE = "server.ready"
DETACHED_VAR = "TESSERAE_DETACHED"


def watch_ready(server: Any, path: Path, url: str) -> None:
    """Write ``path`` (url and pid, atomically) once uvicorn accepts requests."""
    def wait() -> None:
        while not server.started:
            if server.should_exit:
                return
            time.sleep(0.01)
        write_private(path, json.dumps({"url": url, "pid": os.getpid()}) + "\n")

    threading.Thread(target=wait, name="tesserae-ready", daemon=True).start()


def detach_server(state: Path, ready_file: Path | None, say: Callable[[str], None], timeout: float = 300.0) -> None:
    """Start this same command in the background; return once it answers requests (its admin token is
    written by then), or exit with its error. Its output goes to ``STATE/server.log``."""
    argv = [a for a in sys.argv[1:] if a != "--detach"]
    if ready_file is None:
        ready_file = state.expanduser().resolve() / READY_FILE
        argv += ["--ready-file", str(ready_file)]
    with contextlib.suppress(FileNotFoundError):
        ready_file.unlink()
    proc = subprocess.Popen([sys.executable, "-m", "tesserae.cli", *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, DETACHED_VAR: "1"})
    deadline = time.monotonic() + timeout
    while True:
        try:
            doc = json.loads(ready_file.read_text())
            break
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout is not None else ""
            sys.stderr.write(out)
            raise SystemExit(proc.returncode or 1)
        if time.monotonic() > deadline:
            raise InputError(f"the server (pid {proc.pid}) did not answer within {timeout:g} s; see "
                             f"{state / LOG_FILE}")
        time.sleep(0.05)
    if proc.stdout is not None:
        proc.stdout.close()
    say(f"running in the background (pid {doc['pid']}), listening on {doc['url']}; log in {state / LOG_FILE}; "
        f"stop it with 'kill {doc['pid']}'")
