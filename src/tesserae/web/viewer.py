"""``tesserae view DIR``: a ``simulate`` or ``compare`` output folder as a page on 127.0.0.1.

The page is the report (side-by-side table with ratios, interactive JCT CDF and timeline plots);
the drill-down asks ``/api/explain?run=KEY&job=ID``, answered from the folder's ``jobs.csv`` and
``timeline.csv``, for any job. The folder is read once at start-up; a bad file is a one-line error
(exit 2) before the server starts.
"""

from __future__ import annotations

import contextlib
import sys
import webbrowser
from pathlib import Path
from typing import Annotated

import typer
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

from tesserae.core.errors import InputError
from tesserae.web.report import render
from tesserae.web.results import explain, find_runs

MAX_JOB_ID = 10**15


def viewer_app(folder: Path) -> FastAPI:
    _kind, runs = find_runs(folder)
    page = render(folder, embed=False)
    by_key = {r.key: r for r in runs}
    app = FastAPI(title="Tesserae results viewer", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    @app.get("/api/explain")
    def why(run: str, job: str) -> JSONResponse:
        r = by_key.get(run)
        if r is None:
            return JSONResponse({"detail": f"no run '{run[:100]}' in this folder"}, status_code=404)
        if not job.isdigit() or int(job) > MAX_JOB_ID:
            return JSONResponse({"detail": "a job id is a whole number"}, status_code=422)
        try:
            return JSONResponse(explain(runs, r, int(job)))
        except KeyError:
            return JSONResponse({"detail": f"job {job} is not in run {r.label}"}, status_code=404)

    return app


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
        import uvicorn

        from tesserae.runtime.server import _bind

        if not 0 <= port <= 65535:
            raise InputError(f"port {port} is not between 0 and 65535", field="port")
        app_ = viewer_app(folder)
        sock = _bind("127.0.0.1", port)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        print(f"tesserae view: {folder} at {url} (Ctrl-C stops)", file=sys.stderr, flush=True)
        if open_browser:
            webbrowser.open(url)
        server = uvicorn.Server(uvicorn.Config(app_, log_level="warning", access_log=False, lifespan="off"))
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[sock])
