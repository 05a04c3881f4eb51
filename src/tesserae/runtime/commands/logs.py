"""``tesserae logs``: a job's output (every run's, every rank's), once or following it until the job ends.

Every rank of a run on one machine writes the job's log; a run over several Ray nodes writes its
first node's ranks there and each other node's in its own log (``--node K``).

A job that has not started has no output yet: instead of printing nothing, ``logs`` says so and
why it waits (its pending reason), and exits with status 1 unless it follows the job.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.core.errors import InputError
from tesserae.runtime.commands.common import FINAL_STATES, client, err, parse_job_id


def register(app: typer.Typer) -> None:
    app.command(cls=OneLineErrors)(logs)


def not_started(job: dict[str, Any]) -> str:
    """What to say about a job with no output yet."""
    if job["state"] in FINAL_STATES:
        return f"job {job['id']} is {job['state']} and never ran" + (f": {job['reason']}" if job["reason"] else "")
    position = f"#{job['queue_position']} in the queue, " if job.get("queue_position") else ""
    return (f"job {job['id']} has not started yet ({job['state']}, {position}"
            f"{job.get('pending_reason') or 'waiting for the next decision'})")


def logs(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    tail: Annotated[int | None, typer.Option("--tail", "-n", metavar="N", min=1, max=100000,
                                             help="Only the last N lines (then follow from there with -f).")
                    ] = None,
    node: Annotated[int | None, typer.Option("--node", metavar="K", min=1, max=4096, help="A run over several "
                                             "nodes (Ray): the ranks on its node K (the job's log holds node 0 "
                                             "and names each run's nodes).")] = None,
    run: Annotated[int | None, typer.Option("--run", metavar="RUN", min=1, help="With --node: which run "
                                            "(default: the latest).")] = None,
) -> None:
    """Print a job's output: every run, every rank of one node (--node K for another node of a run)."""
    jid = parse_job_id(job_id)
    if run is not None and node is None:
        raise InputError("--run goes with --node (the job's log already holds every run)", field="--run")
    out = sys.stdout.buffer
    where = {"node": node, "run": run}
    with client() as c:
        try:
            data, offset, state = c.logs(jid, 0, tail, **where)
            if not data and offset == 0 and node is None:
                job = c.show(jid)
                if job["first_start_time"] is None:
                    err.print(not_started(job), highlight=False, markup=False, soft_wrap=True)
                    if not follow or state in FINAL_STATES:
                        raise typer.Exit(1)
            while True:
                if data:
                    out.write(data)
                    out.flush()
                if not follow or (not data and state in FINAL_STATES):
                    break
                if not data:
                    time.sleep(0.5)
                data, offset, state = c.logs(jid, offset, **where)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
