"""Files for a job's output and errors (``tesserae submit/batch --output/--error``, as sbatch's).

The server never opens them. A run of a job with ``output`` or ``error`` starts its command under a
tiny ``/bin/sh`` prologue that redirects its own standard output and error, then ``exec``s the
command: the files are opened by the job's process, under the job's account, in the job's working
folder (its workdir, or its own folder), so they give a job no way to write where its account
could not anyway. Without ``error``, errors go to the output file too; without ``output``, the
job's output stays in its log (``tesserae logs``). Each run appends (a resumed job's output
follows its earlier runs'). ``%j`` in a path is the job's id, ``%A`` its array's id (the job's when
it is not an array task), ``%a`` its array index (0 when none), ``%%`` a percent sign.

``check_path`` is what the API accepts: at most 4096 characters, no control characters, and a
relative path must stay inside the working folder (no ``..``; in the job's own folder, which
starts empty, a file name only); an absolute one must name a file in a folder that exists on the
server. (Folders are checked on the server's machine, as the job's program is.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

MAX_PATH = 4096
_PATTERN = re.compile(r"%(.)")
_PROLOGUE = ('o=$1 e=$2; shift 2; if [ -n "$o" ]; then exec >>"$o" || exit 1; fi; '
             'if [ -n "$e" ]; then exec 2>>"$e" || exit 1; elif [ -n "$o" ]; then exec 2>&1; fi; exec "$@"')


def check_path(path: str, workdir: str | None) -> str | None:
    """Why ``path`` cannot be an output or error file of a job working in ``workdir`` (None: it can)."""
    if not path or len(path) > MAX_PATH:
        return f"give a path of 1 to {MAX_PATH} characters"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        return "the path has a control character"
    for m in _PATTERN.finditer(path):
        if m.group(1) not in "jAa%":
            return f"'%{m.group(1)}' is not a pattern: use %j (job id), %A (array id), %a (array index) or %%"
    if path.endswith("/"):
        return "the path names a folder; give a file name"
    if not os.path.isabs(path):
        if ".." in path.split("/"):
            return "a relative path must stay inside the job's working folder (no '..')"
        folder = os.path.dirname(path)
        if folder and workdir is None:
            return "the job's own folder starts empty: give a file name there, an absolute path or a workdir"
        if folder and workdir is not None and not os.path.isdir(os.path.join(workdir, folder)):
            return f"the folder {folder} does not exist in {workdir} on the server"
        return None
    if not os.path.isdir(os.path.dirname(path)):
        return f"the folder {os.path.dirname(path)} does not exist on the server"
    return None


def expand(path: str, job: Mapping[str, Any]) -> str:
    """The path with ``%j``, ``%A``, ``%a`` and ``%%`` replaced for this job's row."""
    values = {"j": str(job["id"]), "A": str(job["array_job"] or job["id"]), "a": str(job["array_index"] or 0),
              "%": "%"}
    return _PATTERN.sub(lambda m: values.get(m.group(1), m.group(0)), path)


def wrap(argv: list[str], job: Mapping[str, Any]) -> list[str]:
    """The run's command: ``argv`` itself, or under the redirecting prologue when the job has files."""
    if not job["output"] and not job["error"]:
        return argv
    out = expand(job["output"], job) if job["output"] else ""
    err = expand(job["error"], job) if job["error"] else ""
    return ["/bin/sh", "-c", _PROLOGUE, "tesserae-output", out, err, *argv]
