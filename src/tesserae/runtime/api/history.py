"""The API's cluster over time (``/v1/cluster/history``): GPUs in use and jobs waiting over a past
window, the live counterpart of the simulator report's timeline (``core.timeseries``).

Counts only (no job names or users), so any token may read it. Time before the server's store
existed is left out.
"""


import json
import math
import time
from typing import Annotated, Any

from fastapi import FastAPI, Query

from tesserae.core.timeseries import MAX_POINTS, busy_and_waiting, peak_sample
from tesserae.runtime.api.cluster import MAX_WINDOW
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.store import history


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
