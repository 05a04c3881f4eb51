"""Jobs list (filter and sort by user, state, time) and the job page: its runs on a timeline
(start, preempt, migrate, resume, with GPUs), progress, restarts, events, a live log tail, and
cancel (and hold/release where the API offers them) buttons.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from tesserae.runtime.api.jobs import JobId
from tesserae.runtime.commands.learned_view import rate_text, source_text, spread_text
from tesserae.runtime.job.files import MAX_INT
from tesserae.runtime.store.database import FINAL_STATES, JOB_STATES
from tesserae.web.dashboard import ApiError, Dashboard
from tesserae.web.session import Visitor, csrf_ok, read_form

#: The log tail a page opens with, and the most one poll brings back.
TAIL_BYTES = 64 * 1024
POLL_BYTES = 256 * 1024
#: Most rows the jobs list shows, out of the LIST_LIMIT most recent jobs it filters.
MAX_ROWS = 500
LIST_LIMIT = 10_000
SINCE = {"1 h": 3600, "24 h": 86400, "7 d": 7 * 86400, "30 d": 30 * 86400}
SORTS = {
    "id": lambda j: j["id"],
    "submitted": lambda j: j["submit_time"],
    "state": lambda j: (j["state"], j["id"]),
    "user": lambda j: (j["user"], j["id"]),
    "gpus": lambda j: (j["gpus"], j["id"]),
    "name": lambda j: (j["name"].lower(), j["id"]),
    "waited": lambda j: (j["waited_seconds"], j["id"]),
    "ran": lambda j: (j["executed_seconds"], j["id"]),
}
OUTCOME_TEXT = {"preempted": "preempted", "migrated": "migrated", "completed": "completed", "failed": "failed",
                "cancelled": "cancelled", "lost": "lost (requeued)", "requeued": "requeued",
                "not-started": "never started"}


def filter_jobs(jobs: list[dict[str, Any]], params: dict[str, str], now: float) -> tuple[list[dict[str, Any]],
                                                                                        dict[str, str]]:
    """Jobs matching the query (user, state, since, name contains) in the asked order, and the
    normalised query (unknown values fall back to the defaults)."""
    q = {"user": params.get("user", ""), "state": params.get("state", ""), "since": params.get("since", ""),
         "q": params.get("q", "")[:200], "sort": params.get("sort", "id"), "order": params.get("order", "desc")}
    if q["state"] not in (*JOB_STATES, "active", ""):
        q["state"] = ""
    if q["since"] not in SINCE:
        q["since"] = ""
    if q["sort"] not in SORTS:
        q["sort"] = "id"
    if q["order"] not in ("asc", "desc"):
        q["order"] = "desc"
    out = jobs
    if q["user"]:
        out = [j for j in out if j["user"] == q["user"]]
    if q["state"] == "active":
        out = [j for j in out if j["state"] not in FINAL_STATES]
    elif q["state"]:
        out = [j for j in out if j["state"] == q["state"]]
    if q["since"]:
        out = [j for j in out if j["submit_time"] >= now - SINCE[q["since"]]]
    if q["q"]:
        needle = q["q"].lower()
        out = [j for j in out if needle in j["name"].lower()]
    out = sorted(out, key=SORTS[q["sort"]], reverse=q["order"] == "desc")
    return out, q


def run_timeline(job: dict[str, Any], runs: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """Runs as bars on [submit, finish or now] (percent offsets), each labelled with how it began
    (start, resume, or migrate: the previous run ended migrating) and ended, and numbered 1, 2, 3 in
    the job's own order (``number``; ``run`` stays the server-wide id the logs API takes)."""
    t0 = job["submit_time"]
    t1 = job["finish_time"] or now
    span = max(t1 - t0, 1e-9)
    bars, previous, started = [], None, 0
    for number, r in enumerate(sorted(runs, key=lambda r: (r["start_time"], r["run"])), 1):
        end = r["end_time"] if r["end_time"] is not None else now
        ran = r["outcome"] != "not-started"
        began = "migrate" if previous == "migrated" else ("resume" if started else "start")
        if ran:
            started += 1
        bars.append({**r, "number": number, "began": began if ran else "-",
                     "ended": OUTCOME_TEXT.get(r["outcome"] or "", "running"),
                     "left": 100.0 * (r["start_time"] - t0) / span,
                     "width": max(0.4, 100.0 * (end - r["start_time"]) / span),
                     "seconds": end - r["start_time"], "open": r["end_time"] is None})
        previous = r["outcome"]
    return {"bars": bars, "start": t0, "end": t1, "runs_started": started, "restarts": max(0, started - 1)}


def learned_rows(learned: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job's learned rates as the page shows them (``--throughputs learned``; None otherwise)."""
    if not learned:
        return None
    types = [{"gpu_type": g, "rate": rate_text(e.get("rate")), "confidence": spread_text(e.get("sd")),
              "observations": e.get("observations", 0), "source": source_text(e), "measured": bool(e.get("measured"))}
             for g, e in sorted((learned.get("gpu_types") or {}).items())]
    partners = [{"job": p.get("partner"), "gpu_type": p.get("gpu_type"), "observations": p.get("observations", 0),
                 "factor": "-" if p.get("factor") is None else f"{p['factor']:.2f}"}
                for p in learned.get("partners") or []]
    return {"types": types, "partners": partners, "hint": learned.get("declared_type"),
            "explored": learned.get("explored_gpu_seconds") or 0.0}


def event_text(e: dict[str, Any]) -> str:
    d = e.get("detail")
    if isinstance(d, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(d.items()))
    return str(d or "")


def register(dash: Dashboard) -> None:
    app, api = dash.app, dash.api

    @app.get("/ui/jobs", include_in_schema=False)
    async def jobs_page(request: Request) -> Response:
        async def load(v: Visitor) -> dict[str, Any]:
            state = request.query_params.get("state", "")
            extra = {"state": state} if state in JOB_STATES else {}
            data = await api.json(v.session.token, "/v1/jobs", limit=LIST_LIMIT, **extra)
            now = time.time()
            jobs, q = filter_jobs(data["jobs"], dict(request.query_params), now)
            users = sorted({j["user"] for j in data["jobs"]})
            return {"jobs": jobs[:MAX_ROWS], "matched": len(jobs), "total": len(data["jobs"]), "q": q,
                    "users": users, "states": ["active", *JOB_STATES], "since": list(SINCE), "sorts": list(SORTS),
                    "now": now, "title": "Jobs", "max_rows": MAX_ROWS, "list_limit": LIST_LIMIT}

        return await dash.page(request, "jobs.html", "jobs", load)

    @app.get("/ui/jobs/{job_id}", include_in_schema=False)
    async def job_page(request: Request, job_id: str) -> Response:
        if not job_id.isdigit() or len(job_id) > 18:
            v = dash.visitor(request)
            return dash.error(v, 404, f"There is no job '{job_id}': job ids are numbers.")

        async def load(v: Visitor) -> dict[str, Any]:
            job = await api.json(v.session.token, f"/v1/jobs/{job_id}")
            runs = (await api.json(v.session.token, f"/v1/jobs/{job_id}/runs"))["runs"]
            now = time.time()
            state = job["state"]
            actions = {"cancel": state not in FINAL_STATES and not job["cancel_requested"],
                       "hold": dash.has_route("/v1/jobs/{job_id}/hold") and state in ("queued", "preempted")
                       and not job.get("held"),
                       "release": dash.has_route("/v1/jobs/{job_id}/release") and bool(job.get("held"))
                       and state in ("queued", "preempted")}
            events = [{**e, "text": event_text(e)} for e in job.get("events", [])]
            return {"job": job, "timeline": run_timeline(job, runs, now), "events": events, "now": now,
                    "actions": actions, "title": f"Job {job['id']}", "learned": learned_rows(job.get("learned"))}

        return await dash.page(request, "job.html", "jobs", load)

    @app.get("/ui/jobs/{job_id}/log", include_in_schema=False)
    async def job_log(request: Request, job_id: JobId,
                      offset: Annotated[int, Query(ge=-1, le=MAX_INT)] = -1) -> Response:
        """Bytes of the job's log from ``offset`` (-1: the last TAIL_BYTES), as JSON text."""
        v = dash.visitor(request)
        if v is None:
            return JSONResponse({"detail": "log in first"}, status_code=401)
        try:
            await api.json(v.session.token, f"/v1/jobs/{job_id}")
        except ApiError as e:
            return JSONResponse({"detail": e.detail}, status_code=e.status)
        start, cut = offset, False
        if offset < 0:
            try:
                size = dash.controller.log_path(job_id).stat().st_size
            except OSError:
                size = 0
            start = max(0, size - TAIL_BYTES)
            cut = start > 0
        r = await api.call("GET", v.session.token, f"/v1/jobs/{job_id}/logs", offset=start, limit=POLL_BYTES)
        if r.status_code != 200:
            return JSONResponse({"detail": r.text[:500]}, status_code=r.status_code)
        data = r.content
        if cut:  # began mid-file: drop the partial first line
            nl = data.find(b"\n")
            data = data[nl + 1:] if nl >= 0 else data
        # A multi-byte character cut at the end is held back for the next poll.
        keep = len(data)
        for back in range(1, 4):
            if keep - back >= 0 and (data[keep - back] & 0xC0) == 0xC0:
                needed = 2 if data[keep - back] < 0xE0 else 3 if data[keep - back] < 0xF0 else 4
                if back < needed:
                    keep -= back
                break
        nxt = int(r.headers.get("X-Next-Offset", start + len(r.content))) - (len(data) - keep)
        return JSONResponse({"text": data[:keep].decode("utf-8", errors="replace"), "next": nxt,
                             "state": r.headers.get("X-Job-State"), "truncated": cut})

    async def act(request: Request, job_id: int, action: str) -> Response:
        v = dash.visitor(request)
        if v is None:
            return dash.to_login(request)
        form = await read_form(request)
        if not csrf_ok(v, form):
            return dash.error(v, 403, "This form has expired (no valid CSRF token): reload the page and try again.")
        if action != "cancel" and not dash.has_route(f"/v1/jobs/{{job_id}}/{action}"):
            return dash.error(v, 404, f"This server does not support {action}.")
        r = await api.call("POST", v.session.token, f"/v1/jobs/{job_id}/{action}")
        if r.status_code in (403, 404):
            return dash.error(v, r.status_code, r.json().get("detail", r.text))
        if r.status_code == 200:
            state = r.json().get("state", "?")
            done = {"cancel": "cancellation requested", "hold": "held", "release": "released"}[action]
            v.session.flash.append(f"Job {job_id}: {done}; it is now {state}.")
        else:
            v.session.flash.append(f"Job {job_id}: {action} refused: {r.json().get('detail', r.text)}")
        return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303)

    for _action in ("cancel", "hold", "release"):
        def make(action: str) -> Any:
            async def handler(request: Request, job_id: JobId) -> Response:
                return await act(request, job_id, action)
            return handler

        app.add_api_route(f"/ui/jobs/{{job_id}}/{_action}", make(_action), methods=["POST"], include_in_schema=False)
