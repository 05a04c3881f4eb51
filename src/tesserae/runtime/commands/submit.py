"""``tesserae submit``: send a job to the server; print its id."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.core.errors import InputError
from tesserae.runtime.commands.common import client, err


def register(app: typer.Typer) -> None:
    app.command(cls=OneLineErrors, context_settings={"allow_interspersed_args": False,
                                                      "ignore_unknown_options": True})(submit)


def _warn_relative_paths(args: list[str], job_id: int) -> None:
    """The job runs in its own folder (STATE/jobs/ID/work), where a path relative to this folder means
    nothing: say so when an argument names a file or folder that exists here."""
    here = [a for a in args if a and not a.startswith(("-", "/", "~")) and "=" not in a and Path(a).exists()]
    if here:
        err.print(f"note: job {job_id} runs in its own folder on the server, where '{here[0]}' (a path relative to "
                  f"this folder) will not be found; give $PWD/{here[0]} or submit with --workdir .",
                  highlight=False, markup=False, soft_wrap=True)


def submit(
    command: Annotated[list[str] | None, typer.Argument(help="The command and its arguments, after --.",
                                                        metavar="-- CMD [ARGS]...")] = None,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs the job needs (all at once).")] = 1,
    name: Annotated[str | None, typer.Option("--name", help="Display name.")] = None,
    job_type: Annotated[str | None, typer.Option("--type", help="Job type (model), as the profile names "
                                                 "it.")] = None,
    iterations: Annotated[int | None, typer.Option("--iterations", min=1, help="Total iterations, if "
                                                   "known.")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE, repeatable.")] = None,
    workdir: Annotated[str | None, typer.Option("--workdir", help="Working directory on the server "
                                                "(default: the job's own folder); '.' = here.")] = None,
    shell: Annotated[bool, typer.Option("--shell", help="Run CMD as one /bin/sh command line.")] = False,
    nproc: Annotated[int, typer.Option("--nproc", min=1, help="Copies of CMD (RANK 0..N-1).")] = 1,
    queue: Annotated[str | None, typer.Option("--queue", help="Tenant queue (default: your queue).")] = None,
    priority_class: Annotated[str, typer.Option("--priority-class", metavar="CLASS", help="production (inside the "
                                                "queue's guarantee, never preempted), normal or preemptible.")
                              ] = "normal",
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key", metavar="KEY", help="Submit at "
                                                        "most once per KEY (default: a fresh key, so retries "
                                                        "of this command's request never submit twice).")
                               ] = None,
) -> None:
    """Submit a job; prints its id. Example: tesserae submit --gpus 2 -- python train.py --lr 0.1"""
    if not command:
        raise InputError("no command: put it after --, e.g. tesserae submit --gpus 1 -- python train.py")
    payload: dict[str, Any] = {"command": [" ".join(command)] if shell else command, "gpus": gpus,
                               "shell": shell, "nproc": nproc}
    if name is not None:
        payload["name"] = name
    if job_type is not None:
        payload["job_type"] = job_type
    if iterations is not None:
        payload["iterations"] = iterations
    if env:
        pairs = {}
        for item in env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise InputError(f"'{item}' is not KEY=VALUE", field="env")
            pairs[key] = value
        payload["env"] = pairs
    if workdir is not None:
        payload["workdir"] = str(Path(workdir).expanduser().resolve())
    if queue is not None:
        payload["queue"] = queue
    if priority_class != "normal":
        payload["priority_class"] = priority_class
    with client() as c:
        job = c.submit(payload, idempotency_key=idempotency_key)
    print(job["id"])
    if workdir is None and not shell:
        _warn_relative_paths(command[1:], job["id"])
