"""``tesserae resubmit``: submit an ended job's spec anew (``runtime.controller.lifecycle``; ``hold`` and
``release`` are ``control``'s)."""

from __future__ import annotations

from typing import Annotated

import typer

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.runtime.commands.common import client, parse_job_id

JobIds = Annotated[list[str], typer.Argument(metavar="ID...", help="Job ids.")]


def register(app: typer.Typer) -> None:
    for command in (resubmit,):
        app.command(cls=OneLineErrors)(command)


def _each(job_ids: list[str], action: str) -> list[dict]:
    ids = [parse_job_id(j) for j in job_ids]
    with client() as c:
        return [c.job_action(j, action) for j in ids]


def resubmit(job_ids: JobIds) -> None:
    """Submit ended jobs again with the same command, resources and controls; prints each new id."""
    for j in _each(job_ids, "resubmit"):
        print(j["id"])
