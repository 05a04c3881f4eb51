"""Tenant queues over the HTTP API: ``/v1/queues`` (anyone reads, an admin replaces), job annotations,
and the per-queue gauges of ``/metrics``.

- ``GET /v1/queues``: every queue with its guarantee, borrowing limit, weight, policy and users,
  and at the latest decision its budget, GPUs in use and borrowed, jobs waiting and running.
- ``GET /v1/queues/{name}``: one queue (404 naming it when unknown).
- ``PUT /v1/queues`` (admin): a new config, the same document as the ``--config`` file (JSON);
  422 naming the field, 409 when an active job would lose its queue. It takes effect at the
  next decision and is kept in the store.
"""

import time
from typing import Annotated, Any

from fastapi import Body, FastAPI, HTTPException
from fastapi import Path as PathParam

from tesserae.core.queues import QUEUE_NAME_PATTERN
from tesserae.runtime.controller.prediction import not_started
from tesserae.runtime.controller.tenancy import QueueRefused
from tesserae.runtime.store import counts, jobs
from tesserae.runtime.store.database import RUNNABLE_STATES, Principal

QueueName = Annotated[str, PathParam(min_length=1, max_length=64, pattern=QUEUE_NAME_PATTERN,
                                     description="A queue's name.")]
WAITING = RUNNABLE_STATES


def queue_for(controller: Any, who: Principal, queue: str | None, priority_class: str, gpus: int) -> str:
    """The leaf queue a submission goes to ('' on a server without queues); QueueRefused otherwise."""
    tenancy = controller.tenancy
    if tenancy is None:
        if queue:
            raise QueueRefused(422, "queue", f"this server has no queues, so the job cannot go to queue '{queue}'; "
                                             "submit without one")
        if priority_class != "normal":
            raise QueueRefused(422, "priority_class", "priority classes need tenant queues, and this server has none")
        return ""
    return str(tenancy.resolve(who.user, who.admin, queue, priority_class, gpus))


def queue_rows(controller: Any) -> list[dict[str, Any]]:
    tenancy = controller.tenancy
    if tenancy is None:
        return []
    return list(tenancy.describe(controller.scheduler, counts.active_by_queue(controller.store)))


def annotate(controller: Any, views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each job's predicted start and finish. (Why a job waits is ``pending``'s, tenant queues
    included: one of its rules.)"""
    predictor = controller.predictor
    now = time.time()
    for v in views:
        waiting = v["state"] in WAITING
        if predictor is not None:
            start, finish = predictor.lookup(v["id"])
            if waiting:
                start, finish = not_started(start, finish, now)
            v["predicted_start"] = start if waiting else None
            v["predicted_finish"] = finish if v["state"] in (*WAITING, "running") else None
    return views


def add_queue_routes(app: FastAPI, controller: Any, Who: Any) -> None:
    """The ``/v1/queues`` routes, authenticated by ``Who`` (``auth``)."""

    @app.get("/v1/queues", tags=["queues"])
    def list_queues(who: Who) -> dict[str, Any]:
        """Every tenant queue (parents first) with its quota and its use at the latest decision."""
        tenancy = controller.tenancy
        return {"queues": queue_rows(controller), "default_queue": None if tenancy is None or tenancy.tree is None
                else tenancy.tree.default_queue, "source": None if tenancy is None else tenancy.source}

    @app.get("/v1/queues/{name}", tags=["queues"])
    def show_queue(name: QueueName, who: Who) -> dict[str, Any]:
        for q in queue_rows(controller):
            if q["name"] == name:
                return q
        raise HTTPException(404, f"queue '{name}' does not exist" if controller.tenancy is not None else
                            "this server has no queues (start it with --config FILE, or PUT /v1/queues)")

    @app.put("/v1/queues", tags=["queues"])
    def replace_queues(who: Who, body: Annotated[dict[str, Any], Body(
            description="The queue config: {\"queues\": [...], \"default_queue\": ...}, as in the --config file.",
            examples=[{"queues": [{"name": "research", "guarantee": 4, "weight": 2},
                                  {"name": "interns", "guarantee": 0, "users": ["intern1"]}]}])]) -> dict[str, Any]:
        """Replace the tenant queues (admins only); effective at the next decision, kept in the store."""
        if not who.admin:
            raise HTTPException(403, "only an admin token can change the queues")
        tenancy = controller.tenancy
        if tenancy is None:
            raise HTTPException(409, "this server was started without tenant queues support (policy "
                                     f"'{controller.scheduler.policy.name}')")
        tenancy.replace(body, who.user, jobs.active_queues(controller.store, cancelling=False))
        controller.store.event(None, "queues-replaced", {"by": who.user})
        controller.wake()
        return {"queues": tenancy.tree.describe() if tenancy.tree is not None else [], "source": tenancy.source}


def queue_metrics(controller: Any) -> list[tuple[str, str, str, list[tuple[str, Any]]]]:
    """Per-queue gauges for /metrics (none on a server without queues)."""
    rows = queue_rows(controller)
    if not rows:
        return []

    def samples(key: str) -> list[tuple[str, Any]]:
        return [(f'{{queue="{q["path"]}"}}', q.get(key) if q.get(key) is not None else 0) for q in rows]

    return [
        ("tesserae_queue_guarantee_gpus", "gauge", "GPUs guaranteed to each queue.", samples("guarantee")),
        ("tesserae_queue_budget_gpus", "gauge", "GPUs each queue may use at the latest decision (guarantee, or more "
         "when it borrows idle quota).", samples("budget")),
        ("tesserae_queue_gpus_in_use", "gauge", "GPUs held by each queue's jobs at the latest decision.",
         samples("gpus_in_use")),
        ("tesserae_queue_gpus_borrowed", "gauge", "GPUs each queue holds beyond its guarantee.",
         samples("gpus_borrowed")),
        ("tesserae_queue_jobs_waiting", "gauge", "Jobs waiting in each queue.", samples("jobs_waiting")),
        ("tesserae_queue_jobs_running", "gauge", "Jobs running in each queue.", samples("jobs_running")),
        ("tesserae_queue_reclaims_total", "counter", "Jobs stopped to give borrowed GPUs back, since the server "
         "started.", samples("reclaims")),
    ]
