"""The API's cluster views: GPUs and what runs on each (``/v1/cluster``), nodes (``/v1/nodes``), the
waiting jobs in the policy's order (``/v1/queue``), and usage over time (``/v1/usage``).

Like every route, they need a token (``auth``); a user sees the names of their own jobs only (other
users' jobs appear with their id and user); an admin sees everything. They read the store and the
controller's latest decision, and change nothing. The dashboard's Cluster, Queue and Usage pages
are drawn from them.
"""


import json
import time
from dataclasses import asdict
from typing import Annotated, Any

import numpy as np
from fastapi import FastAPI, Query

from tesserae.runtime.controller import pending
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.store import allocations, counts, jobs
from tesserae.scheduling.base import QueueInspect

#: Most time bins one usage query may ask for.
MAX_BINS = 500
#: Longest usage window (seconds): a year.
MAX_WINDOW = 366 * 86400.0


def node_view(controller: Controller) -> list[dict[str, Any]]:
    """Every node of the scheduler's view, its GPUs (global ids) and its state (``Executor.nodes``).

    A Ray node that left (``dead``) stays in the view until the next decision; one that Ray drains
    is ``draining``. The local executor's machine is one node per GPU type, always ``alive``.
    """
    return [asdict(node) for node in controller.executor.nodes()]


def usage_series(rows: list[Any], now: float, window: float, bins: int, total_gpus: int,
                 user: str | None) -> dict[str, Any]:
    """GPU-hours per user per time bin, and utilisation, over ``[now - window, now]``.

    ``rows`` are runs (``start_time``, ``end_time`` or None while running, ``gpus`` JSON,
    ``user``). With ``user`` set (a non-admin) other users are summed as ``"(other users)"``.
    """
    edges = np.linspace(now - window, now, bins + 1)
    per_user: dict[str, np.ndarray] = {}
    busy = np.zeros(bins)
    for r in rows:
        start = float(r["start_time"])
        end = now if r["end_time"] is None else float(r["end_time"])
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0.0, None)
        if not overlap.any():
            continue
        gpu_seconds = overlap * len(json.loads(r["gpus"]))
        name = r["user"] if user is None or r["user"] == user else "(other users)"
        per_user.setdefault(name, np.zeros(bins))
        per_user[name] += gpu_seconds
        busy += gpu_seconds
    width = window / bins
    return {
        "start": float(edges[0]), "end": float(now), "bin_seconds": width, "total_gpus": total_gpus,
        "bin_start": [float(x) for x in edges[:-1]],
        "gpu_hours": {u: [round(float(x) / 3600.0, 6) for x in v] for u, v in sorted(per_user.items())},
        "utilization": [round(float(x) / (width * total_gpus), 6) if total_gpus else 0.0 for x in busy],
        "gpu_hours_total": {u: round(float(v.sum()) / 3600.0, 6) for u, v in sorted(per_user.items())},
        "queues": None,
    }


def add_cluster_routes(app: FastAPI, controller: Controller, Who: Any, info: dict[str, Any]) -> None:
    """The cluster views, authenticated by ``Who`` (``auth``); ``info`` is the server's (``/v1/cluster``)."""
    store = controller.store

    @app.get("/v1/cluster", tags=["cluster"])
    def cluster(who: Who) -> dict[str, Any]:
        """GPUs, what runs on each, and the queue."""
        on_gpu: dict[int, list[dict[str, Any]]] = {}
        for a in allocations.unended_with_owner(store):
            mine = who.admin or a["user"] == who.user
            for g in json.loads(a["gpus"]):
                on_gpu.setdefault(g, []).append({"job": int(a["job_id"]), "user": a["user"],
                                                 "name": a["name"] if mine else None, "phase": a["phase"]})
        gpus = [{"id": i, "device": g.device, "type": g.gpu_type, "name": g.name, "memory_gb": g.memory_gb,
                 "virtual": g.virtual, "jobs": on_gpu.get(i, [])} for i, g in enumerate(controller.executor.gpus)]
        return {**info, "gpus": gpus, "gpus_total": len(gpus),
                "gpus_in_use": sum(1 for g in gpus if g["jobs"]), "jobs": counts.jobs_by_state(store),
                "queue": pending.queue_view(controller, None if who.admin else who.user),
                "rounds": controller.stats.rounds, "last_decision_time": controller.stats.last_decision,
                "learned": None if controller.learning is None else controller.learning.counters()}

    @app.get("/v1/nodes", tags=["cluster"])
    def nodes(who: Who) -> dict[str, Any]:
        """Nodes of the cluster with their GPUs (global ids as in ``/v1/cluster``) and state
        (``alive``, ``draining`` or ``dead``)."""
        return {"nodes": node_view(controller)}

    @app.get("/v1/queue", tags=["cluster"])
    def queue(who: Who) -> dict[str, Any]:
        """Waiting jobs in the scheduling policy's order at the latest decision, with their queue
        (Tiresias level) where the policy has queues. Jobs submitted since come last, marked
        ``ordered: false``. Other users' jobs come without their name."""
        order, levels = pending.policy_order(controller)
        waiting = {int(r["id"]): r for r in jobs.waiting(store)}
        position = {j: i for i, j in enumerate(order)}
        ids = sorted(waiting, key=lambda j: (j not in position, position.get(j, 0), j))
        out = []
        for j in ids:
            r = waiting[j]
            mine = who.admin or r["user"] == who.user
            out.append({"id": j, "user": r["user"], "name": r["name"] if mine else None, "gpus": int(r["num_gpus"]),
                        "state": r["state"], "submit_time": float(r["submit_time"]),
                        "waiting_since": float(r["last_stop"] or r["submit_time"]),
                        "attained_gpu_seconds": float(r["attained"]), "preemptions": int(r["preemptions"]),
                        "ordered": j in position, "queue": levels.get(j)})
        policy = controller.scheduler.policy
        queues = isinstance(policy, QueueInspect)
        return {"policy": policy.name, "queues": policy.num_queues if queues else None,
                "queue_thresholds": [float(x) for x in policy.thresholds] if queues else [],
                "last_decision_time": controller.stats.last_decision, "jobs": out}

    @app.get("/v1/usage", tags=["cluster"])
    def usage(who: Who,
              window: Annotated[float, Query(ge=1.0, le=MAX_WINDOW, description="Seconds back from now.")] = 86400.0,
              bins: Annotated[int, Query(ge=1, le=MAX_BINS)] = 48) -> dict[str, Any]:
        """GPU-hours per user per time bin and utilisation (GPU-seconds held / GPU-seconds there),
        over the last ``window`` seconds. A user sees their own GPU-hours and the rest summed as
        "(other users)"; an admin sees every user."""
        now = time.time()
        return usage_series(allocations.ran_since(store, now - window), now, window, bins,
                            len(controller.executor.gpus), None if who.admin else who.user)
