"""``tesserae view DIR``: a ``simulate`` or ``compare`` output folder as a page on 127.0.0.1.

The page is the report (side-by-side table with ratios, interactive JCT CDF and timeline plots);
the drill-down asks ``/api/explain?run=KEY&job=ID``, answered from the folder's ``jobs.csv`` and
``timeline.csv``, for any job. The folder is read once at start-up; a bad file is a one-line error
(exit 2) before the server starts. The app itself is in ``viewer_app`` (FastAPI is imported only
when ``view`` runs, not by every ``tesserae`` command).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated

import typer

from tesserae.core.errors import InputError


def register(app: typer.Typer) -> None:
    """Add ``view`` to ``app``."""

    from tesserae.cli_help import TesseraeCommand

    @app.command("view", cls=TesseraeCommand)
    def view_cmd(
        folder: Annotated[Path, typer.Argument(help="An output folder of simulate or compare (--out).")],
        port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free port).")] = 8780,
        open_browser: Annotated[bool, typer.Option("--open/--no-open", help="Open the page in a browser.")] = False,
    ) -> None:
        """Serve a results folder on 127.0.0.1: side-by-side table, interactive plots, "why did job N wait?"."""
        from tesserae.extras import require

        require("server", "tesserae view")
        import uvicorn

        from tesserae.runtime.server import _bind
        from tesserae.web.viewer_app import viewer_app  # FastAPI: imported only when a folder is served

        if not 0 <= port <= 65535:
            raise InputError(f"port {port} is not between 0 and 65535", field="port")
        app_ = viewer_app(folder)
        sock = _bind("127.0.0.1", port)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        print(f"tesserae view: {folder} at {url} (Ctrl-C stops)", file=sys.stderr, flush=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        server = uvicorn.Server(uvicorn.Config(app_, log_level="warning", access_log=False, lifespan="off"))
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[sock])
