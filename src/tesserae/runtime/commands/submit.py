"""``tesserae submit``: send a job to the server; print its id."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.core.errors import InputError
from tesserae.runtime.commands.common import client, err, parse_job_id
from tesserae.runtime.controller.lifecycle import MAX_RETRIES, parse_array, parse_duration
from tesserae.runtime.job.resources import MAX_CPUS, parse_memory


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


def parse_duration_option(text: str, field: str) -> float:
    """Seconds from a duration option (``parse_duration``); one clear line naming ``field`` otherwise."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise InputError(str(e), field=field) from None


def job_ids(items: list[str] | None, field: str) -> list[int]:
    """Job ids from repeated ``ID[,ID...]`` options."""
    return [parse_job_id(part.strip(), field) for item in items or [] for part in item.split(",") if part.strip()]


def lifecycle_payload(time_limit: str | None, retries: int, retry_backoff: str, after: list[str] | None,
                      after_ok: list[str] | None, array: str | None, hold: bool) -> dict[str, Any]:
    """The submission's lifecycle fields (``runtime.controller.lifecycle``) from the command line, checked here."""
    out: dict[str, Any] = {}
    if time_limit is not None:
        out["time_limit"] = parse_duration_option(time_limit, "--time-limit")
    if retries:
        out["retries"] = retries
        out["retry_backoff"] = 0.0 if retry_backoff.strip() in ("0", "0s") else parse_duration_option(retry_backoff,
                                                                                         "--retry-backoff")
    if after:
        out["after"] = job_ids(after, "--after")
    if after_ok:
        out["after_ok"] = job_ids(after_ok, "--after-ok")
    if array is not None:
        try:
            parse_array(array)
        except ValueError as e:
            raise InputError(str(e), field="--array") from None
        out["array"] = array
    if hold:
        out["hold"] = True
    return out


def submit(
    command: Annotated[list[str] | None, typer.Argument(help="The command and its arguments, after --.",
                                                        metavar="-- CMD [ARGS]...")] = None,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs the job needs (all at once).")] = 1,
    name: Annotated[str | None, typer.Option("--name", help="Display name.")] = None,
    job_type: Annotated[str | None, typer.Option("--type", help="Job type (model), as the profile names "
                                                 "it; on a server with learned throughputs (the default) "
                                                 "a hint: any name, jobs of one type learn from each "
                                                 "other.")] = None,
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
    time_limit: Annotated[str | None, typer.Option("--time-limit", metavar="DURATION", help="Most run time "
                                                   "(90s, 30m, 2h, 1d, HH:MM:SS), summed over its runs; past it "
                                                   "the job is stopped and fails.")] = None,
    retries: Annotated[int, typer.Option("--retries", min=0, max=MAX_RETRIES, help="Requeue a failed run up to "
                                         "N times.")] = 0,
    retry_backoff: Annotated[str, typer.Option("--retry-backoff", metavar="DURATION", help="Wait before the "
                                               "first retry, doubled at each next one.")] = "10s",
    after: Annotated[list[str] | None, typer.Option("--after", metavar="ID[,ID...]", help="Start after these "
                                                    "jobs have ended (repeatable).")] = None,
    after_ok: Annotated[list[str] | None, typer.Option("--after-ok", metavar="ID[,ID...]", help="Start after "
                                                       "these jobs have completed; cancelled if one does not "
                                                       "(repeatable).")] = None,
    array: Annotated[str | None, typer.Option("--array", metavar="RANGE", help="One job per index (0-99, "
                                              "0-99:2, 1,3,5); each gets TESSERAE_ARRAY_INDEX. Prints every "
                                              "id.")] = None,
    hold: Annotated[bool, typer.Option("--hold", help="Submit held: not scheduled until 'tesserae release "
                                       "ID'.")] = False,
    gpu_type: Annotated[str | None, typer.Option("--gpu-type", metavar="TYPE", help="Run only on GPUs of this "
                                                 "type (tesserae cluster lists them).")] = None,
    node: Annotated[str | None, typer.Option("--node", metavar="NAME", help="Run only on this node (its name "
                                             "or id: tesserae node list).")] = None,
    cpus: Annotated[float | None, typer.Option("--cpus", metavar="N", min=0.01, max=MAX_CPUS, help="CPU cores "
                                               "(a cgroup quota where the server can set one; always "
                                               "accounted).")] = None,
    output: Annotated[str | None, typer.Option("--output", metavar="FILE", help="File for the job's output (and "
                                               "errors, without --error), opened by the job in its working folder "
                                               "(%j = job id, %a = array index); default: its log.")] = None,
    error: Annotated[str | None, typer.Option("--error", metavar="FILE", help="File for the job's errors "
                                              "(standard error).")] = None,
    memory: Annotated[str | None, typer.Option("--memory", metavar="SIZE", help="Memory limit: 512M, 16G (a "
                                               "cgroup limit where the server can set one; always accounted)."
                                               )] = None,
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
    payload.update(lifecycle_payload(time_limit, retries, retry_backoff, after, after_ok, array, hold))
    if gpu_type is not None:
        payload["gpu_type"] = gpu_type
    if node is not None:
        payload["node"] = node
    if cpus is not None:
        payload["cpus"] = cpus
    if memory is not None:
        try:
            payload["memory_mb"] = parse_memory(memory)
        except ValueError as e:
            raise InputError(str(e), field="--memory") from None
    for key, path in (("output", output), ("error", error)):
        if path is not None:
            payload[key] = path
    if queue is not None:
        payload["queue"] = queue
    if priority_class != "normal":
        payload["priority_class"] = priority_class
    with client() as c:
        job = c.submit(payload, idempotency_key=idempotency_key)
    print("\n".join(map(str, job.get("array_job_ids") or [job["id"]])))
    if workdir is None and not shell:
        _warn_relative_paths(command[1:], job["id"])
