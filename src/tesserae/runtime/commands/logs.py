"""``tesserae logs``: a job's output (every run's), once or following it until the job ends."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.runtime.commands.common import FINAL_STATES, client, parse_job_id


def register(app: typer.Typer) -> None:
    app.command(cls=OneLineErrors)(logs)


def logs(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
) -> None:
    """Print a job's output (all its runs)."""
    jid = parse_job_id(job_id)
    out = sys.stdout.buffer
    offset = 0
    with client() as c:
        try:
            while True:
                data, offset, state = c.logs(jid, offset)
                if data:
                    out.write(data)
                    out.flush()
                if not follow or (not data and state in FINAL_STATES):
                    break
                if not data:
                    time.sleep(0.5)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
