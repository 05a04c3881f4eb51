"""The API's cluster over time (``/v1/cluster/history``): GPUs in use and jobs waiting over a past
window, the live counterpart of the simulator report's timeline (``core.timeseries``); and each
node's health for ``/v1/nodes`` (``node_health``): when it was last heard from, and the runs lost
on its GPUs lately.

Counts only (no job names or users), so any token may read it. Time before the server's store
existed is left out.
"""


import json
import math
import time
from typing import Annotated, Any

from fastapi import FastAPI, Query

from tesserae.core.timeseries import MAX_POINTS, busy_and_waiting, peak_sample
from tesserae.runtime.api.limits import MAX_WINDOW
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.store import history
from tesserae.runtime.store import nodes as drained_nodes


def cluster_history(controller: Controller, now: float, window: float, points: int) -> dict[str, Any]:
    """GPUs in use and jobs waiting over ``[max(now - window, the store's start), now]``, as a step
    series of at most ``points`` points (Unix seconds)."""
    store = controller.store
    start = min(now, max(now - window, store.epoch))
    runs = [(int(r["job_id"]), float(r["start_time"]), math.inf if r["end_time"] is None else float(r["end_time"]),
             [int(g) for g in json.loads(r["gpus"])]) for r in history.runs_overlapping(store, start)]
    jobs = [(int(r["id"]), float(r["submit_time"]), math.inf if r["finish_time"] is None else float(r["finish_time"]))
            for r in history.jobs_alive_since(store, start)]
    t, gpus, waiting = busy_and_waiting(runs, jobs, start, now)
    t, cols, sampled = peak_sample(t, {"gpus": gpus, "queued": waiting}, points)
    return {"start": start, "end": now, "total_gpus": len(controller.executor.gpus),
            "t": [round(float(x), 3) for x in t], "gpus": [int(x) for x in cols["gpus"]],
            "queued": [int(x) for x in cols["queued"]], "sampled": sampled}


#: How far back ``node_health`` counts lost runs.
LOST_WINDOW = 86400.0


def node_health(controller: Controller, nodes: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """``nodes`` (``NodeState`` dicts) with ``last_heartbeat``: when the executor last heard from the
    node, or for a node it does not track (the local machine), the controller's own heartbeat, with
    ``heartbeat_of`` saying which; and ``lost_runs``: per GPU id, the runs that ended ``lost`` (their
    processes vanished) there in the last ``LOST_WINDOW`` seconds."""
    lost: dict[int, int] = {}
    for r in history.lost_runs_since(controller.store, now - LOST_WINDOW):
        for g in json.loads(r["gpus"]):
            lost[int(g)] = lost.get(int(g), 0) + 1
    beat = controller.store.meta("heartbeat")
    drained = drained_nodes.drained(controller.store)
    out = []
    for n in nodes:
        own = n.get("last_seen") is None
        d = drained.get(n["name"]) or drained.get(n["id"])
        out.append({**n, "last_heartbeat": (float(beat) if beat else None) if own else n["last_seen"],
                    "heartbeat_of": "controller" if own else "node",
                    "lost_runs": {str(g): lost[g] for g in n["gpus"] if g in lost},
                    "drained": None if d is None else {"since": float(d["since"]), "by": d["by"],
                                                       "reason": d["reason"]}})
    return out


def add_history_routes(app: FastAPI, controller: Controller, Who: Any) -> None:
    @app.get("/v1/cluster/history", tags=["cluster"])
    def cluster_over_time(who: Who,
                          window: Annotated[float, Query(ge=1.0, le=MAX_WINDOW, description="Seconds back from now."
                                                         )] = 86400.0,
                          points: Annotated[int, Query(ge=2, le=MAX_POINTS, description="Most points returned; "
                                                       "beyond, each slice's maximum.")] = MAX_POINTS
                          ) -> dict[str, Any]:
        """GPUs in use (a GPU two packed jobs share counts once) and jobs waiting (submitted, not
        finished, not running: before the first start and after each preemption, held jobs too) over
        the last ``window`` seconds, from the server's start at the earliest: a step series (``t`` in
        Unix seconds; each value holds until the next ``t``)."""
        return cluster_history(controller, time.time(), window, points)
