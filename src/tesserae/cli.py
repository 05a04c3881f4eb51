"""The ``tesserae`` command: simulate, compare, trace tools, the runtime's commands, the profiler.

Each command group lives in a module of its own, whose ``register(app)`` adds its commands; ``COMMANDS``
names that module for every command, and the module is imported only when its command is asked for
(``tesserae simulate`` loads neither the runtime's commands nor the profiler's nor the viewer's, and
Typer builds the options of that one command, not of all of them). ``tesserae --help`` lists them
all, so it loads every module. User mistakes surface as one line on stderr and exit code 2, never
as a traceback.
"""

from __future__ import annotations

import gc
import importlib
import sys
from functools import cache
from typing import Any

import typer
from rich.markup import escape

from tesserae.cli_help import TesseraeGroup, VersionOpt
from tesserae.cli_render import err
from tesserae.core.errors import InputError
from tesserae.extras import from_import_error
from tesserae.heap import keep_freed_memory

#: Every command of ``tesserae`` (the order of ``--help``) and the module whose ``register`` adds it.
COMMANDS = {
    "simulate": "tesserae.cli_sim", "compare": "tesserae.cli_sim", "plugins": "tesserae.cli_plugins",
    "server": "tesserae.runtime.commands.server", "submit": "tesserae.runtime.commands.submit",
    "batch": "tesserae.runtime.commands.batch", "jobs": "tesserae.runtime.commands.jobs",
    "show": "tesserae.runtime.commands.jobs", "cancel": "tesserae.runtime.commands.control",
    "hold": "tesserae.runtime.commands.control", "release": "tesserae.runtime.commands.control",
    "update": "tesserae.runtime.commands.control", "resubmit": "tesserae.runtime.commands.lifecycle",
    "logs": "tesserae.runtime.commands.logs", "cluster": "tesserae.runtime.commands.cluster",
    "usage": "tesserae.runtime.commands.accounting", "what-if": "tesserae.runtime.commands.what_if",
    "profile": "tesserae.profiler.cli_command", "view": "tesserae.web.viewer", "trace": "tesserae.cli_trace",
    "token": "tesserae.runtime.commands.token", "node": "tesserae.runtime.commands.node",
    "queue": "tesserae.runtime.commands.queue",
}


def _dashboard(server_app: Any, controller: Any, info: dict[str, Any]) -> None:
    """The web dashboard (``tesserae.web``) at ``/ui`` of ``tesserae server``'s app: composed here, above
    both the runtime and the web front end (imported when a server starts, not by every command)."""
    from tesserae.web.ui import mount_web

    mount_web(server_app, controller, info)


def _typer_app(cls: type[TesseraeGroup] = TesseraeGroup, **settings: Any) -> typer.Typer:
    # Click's plain help layout (see tesserae.cli_help), as wide as the terminal up to 120 columns.
    return typer.Typer(cls=cls, pretty_exceptions_enable=False, rich_markup_mode=None,
                       context_settings={"max_content_width": 120}, **settings)


@cache
def module_commands(module: str) -> dict[str, Any]:
    """The click commands that ``module``'s ``register`` adds (by name), built on a Typer app of their own."""
    scratch = _typer_app()
    register = importlib.import_module(module).register
    if module == "tesserae.runtime.commands.server":
        register(scratch, (_dashboard,))  # tesserae server mounts the dashboard
    else:
        register(scratch)
    return dict(typer.main.get_group(scratch).commands)


class LazyGroup(TesseraeGroup):
    """The root group: its commands are ``COMMANDS``, each built when it is first looked up."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        module = COMMANDS.get(cmd_name)
        return None if module is None else module_commands(module).get(cmd_name)


app = _typer_app(LazyGroup, no_args_is_help=True)


@app.callback()
def _root(version: VersionOpt = False) -> None:
    """Tesserae: GPU cluster scheduling for deep-learning jobs (simulator and runtime)."""
    global _STARTING
    if _STARTING:  # the command is built and about to run: collect again, past what start-up made
        _STARTING = False
        gc.freeze()
        gc.enable()


#: True while ``main`` holds the cyclic garbage collector off for the start-up (see ``main``).
_STARTING = False


def main() -> None:
    # Start-up allocates some hundred thousand objects that live as long as the process (modules,
    # classes, Typer's and pydantic's models), and the cyclic collector would scan them again and
    # again as the heap grows: it is off until the command's own work starts (``_root``), and then
    # those objects are frozen (never scanned). The collector is left as it was found on return
    # (tests call ``main`` in their own process).
    global _STARTING
    keep_freed_memory()
    collecting = _STARTING = gc.isenabled()
    gc.disable()
    try:
        app(prog_name="tesserae")
    except InputError as e:
        _fail(e)
    except ModuleNotFoundError as e:  # an optional dependency (tesserae.extras): one line naming its extra
        missing = from_import_error(e)
        if missing is None:
            raise
        _fail(missing)
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
        err.print(f"[red]error:[/red] {escape(f'{e.strerror}: {e.filename}')}", highlight=False, soft_wrap=True)
        sys.exit(2)
    finally:
        _STARTING = False
        gc.unfreeze()
        if collecting:
            gc.enable()


def _fail(e: InputError) -> None:
    err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
