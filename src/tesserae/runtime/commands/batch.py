"""``tesserae batch script.sh [ARGS...]``: submit a script with its ``#TESSERAE`` directives, as ``sbatch``.

Directives are lines ``#TESSERAE --option value`` (or ``--option=value``; several options on one
line are fine) at the head of the script: after the ``#!`` line, among comments and blank lines,
up to the first line of code (later ones are ordinary comments, as with ``#SBATCH``). The options
are those of the table ``DIRECTIVES``; the same options on the command line win over the script's.
A bad directive is one line naming the script, the line and the option.

The script's text is sent with the job (a copy, as sbatch keeps one: editing the file afterwards
changes nothing) and run by the interpreter its ``#!`` line names (sh, bash, zsh, dash, ksh or
python; ``/bin/sh`` without one), as ``SHELL -c TEXT NAME ARGS...`` (``$0`` is the script's name)
or ``python -c TEXT ARGS...``, in the job's own folder unless ``--workdir`` says otherwise.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.core.errors import InputError
from tesserae.runtime.commands.common import client
from tesserae.runtime.commands.submit import job_ids, parse_duration_option
from tesserae.runtime.controller.lifecycle import parse_array
from tesserae.runtime.job.resources import parse_memory

#: Largest script sent (Linux's limit on one argument, MAX_ARG_STRLEN, less a margin).
MAX_SCRIPT = 120_000
_SHELLS = re.compile(r"^(sh|bash|zsh|dash|ksh)$")
_PYTHON = re.compile(r"^python[0-9.]*$")
_DIRECTIVE = "#TESSERAE"


def _int(text: str, field: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 2**53:
        raise InputError(f"'{text}' is not a positive integer", field=field)
    return int(text)


def _array(text: str, field: str) -> str:
    try:
        parse_array(text)
    except ValueError as e:
        raise InputError(str(e), field=field) from None
    return text


def _memory(text: str, field: str) -> int:
    try:
        return parse_memory(text)
    except ValueError as e:
        raise InputError(str(e), field=field) from None


def _cpus(text: str, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 4096:
        raise InputError(f"'{text}' is not a number of CPU cores", field=field)
    return value


def _text(text: str, field: str) -> str:
    if not text:
        raise InputError("is empty", field=field)
    return text


#: option -> (the submission's field, how its value is read; None: a flag without a value).
DIRECTIVES: dict[str, tuple[str, Callable[[str, str], Any] | None]] = {
    "gpus": ("gpus", _int), "time-limit": ("time_limit", parse_duration_option), "name": ("name", _text),
    "output": ("output", _text), "error": ("error", _text), "after": ("after", lambda t, f: job_ids([t], f)),
    "after-ok": ("after_ok", lambda t, f: job_ids([t], f)), "array": ("array", _array), "queue": ("queue", _text),
    "type": ("job_type", _text), "iterations": ("iterations", _int), "retries": ("retries", _int),
    "gpu-type": ("gpu_type", _text), "node": ("node", _text), "cpus": ("cpus", _cpus), "memory": ("memory_mb", _memory),
    "nproc": ("nproc", _int), "workdir": ("workdir", _text), "hold": ("hold", None),
}


def register(app: typer.Typer) -> None:
    app.command(cls=OneLineErrors, context_settings={"allow_interspersed_args": False})(batch)


def read_directives(path: str, text: str) -> dict[str, tuple[Any, int]]:
    """The script's directives: submission field -> (value, line number). ``InputError`` naming the
    script, the line and the option for a bad one."""
    out: dict[str, tuple[Any, int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if number == 1 and stripped.startswith("#!"):
            continue
        if stripped and not stripped.startswith("#"):
            break  # the first line of code: no directive after it
        if not (stripped == _DIRECTIVE or stripped.startswith(_DIRECTIVE + " ") or
                stripped.startswith(_DIRECTIVE + "\t")):
            continue
        try:
            tokens = shlex.split(stripped[len(_DIRECTIVE):])
        except ValueError as e:
            raise InputError(f"cannot split the directive: {e}", path=path, line=number) from None
        if not tokens:
            raise InputError(f"an empty {_DIRECTIVE} directive", path=path, line=number)
        i = 0
        while i < len(tokens):
            token = tokens[i]
            name, eq, value = token.removeprefix("--").partition("=")
            field = f"--{name}"
            if not token.startswith("--") or name not in DIRECTIVES:
                raise InputError(f"unknown option '{token}'; the directives are "
                                 f"{', '.join('--' + k for k in DIRECTIVES)}", path=path, line=number, field=field)
            key, parse = DIRECTIVES[name]
            if parse is None:
                if eq:
                    raise InputError("takes no value", path=path, line=number, field=field)
                out[key] = (True, number)
                i += 1
                continue
            if not eq:
                if i + 1 >= len(tokens):
                    raise InputError("needs a value", path=path, line=number, field=field)
                value = tokens[i + 1]
                i += 1
            i += 1
            try:
                parsed = parse(value, field)
            except InputError as e:
                raise InputError(e.message, path=path, line=number, field=field) from None
            if key in ("after", "after_ok") and key in out:
                parsed = out[key][0] + parsed
            out[key] = (parsed, number)
    return out


def interpreter(path: str, text: str) -> list[str]:
    """The command that runs the script's text: from its ``#!`` line (``/usr/bin/env X`` too)."""
    first = text.split("\n", 1)[0]
    if not first.startswith("#!"):
        return ["/bin/sh", "-c"]
    words = first[2:].split()
    if not words:
        raise InputError("the #! line names no interpreter", path=path, line=1)
    program, extra = words[0], words[1:]
    if os.path.basename(program) == "env" and extra:
        program, extra = extra[0], extra[1:]
    name = os.path.basename(program)
    if not (_SHELLS.match(name) or _PYTHON.match(name)):
        raise InputError(f"the #! line names '{name}'; batch runs sh, bash, zsh, dash, ksh or python scripts",
                         path=path, line=1)
    if any(not a.startswith("-") for a in extra):
        raise InputError("the #! line's arguments must be options", path=path, line=1)
    return [program, *extra, "-c"]


def batch(
    script: Annotated[Path, typer.Argument(metavar="SCRIPT", help="The script; its #TESSERAE lines are options.",
                                           show_default=False)],
    args: Annotated[list[str] | None, typer.Argument(metavar="ARGS...", help="The script's arguments.",
                                                     show_default=False)] = None,
    gpus: Annotated[str | None, typer.Option("--gpus", metavar="N", help="GPUs (all at once).")] = None,
    time_limit: Annotated[str | None, typer.Option("--time-limit", metavar="DURATION", help="Most run time.")
                          ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Display name (default: the script's name).")] = None,
    output: Annotated[str | None, typer.Option("--output", metavar="FILE", help="File for the output (and errors "
                                               "without --error), in the job's working folder; %j = job id, %a = "
                                               "array index.")] = None,
    error: Annotated[str | None, typer.Option("--error", metavar="FILE", help="File for the errors.")] = None,
    after: Annotated[str | None, typer.Option("--after", metavar="ID[,ID...]", help="Start after these jobs have "
                                              "ended.")] = None,
    array: Annotated[str | None, typer.Option("--array", metavar="RANGE", help="One job per index (0-99, 1,3,5).")
                     ] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Tenant queue.")] = None,
    workdir: Annotated[str | None, typer.Option("--workdir", help="Working directory on the server (default: the "
                                                "job's own folder); '.' = here.")] = None,
    hold: Annotated[bool, typer.Option("--hold", help="Submit held.")] = False,
) -> None:
    """Submit a script with #TESSERAE directives (as sbatch); prints the job id. Example: tesserae batch
    train.sh --lr 0.1, where train.sh starts with '#TESSERAE --gpus 2 --time-limit 2h'."""
    path = str(script)
    try:
        raw = script.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read the script: {e.strerror}", path=path) from None
    if len(raw) > MAX_SCRIPT:
        raise InputError(f"the script is {len(raw)} bytes; batch sends at most {MAX_SCRIPT} (put the work in "
                         "files the script runs)", path=path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start})", path=path) from None
    if "\0" in text:
        raise InputError("the script contains a NUL byte", path=path)
    fields = {key: value for key, (value, _) in read_directives(path, text).items()}
    given = {"gpus": gpus, "time-limit": time_limit, "name": name, "output": output, "error": error,
             "after": after, "array": array, "queue": queue, "workdir": workdir}
    for option, value in given.items():
        if value is not None:
            key, parse = DIRECTIVES[option]
            fields[key] = parse(value, f"--{option}") if parse is not None else True
    if hold:
        fields["hold"] = True
    run = interpreter(path, text)
    name_arg = [] if _PYTHON.match(os.path.basename(run[0])) else [script.name]  # sh -c TEXT $0 $1...
    payload: dict[str, Any] = {"command": [*run, text, *name_arg, *(args or [])],
                               "gpus": fields.pop("gpus", 1), "name": fields.pop("name", script.name[:200])}
    if "workdir" in fields:
        payload["workdir"] = str(Path(fields.pop("workdir")).expanduser().resolve())
    payload.update(fields)
    with client() as c:
        job = c.submit(payload)
    print("\n".join(map(str, job.get("array_job_ids") or [job["id"]])))
