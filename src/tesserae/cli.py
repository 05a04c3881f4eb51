"""The ``tesserae`` command: simulate, compare, trace tools, the runtime's commands, the profiler.

Each command group lives in a module of its own and registers itself here. User mistakes surface
as one line on stderr and exit code 2, never as a traceback.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.markup import escape

from tesserae import cli_plugins, cli_sim, cli_trace
from tesserae.cli_help import TesseraeGroup, VersionOpt
from tesserae.cli_render import err
from tesserae.core.errors import InputError
from tesserae.extras import from_import_error
from tesserae.profiler.cli_command import register as register_profile_command
from tesserae.runtime.commands import register as register_runtime_commands
from tesserae.web.viewer import register as register_view_command

# Click's plain help layout (see tesserae.cli_help), as wide as the terminal up to 120 columns.
app = typer.Typer(cls=TesseraeGroup, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"max_content_width": 120})


@app.callback()
def _root(version: VersionOpt = False) -> None:
    """Tesserae: GPU cluster scheduling for deep-learning jobs (simulator and runtime)."""


def _dashboard(server_app: Any, controller: Any, info: dict[str, Any]) -> None:
    """The web dashboard (``tesserae.web``) at ``/ui`` of ``tesserae server``'s app: composed here, above
    both the runtime and the web front end (imported when a server starts, not by every command)."""
    from tesserae.web.ui import mount_web

    mount_web(server_app, controller, info)


cli_sim.register(app)  # simulate, compare
cli_trace.register(app)  # trace info, trace convert
cli_plugins.register(app)  # plugins
register_runtime_commands(app, server_extensions=(_dashboard,))  # server (+ dashboard), token, submit, jobs...
register_profile_command(app)  # profile
register_view_command(app)  # view


def main() -> None:
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


def _fail(e: InputError) -> None:
    err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
    sys.exit(2)


if __name__ == "__main__":
    main()
