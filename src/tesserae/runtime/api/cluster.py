"""The API's cluster views: GPUs and what runs on each (``/v1/cluster``), nodes (``/v1/nodes``), the
waiting jobs in the policy's order (``/v1/queue``), and usage over time (``/v1/usage``).

Like every route, they need a token (``auth``); a user sees the names of their own jobs only (other
users' jobs appear with their id and user); an admin sees everything. They read the store and the
controller's latest decision, and change nothing. The dashboard's Cluster, Queue and Usage pages
are drawn from them.
"""


import json
import math
import time
from dataclasses import asdict
from typing import Annotated, Any

import numpy as np
from fastapi import FastAPI, Query, Request, Response

from tesserae.runtime.api.budgets import charged
from tesserae.runtime.api.drain import add_drain_routes
from tesserae.runtime.api.history import node_health
from tesserae.runtime.api.limits import MAX_WINDOW
from tesserae.runtime.controller import pending
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.job.files import MAX_INT
from tesserae.runtime.store import allocations, counts
from tesserae.runtime.store import nodes as drained_nodes
from tesserae.scheduling.base import QueueInspect

#: Most time bins one usage query may ask for.
MAX_BINS = 500
#: Most jobs one page of ``GET /v1/queue`` holds.
MAX_QUEUE_PAGE = 10_000
#: Waiting jobs ``GET /v1/cluster`` shows by default (the head of the queue: before, all of them, 30,000
#: entries and seconds of server time on every call of a dashboard or a ``tesserae cluster``).
QUEUE_SHOWN = 100


def node_view(controller: Controller) -> list[dict[str, Any]]:
    """Every node of the scheduler's view, its GPUs (global ids) and its state (``Executor.nodes``).

    A Ray node that left (``dead``) stays in the view until the next decision; one that Ray drains
    is ``draining``. The local executor's machine is one node per GPU type, always ``alive``.
    """
    return [asdict(node) for node in controller.executor.nodes()]


def unavailable_gpus(controller: Controller) -> dict[int, str]:
    """The GPUs of nodes that are not ``alive`` (unreachable, draining, dead) or that an admin drained
    (``drained``), and those a health probe found failing (``unhealthy``), by id, with their node's
    state: the scheduler starts nothing new there, so they are not free, whatever still runs on them
    until its runs end."""
    drained = drained_nodes.drained(controller.store)
    out: dict[int, str] = {}
    for node in controller.executor.nodes():
        if node.state != "alive" or node.name in drained or node.id in drained:
            out.update(dict.fromkeys(node.gpus, node.state if node.state != "alive" else "drained"))
        else:
            out.update(dict.fromkeys(node.unhealthy, "unhealthy"))
    return out


def usage_series(rows: list[Any], now: float, window: float, bins: int, total_gpus: int,
                 user: str | None, *, since: float = 0.0) -> dict[str, Any]:
    """GPU-hours per user per time bin, and utilisation, over the last ``window`` seconds.

    Bins are aligned to multiples of their width (a poll a few seconds later keeps the same bins);
    the last one is running and ends at ``now``. ``rows`` are runs (``start_time``, ``end_time`` or
    None while running, ``gpus`` JSON, ``user``). With ``user`` set (a non-admin) other users are
    summed as ``"(other users)"``. ``since`` is when the server's store began: time before it, and
    time after ``now``, is no GPU-time there, so a bin's utilisation is its GPU-time held over the
    part of it that was covered (``covered_seconds``) and ``None`` where nothing was; the window's
    mean (``utilization_mean``) divides by the covered time too. The GPU count is today's.
    """
    width = window / bins
    last = math.ceil(now / width) * width
    edges = last - width * np.arange(bins, -1, -1, dtype=float)
    lo = max(float(edges[0]), since)
    covered = np.clip(np.minimum(edges[1:], now) - np.maximum(edges[:-1], lo), 0.0, None)
    per_user: dict[str, np.ndarray] = {}
    busy = np.zeros(bins)
    for r in rows:
        start = max(float(r["start_time"]), lo)
        end = now if r["end_time"] is None else min(float(r["end_time"]), now)
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0.0, None)
        if not overlap.any():
            continue
        gpu_seconds = overlap * len(json.loads(r["gpus"]))
        name = r["user"] if user is None or r["user"] == user else "(other users)"
        per_user.setdefault(name, np.zeros(bins))
        per_user[name] += gpu_seconds
        busy += gpu_seconds
    there = covered * total_gpus
    held = float(busy.sum())
    return {
        "start": float(edges[0]), "end": float(now), "since": min(lo, float(now)), "bin_seconds": width,
        "total_gpus": total_gpus, "bin_start": [float(x) for x in edges[:-1]],
        "covered_seconds": [round(float(x), 6) for x in covered],
        "gpu_hours": {u: [round(float(x) / 3600.0, 6) for x in v] for u, v in sorted(per_user.items())},
        "utilization": [round(float(b) / float(t), 6) if t > 0 else None for b, t in zip(busy, there, strict=True)],
        "utilization_mean": round(held / float(there.sum()), 6) if there.sum() > 0 else None,
        "gpu_hours_total": {u: round(float(v.sum()) / 3600.0, 6) for u, v in sorted(per_user.items())},
        "queues": None,
    }


def add_cluster_routes(app: FastAPI, controller: Controller, Who: Any, info: dict[str, Any]) -> None:
    """The cluster views, authenticated by ``Who`` (``auth``); ``info`` is the server's (``/v1/cluster``)."""
    store = controller.store
    Lister, Accountant = charged("list", Who), charged("accounting", Who)

    @app.get("/v1/cluster", tags=["cluster"])
    def cluster(who: Lister, queue_limit: Annotated[int, Query(
                    ge=0, le=MAX_QUEUE_PAGE, description="At most N waiting jobs in `queue` (the first in "
                    "queue order; `queue_total` counts them all; `GET /v1/queue` pages through them).")] = QUEUE_SHOWN,
                ) -> dict[str, Any]:
        """GPUs, what runs on each, and the head of the queue. A GPU of a node that is not alive
        (unreachable, draining, dead) or that an admin drained is ``available: false`` with its
        node's state, and counts as neither free nor in use unless a run still holds it."""
        on_gpu: dict[int, list[dict[str, Any]]] = {}
        for a in allocations.unended_with_owner(store):
            mine = who.admin or a["user"] == who.user
            for g in json.loads(a["gpus"]):
                on_gpu.setdefault(g, []).append({"job": int(a["job_id"]), "user": a["user"],
                                                 "name": a["name"] if mine else None, "phase": a["phase"]})
        down = unavailable_gpus(controller)
        queue, waiting = pending.queue_view(controller, None if who.admin else who.user, queue_limit)
        gpus = [{"id": i, "device": g.device, "type": g.gpu_type, "name": g.name, "memory_gb": g.memory_gb,
                 "virtual": g.virtual, "jobs": on_gpu.get(i, []), "available": i not in down,
                 "node_state": down.get(i, "alive")} for i, g in enumerate(controller.executor.gpus)]
        return {**info, "gpus": gpus, "gpus_total": len(gpus),
                "gpus_in_use": sum(1 for g in gpus if g["jobs"]), "gpus_unavailable": len(down),
                "gpus_free": sum(1 for g in gpus if g["available"] and not g["jobs"]),
                "jobs": counts.jobs_by_state(store),
                "queue": queue, "queue_total": waiting,
                "rounds": controller.stats.rounds, "last_decision_time": controller.stats.last_decision,
                "learned": None if controller.learning is None else controller.learning.counters()}

    @app.get("/v1/nodes", tags=["cluster"])
    def nodes(who: Who) -> dict[str, Any]:
        """Nodes of the cluster with their GPUs (global ids as in ``/v1/cluster``), state (``alive``,
        ``draining`` or ``dead``) and health: ``last_heartbeat`` (when the executor last heard from
        the node; for the local machine, the controller's own heartbeat: ``heartbeat_of``),
        ``lost_runs`` (per GPU id, runs whose processes vanished there in the last 24 h) and
        ``drained`` (by an admin: ``{since, by, reason}``, else null)."""
        return {"nodes": node_health(controller, node_view(controller), time.time())}

    add_drain_routes(app, controller, Who)

    @app.get("/v1/queue", tags=["cluster"], responses={304: {"description": "Unchanged since the ETag sent "
                                                                          "in If-None-Match."}})
    def queue(who: Lister, request: Request, response: Response,
              limit: Annotated[int | None, Query(ge=1, le=MAX_QUEUE_PAGE, description="At most N jobs (a "
                                                 "page; default: every waiting job).")] = None,
              offset: Annotated[int, Query(ge=0, le=MAX_INT, description="Skip the first N (the next page).")] = 0,
              ) -> Any:
        """Waiting jobs in the scheduling policy's order at the latest decision, with their queue
        (Tiresias level) where the policy has queues, why each waits and (with predictions) when it
        should start. Jobs submitted since come last, marked ``ordered: false``. Other users' jobs
        come without their name. ``total`` counts them all; ``limit`` and ``offset`` page through them.
        The ``ETag`` changes with each decision and each change to the jobs: send it back in
        ``If-None-Match`` to get a 304 while nothing changed."""
        board = pending.board(controller)
        policy = controller.scheduler.policy
        tag = f'W/"{board.version}.{offset}.{limit}.{who.user}.{int(who.admin)}"'
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers={"ETag": tag})
        response.headers["ETag"] = tag
        page = board.rows[offset:None if limit is None else offset + limit]
        tenancy, predictor = controller.tenancy, controller.predictor
        out = []
        for r in page:
            j = int(r["id"])
            mine = who.admin or r["user"] == who.user
            place = board.places.get(j)
            entry = {"id": j, "user": r["user"], "name": r["name"] if mine else None, "gpus": int(r["num_gpus"]),
                     "state": r["state"], "submit_time": float(r["submit_time"]),
                     "waiting_since": float(r["last_stop"] or r["submit_time"]),
                     "attained_gpu_seconds": float(r["attained"]), "preemptions": int(r["preemptions"]),
                     "ordered": j in board.ordered, "queue": board.levels.get(j),
                     "pending_reason": None if place is None else place.reason}
            if tenancy is not None:
                entry["tenant_queue"] = r["queue"] or None
            if predictor is not None:
                entry["predicted_start"] = predictor.lookup(j)[0]
            out.append(entry)
        queues = isinstance(policy, QueueInspect)
        return {"policy": policy.name, "queues": policy.num_queues if queues else None,
                "queue_thresholds": [float(x) for x in policy.thresholds] if queues else [],
                "last_decision_time": controller.stats.last_decision, "total": len(board.rows),
                "offset": offset, "jobs": out}

    @app.get("/v1/usage", tags=["cluster"])
    def usage(who: Accountant,
              window: Annotated[float, Query(ge=1.0, le=MAX_WINDOW, description="Seconds back from now.")] = 86400.0,
              bins: Annotated[int, Query(ge=1, le=MAX_BINS)] = 48) -> dict[str, Any]:
        """GPU-hours per user per time bin and utilisation (GPU-seconds held / GPU-seconds there),
        over the last ``window`` seconds, in bins aligned to their width (the last one running). Time
        before the server's store existed is not counted (``since``; ``utilization`` is ``null`` for a
        bin wholly before it). A user sees their own GPU-hours and the rest summed as "(other users)";
        an admin sees every user."""
        now = time.time()
        return usage_series(allocations.ran_since(store, now - window - window / bins), now, window, bins,
                            len(controller.executor.gpus), None if who.admin else who.user, since=store.epoch)
