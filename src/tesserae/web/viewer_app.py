"""The results viewer's web app (``tesserae view``): the report page and the drill-down API."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

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
