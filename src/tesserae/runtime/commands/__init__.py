"""The runtime's commands of ``tesserae``, one module each (``jobs`` holds jobs and show; ``control``
cancel, hold, release and update).

``register(app)`` adds them to the main Typer app (``tesserae.cli`` calls it), in this order:
the ``token`` group, then server, submit, batch, jobs, show, cancel, hold, release, update, resubmit,
logs, cluster, the ``node`` group, usage, the ``queue`` group, what-if. Heavy imports (FastAPI,
uvicorn, the scheduler) happen inside the commands, so the client commands start fast.
A usage mistake (a missing argument, ``--gpus two``) is reported like every other user error: one
line on stderr and exit status 2 (``cli_help.TesseraeCommand``). A new command is a module here
with a ``register(app)``, added to the list below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

from tesserae.runtime.commands import (
    accounting,
    batch,
    cluster,
    control,
    jobs,
    lifecycle,
    logs,
    node,
    queue,
    server,
    submit,
    token,
    what_if,
)

if TYPE_CHECKING:
    from tesserae.runtime.api.app import AppExtension


def register(app: typer.Typer, server_extensions: Sequence[AppExtension] = ()) -> None:
    """Add the runtime commands to ``app``; ``tesserae server`` mounts ``server_extensions`` on its HTTP app
    (``tesserae.cli`` passes the dashboard)."""
    token.register(app)
    server.register(app, server_extensions)
    submit.register(app)
    batch.register(app)
    jobs.register(app)
    control.register(app)
    lifecycle.register(app)
    logs.register(app)
    cluster.register(app)
    node.register(app)
    accounting.register(app)
    queue.register(app)
    what_if.register(app)
