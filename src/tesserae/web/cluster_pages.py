"""Cluster, Queue and Usage pages.

- Cluster: every node a row, every GPU a cell coloured by the job on it, with its user and
  progress; a GPU two jobs share (packing) shows both; GPUs of a draining or dead node are marked.
  Below, GPUs in use and jobs waiting over time (``/v1/cluster/history``, drawn by ``charts.js``,
  the code the simulator's report draws its timeline with).
- Queue: the waiting jobs in the policy's order at the latest decision, with their Tiresias
  queue, QUEUE_PAGE a page (one ``GET /v1/queue`` page each); a pending reason, a tenant queue or
  a predicted start appear as columns when the API's entries carry them (``pending_reason``,
  ``tenant_queue``, ``predicted_start``). Its live poll gets a 304 while its ETag holds.
- Usage: GPU-hours per user per time bin and utilisation, drawn by ``ui.js`` with uPlot.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from tesserae.runtime.api.jobs import MAX_PAGE
from tesserae.web.dashboard import ApiError, Dashboard, api_detail
from tesserae.web.session import Visitor

#: Usage windows offered on the page: label -> seconds.
WINDOWS = {"1 h": 3600, "6 h": 6 * 3600, "24 h": 86400, "7 d": 7 * 86400, "30 d": 30 * 86400}
#: Fields of a job view that later API versions add, shown on the queue page when present.
OPTIONAL_QUEUE_FIELDS = (("queue", "tenant queue"), ("pending_reason", "pending reason"),
                         ("predicted_start", "predicted start"))
#: Jobs on one page of the queue; pages beyond MAX_PAGES are not offered.
QUEUE_PAGE, MAX_PAGES = 50, 100_000
#: The queue page's ETag also changes this often: the waits it shows grow.
ETAG_SECONDS = 30


def grid(cluster: dict[str, Any], nodes: list[dict[str, Any]],
         progress: dict[int, float] | None = None) -> list[dict[str, Any]]:
    """Nodes with one cell per GPU: its jobs (two when packed) with their progress (a fraction, where
    the visitor may see the job and its total is known), whether it is shared, whether its node is
    down (``draining``/``dead``) or drained by an admin (the node's state is then ``drained``). GPUs
    no node claims are listed under a last row."""
    progress = progress or {}
    gpus = {int(g["id"]): {**g, "jobs": [{**j, "progress": progress.get(int(j["job"]))} for j in g.get("jobs", [])]}
            for g in cluster["gpus"]}
    rows, seen = [], set()
    for n in nodes:
        cells = []
        state = "drained" if n.get("drained") and n["state"] == "alive" else n["state"]  # by an admin
        for gid in n["gpus"]:
            seen.add(gid)
            g = gpus.get(gid, {"id": gid, "device": "?", "type": n.get("gpu_type", "?"), "jobs": []})
            unhealthy = state == "alive" and str(gid) in (n.get("unhealthy") or {})
            cells.append(_cell(g, "unhealthy" if unhealthy else state))
        rows.append({**n, "state": state, "cells": cells, "used": sum(1 for c in cells if c["jobs"])})
    rest = [_cell(g, "alive") for i, g in sorted(gpus.items()) if i not in seen]
    if rest:
        rows.append({"id": "?", "name": "GPUs of no listed node", "ip": "", "gpu_type": "", "gpus": [],
                     "state": "alive", "cells": rest, "used": sum(1 for c in rest if c["jobs"])})
    return rows


def job_progress(jobs: list[dict[str, Any]]) -> dict[int, float]:
    """The fraction done of each job whose total iterations are known, in [0, 1]."""
    out = {}
    for j in jobs:
        total = j.get("iterations_total")
        if total:
            out[int(j["id"])] = min(1.0, max(0.0, float(j.get("iterations_done") or 0.0) / float(total)))
    return out


def _cell(g: dict[str, Any], state: str) -> dict[str, Any]:
    jobs = list(g.get("jobs", []))
    for j in jobs:
        j["partners"] = [o["job"] for o in jobs if o["job"] != j["job"]]
    return {"id": int(g["id"]), "device": g.get("device"), "type": g.get("type"), "name": g.get("name"),
            "jobs": jobs, "shared": len(jobs) > 1, "state": state, "down": state != "alive"}


def running_jobs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One legend entry per job on the grid: its GPUs and the jobs it shares them with."""
    out: dict[int, dict[str, Any]] = {}
    for n in rows:
        for c in n["cells"]:
            for j in c["jobs"]:
                e = out.setdefault(j["job"], {"job": j["job"], "user": j["user"], "name": j.get("name"),
                                              "phase": j.get("phase"), "gpus": [], "partners": set(),
                                              "nodes": set(), "on_down_node": False})
                e["gpus"].append(c["id"])
                e["partners"].update(j["partners"])
                e["nodes"].add(n["name"])
                e["on_down_node"] |= c["down"] and c["state"] != "drained"
                e["on_drained_node"] = e.get("on_drained_node", False) or c["state"] == "drained"
    return [{**e, "partners": sorted(e["partners"]), "nodes": sorted(e["nodes"])} for _, e in sorted(out.items())]


def _views(entries: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The optional fields ``GET /v1/queue`` gives each entry, under the names of a job view."""
    names = {"tenant_queue": "queue", "pending_reason": "pending_reason", "predicted_start": "predicted_start"}
    return {int(q["id"]): {name: q[key] for key, name in names.items() if key in q} for q in entries}


def _page_number(text: str | None) -> int:
    """The page asked for (1 when absent or not a number from 1 to MAX_PAGES)."""
    return int(text) if text is not None and text.isdigit() and 1 <= int(text) <= MAX_PAGES else 1


def queue_rows(queue: dict[str, Any], views: dict[int, dict[str, Any]], now: float, first: int = 1
               ) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The queue's entries with the visible job views' extra fields; the optional columns present.
    ``first``: the position of the page's first entry."""
    rows = []
    for pos, q in enumerate(queue["jobs"], first):
        view = views.get(q["id"], {})
        rows.append({**q, "position": pos, "waited": now - q["submit_time"], "held": bool(view.get("held")),
                     "extra": {k: view.get(k) for k, _ in OPTIONAL_QUEUE_FIELDS}})
    present = [(k, label) for k, label in OPTIONAL_QUEUE_FIELDS if any(k in views.get(r["id"], {}) for r in rows)]
    return rows, present


def register(dash: Dashboard) -> None:
    app, api = dash.app, dash.api

    async def cluster_data(v: Visitor) -> dict[str, Any]:
        cluster = await api.json(v.session.token, "/v1/cluster")
        nodes = (await api.json(v.session.token, "/v1/nodes"))["nodes"]
        running = (await api.json(v.session.token, "/v1/jobs", state="running", limit=MAX_PAGE))["jobs"]
        rows = grid(cluster, nodes, job_progress(running))
        return {"cluster": cluster, "nodes": rows, "running": running_jobs(rows), "now": time.time(),
                "title": "Cluster"}

    def history_of(request: Request) -> tuple[str, int]:
        label = request.query_params.get("history", "") or request.query_params.get("window", "6 h")
        return (label, WINDOWS[label]) if label in WINDOWS else ("6 h", WINDOWS["6 h"])

    @app.get("/ui/cluster", include_in_schema=False)
    async def cluster_page(request: Request) -> Response:
        label, _ = history_of(request)

        async def load(v: Visitor) -> dict[str, Any]:
            return {**await cluster_data(v), "history_window": label, "history_windows": list(WINDOWS)}

        return await dash.page(request, "cluster.html", "cluster", load)

    @app.get("/ui/cluster/history", include_in_schema=False)
    async def cluster_history(request: Request) -> Response:
        return await dash.relay(request, "/v1/cluster/history", window=history_of(request)[1], points=600)

    async def queue_data(v: Visitor, page: int) -> dict[str, Any]:
        r = await api.call("GET", v.session.token, "/v1/queue", limit=QUEUE_PAGE, offset=(page - 1) * QUEUE_PAGE)
        if r.status_code != 200:
            raise ApiError(r.status_code, api_detail(r))
        queue = r.json()
        now = time.time()
        rows, extra = queue_rows(queue, _views(queue["jobs"]), now, first=(page - 1) * QUEUE_PAGE + 1)
        pages = max(1, -(-int(queue["total"]) // QUEUE_PAGE))
        return {"queue": queue, "rows": rows, "extra_columns": extra, "now": now, "title": "Queue",
                "page_number": page, "pages": pages, "api_etag": r.headers.get("etag", "")}

    @app.get("/ui/queue", include_in_schema=False)
    async def queue_page(request: Request) -> Response:
        """The queue, QUEUE_PAGE jobs a page (``?page=N``). Its ETag changes with each decision and each
        change to the jobs (the API's, ``GET /v1/queue``), and every ETAG_SECONDS (the waits it shows
        grow): a poll that sends it back in If-None-Match gets a 304 and nothing is rendered again."""
        page = _page_number(request.query_params.get("page"))
        seen: dict[str, str] = {}

        async def load(v: Visitor) -> dict[str, Any]:
            data = await queue_data(v, page)
            seen["etag"] = data["api_etag"]
            return data

        response = await dash.page(request, "queue.html", "queue", load)
        if response.status_code != 200 or not seen.get("etag"):
            return response
        live = request.query_params.get("live") == "1"
        basis = f"{seen['etag']}|{int(live)}|{int(time.time() // ETAG_SECONDS)}"
        etag = f'W/"{hashlib.sha256(basis.encode()).hexdigest()[:20]}"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"ETag": etag, "Cache-Control": "no-cache"})
        response.headers["ETag"] = etag
        return response

    def window_of(request: Request) -> tuple[str, int]:
        label = request.query_params.get("window", "24 h")
        return (label, WINDOWS[label]) if label in WINDOWS else ("24 h", WINDOWS["24 h"])

    @app.get("/ui/usage", include_in_schema=False)
    async def usage_page(request: Request) -> Response:
        label, seconds = window_of(request)

        async def load(v: Visitor) -> dict[str, Any]:
            usage = await api.json(v.session.token, "/v1/usage", window=seconds, bins=48)
            totals = sorted(usage["gpu_hours_total"].items(), key=lambda kv: -kv[1])
            return {"usage": usage, "totals": totals, "windows": list(WINDOWS), "window": label,
                    "mean_util": usage["utilization_mean"], "title": "Usage"}

        return await dash.page(request, "usage.html", "usage", load)

    @app.get("/ui/usage/data", include_in_schema=False)
    async def usage_data(request: Request) -> Response:
        return await dash.relay(request, "/v1/usage", window=window_of(request)[1], bins=48)
