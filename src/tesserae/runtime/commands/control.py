"""``tesserae cancel``, ``hold``, ``release`` (several ids and filters, as Slurm's ``scancel -u/-n/-t``)
and ``tesserae update`` (a waiting job's time limit, GPUs, queue, dependencies: ``scontrol update``).

Every job named by id that was not acted on is one ``error:`` line (another user's, no such job,
already ended...) and the exit status is then 2; the jobs that could be were acted on anyway, as
scancel does. Filters pick only the jobs the action would change; a count ends the output.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.core.errors import InputError
from tesserae.runtime.commands.common import client, console, duration, err, parse_job_id
from tesserae.runtime.commands.submit import job_ids, parse_duration_option

JobIds = Annotated[list[str] | None, typer.Argument(metavar="ID...", help="Job ids (with filters: only those "
                                                    "of them that match).", show_default=False)]
User = Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs (another user's: admin "
                                          "token).")]
Name = Annotated[str | None, typer.Option("--name", "-n", help="Only jobs of this exact name.")]
State = Annotated[str | None, typer.Option("--state", "-t", metavar="STATE", help="Only jobs in this state "
                                           "(queued, preempted; running for cancel).")]
Queue = Annotated[str | None, typer.Option("--queue", "-q", help="Only jobs of this tenant queue.")]

_PAST = {"cancel": "cancelled", "hold": "held", "release": "released"}


def register(app: typer.Typer) -> None:
    for command in (cancel, hold, release, update):
        app.command(cls=OneLineErrors)(command)


def _act(action: str, ids: list[str] | None, user: str | None, name: str | None, state: str | None,
         queue: str | None) -> None:
    numbers = [parse_job_id(part.strip()) for item in ids or [] for part in item.split(",") if part.strip()]
    filters = {k: v for k, v in (("user", user), ("name", name), ("state", state), ("queue", queue)) if v is not None}
    if not numbers and not filters:
        raise InputError(f"name the jobs to {action}: give job ids, or --user, --name, --state or --queue")
    selection: dict[str, Any] = {**filters, **({"ids": numbers} if numbers else {})}
    done: list[dict[str, Any]] = []
    problems: list[str] = []
    with client() as c:
        while True:
            answer = c.bulk(action, selection)
            done += answer["done"]
            problems += [f"job {j} does not exist" for j in answer["not_found"]]
            problems += [f"job {j} belongs to another user" for j in answer["denied"]]
            problems += [f"job {s['id']}: not {_PAST[action]}: {s['reason']}" for s in answer["skipped"]]
            if not answer["more"] or not answer["done"]:
                break
    for j in done:
        console.print(f"job {j['id']}: {j['result']}", highlight=False)
    if filters or len(numbers) > 1:
        cancelling = sum(1 for j in done if j["result"] == "cancelling")
        extra = f" ({cancelling} running: stopping)" if cancelling else ""
        err.print(f"{_PAST[action]} {len(done)} job{'s' if len(done) != 1 else ''}{extra}"
                  + (f"; {len(problems)} not" if problems else ""), highlight=False)
    if problems:
        for line in problems:
            err.print(f"error: {line}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2)


def cancel(job_ids: JobIds = None, user: User = None, name: Name = None, state: State = None,
           queue: Queue = None) -> None:
    """Cancel jobs (a running one gets SIGTERM, then SIGKILL after the grace period). Example: tesserae cancel
    --user alice --state queued"""
    _act("cancel", job_ids, user, name, state, queue)


def hold(job_ids: JobIds = None, user: User = None, name: Name = None, state: State = None,
         queue: Queue = None) -> None:
    """Hold waiting jobs: they are not scheduled until released."""
    _act("hold", job_ids, user, name, state, queue)


def release(job_ids: JobIds = None, user: User = None, name: Name = None, state: State = None,
            queue: Queue = None) -> None:
    """Release held jobs: they wait for the scheduler again."""
    _act("release", job_ids, user, name, state, queue)


def update(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="A waiting job's id.")],
    time_limit: Annotated[str | None, typer.Option("--time-limit", metavar="DURATION", help="New time limit "
                                                   "(90s, 30m, 2h, HH:MM:SS), over all its runs.")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=1, help="New GPU count.")] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="New tenant queue.")] = None,
    after: Annotated[list[str] | None, typer.Option("--after", metavar="ID[,ID...]|none", help="Replace its "
                                                    "dependencies: start after these jobs have ended ('none': "
                                                    "no dependency).")] = None,
    after_ok: Annotated[list[str] | None, typer.Option("--after-ok", metavar="ID[,ID...]", help="Replace its "
                                                       "dependencies: start after these jobs have completed.")
                        ] = None,
    node: Annotated[str | None, typer.Option("--node", metavar="NAME|any", help="Run only on this node ('any': "
                                             "on any node).")] = None,
) -> None:
    """Change a waiting job (as scontrol update): its time limit, GPUs, queue, dependencies or node."""
    number = parse_job_id(job_id)
    changes: dict[str, Any] = {}
    if time_limit is not None:
        changes["time_limit"] = parse_duration_option(time_limit, "--time-limit")
    if gpus is not None:
        changes["gpus"] = gpus
    if queue is not None:
        changes["queue"] = queue
    if after is not None or after_ok is not None:
        none = [a for a in after or [] if a.strip().lower() == "none"]
        changes["after"] = [] if none else job_ids(after, "--after")
        changes["after_ok"] = job_ids(after_ok, "--after-ok")
    if node is not None:
        changes["node"] = "" if node.strip().lower() == "any" else node
    if not changes:
        raise InputError("nothing to change: give --time-limit, --gpus, --queue, --after, --after-ok or --node")
    with client() as c:
        j = c.update(number, changes)
    said = []
    if "time_limit" in changes:
        said.append(f"time limit {duration(j['time_limit_seconds'])}")
    if "gpus" in changes:
        said.append(f"{j['gpus']} GPU{'s' if j['gpus'] != 1 else ''}")
    if "queue" in changes:
        said.append(f"queue {j['queue']}")
    if "after" in changes:
        deps = [*(str(d) for d in j["after"]), *(f"{d} (ok)" for d in j["after_ok"])]
        said.append("after " + (", ".join(deps) if deps else "nothing"))
    if "node" in changes:
        said.append(f"node {j['node'] or 'any'}")
    console.print(f"job {j['id']}: {'; '.join(said)}", highlight=False)
