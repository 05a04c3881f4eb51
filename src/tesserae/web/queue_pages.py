"""The Queues page (``/ui/queues``): each tenant queue's guarantee against what it uses and borrows
now, and how well it got its guarantee since the server started, with Jain's index over the leaf
queues (the simulator's fairness measure, ``sim.metrics``, on the live counters of ``/v1/queues``).

``satisfaction`` of a queue is the GPU-time it received up to its entitlement over its entitlement
(at each decision: min(guarantee, the GPUs its jobs ask for)); 1 means it always had its guarantee
whenever it had the demand. Jain's index over the leaves' satisfaction is 1 when all were served
alike and 1/n when one queue got everything.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import Response

from tesserae.sim.metrics import jain_index
from tesserae.web.dashboard import Dashboard
from tesserae.web.session import Visitor


def queue_table(queues: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float | None]:
    """The rows of the page (depth for indenting, satisfaction, share of the GPU-time used) and
    Jain's index over the leaf queues' satisfaction (None before any queue was entitled to GPUs)."""
    total = sum(float(q.get("gpu_seconds") or 0.0) for q in queues if q.get("leaf"))
    rows = []
    for q in queues:
        entitled, met = float(q.get("entitled_gpu_seconds") or 0.0), float(q.get("met_gpu_seconds") or 0.0)
        used = float(q.get("gpu_seconds") or 0.0)
        rows.append({**q, "depth": q["path"].count("/"),
                     "satisfaction": met / entitled if entitled > 0 else None,
                     "share": used / total if total > 0 else None})
    leaves = [r["satisfaction"] for r in rows if r.get("leaf") and r["satisfaction"] is not None]
    return rows, jain_index(np.array(leaves)) if leaves else None


def register(dash: Dashboard) -> None:
    async def load(v: Visitor) -> dict[str, Any]:
        data = await dash.api.json(v.session.token, "/v1/queues")
        rows, jain = queue_table(data["queues"])
        return {"queues": rows, "jain": jain, "default_queue": data.get("default_queue"),
                "source": data.get("source"), "title": "Queues"}

    @dash.app.get("/ui/queues", include_in_schema=False)
    async def queues_page(request: Request) -> Response:
        return await dash.page(request, "queues.html", "queues", load)
