"""``tesserae hold``, ``release`` and ``resubmit``: keep a waiting job from starting, let it go again, or
submit an ended job's spec anew (``runtime.controller.lifecycle``)."""

from __future__ import annotations

from typing import Annotated

import typer

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.runtime.commands.common import client, console, parse_job_id

JobIds = Annotated[list[str], typer.Argument(metavar="ID...", help="Job ids.")]


def register(app: typer.Typer) -> None:
    for command in (hold, release, resubmit):
        app.command(cls=OneLineErrors)(command)


def _each(job_ids: list[str], action: str) -> list[dict]:
    ids = [parse_job_id(j) for j in job_ids]
    with client() as c:
        return [c.job_action(j, action) for j in ids]


def hold(job_ids: JobIds) -> None:
    """Hold waiting jobs: they are not scheduled until released."""
    for j in _each(job_ids, "hold"):
        console.print(f"job {j['id']}: held", highlight=False)


def release(job_ids: JobIds) -> None:
    """Release held jobs: they wait for the scheduler again."""
    for j in _each(job_ids, "release"):
        console.print(f"job {j['id']}: released", highlight=False)


def resubmit(job_ids: JobIds) -> None:
    """Submit ended jobs again with the same command, resources and controls; prints each new id."""
    for j in _each(job_ids, "resubmit"):
        print(j["id"])
