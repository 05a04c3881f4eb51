"""Job control in bulk and changes to a waiting job: Slurm's ``scancel -u/-n/-t`` and ``scontrol update``.

- ``POST /v1/bulk/{action}`` (``cancel``, ``hold``, ``release``): the jobs named by ``ids``
  and/or chosen by the filters ``user``, ``name`` (exact), ``state`` and ``queue``; every
  criterion given must hold (as scancel's options combine). A user acts on their own jobs only: a
  ``user`` filter naming someone else is a 403, and an id of another user's job is answered in
  ``denied`` (the others are still acted on); an admin acts on any. Without ids, the filters
  pick at most ``MAX_BULK`` jobs the action would change, in id order, and ``more`` says that
  more remain (ask again). The answer counts what was done and says, per named job, why one was
  not.
- ``PATCH /v1/jobs/{id}``: the time limit, GPU count, queue or dependencies of a waiting job
  (queued or preempted, not being cancelled); 409 for a running or ended job, 422 naming the field
  for a value the cluster or the queue cannot hold (more GPUs than there are, a time limit the job
  has already used, a dependency cycle). A preempted job given another GPU count restarts from its
  checkpoint on that many GPUs: whether it can is the job's business, as at submission. An update
  that lands while the controller applies a plan that starts the job (a window of milliseconds)
  can see it start with the request it had when the plan was made.
"""


import json
import time
from typing import Annotated, Any, Literal

import rustworkx as rx
from fastapi import FastAPI, HTTPException
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tesserae.core.queues import QUEUE_NAME_PATTERN
from tesserae.runtime.api.jobs import USER_PATTERN, JobId, owned_job
from tesserae.runtime.api.limits import BoundedInt, ErrorBody, SafeStr
from tesserae.runtime.api.models import MAX_NODE_NAME, NODE_NAME_PATTERN, SubmitError, check_gpu_type, check_node
from tesserae.runtime.api.queues import queue_for
from tesserae.runtime.api.views import job_view
from tesserae.runtime.controller.lifecycle import MAX_DEPENDENCIES, MAX_TIME_LIMIT
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.store import allocations, job_control, jobs
from tesserae.runtime.store.database import ACTIVE_STATES, FINAL_STATES, RUNNABLE_STATES, Principal

#: Most jobs one bulk request names or acts on.
MAX_BULK = 10000
Action = Literal["cancel", "hold", "release"]
#: The states each action applies to.
APPLIES_TO: dict[str, tuple[str, ...]] = {"cancel": ACTIVE_STATES, "hold": RUNNABLE_STATES,
                                          "release": RUNNABLE_STATES}


class BulkAction(BaseModel):
    """Which jobs: ids and/or filters, all of which must hold (at least one of them)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ids: list[BoundedInt] | None = Field(None, max_length=MAX_BULK, description="These jobs.")
    user: str | None = Field(None, min_length=1, max_length=100, pattern=USER_PATTERN,
                             description="Only this user's jobs (another user's: admins only).")
    name: SafeStr | None = Field(None, min_length=1, max_length=200, description="Only jobs of this exact name.")
    state: Literal["queued", "preempted", "running"] | None = Field(None, description="Only jobs in this state.")
    queue: str | None = Field(None, min_length=1, max_length=64, pattern=QUEUE_NAME_PATTERN,
                              description="Only jobs of this tenant queue.")
    dry_run: bool = Field(False, description="Only say which jobs the action would apply to (``would``; "
                                             "a confirmation's count): nothing is done.")

    @model_validator(mode="after")
    def _some(self) -> "BulkAction":
        if self.ids is None and self.user is None and self.name is None and self.state is None and self.queue is None:
            raise ValueError("name the jobs: give ids or a filter (user, name, state, queue)")
        return self


class JobUpdate(BaseModel):
    """What to change in a waiting job (at least one field); ``after``/``after_ok`` replace its dependencies."""

    model_config = ConfigDict(extra="forbid", strict=True)

    time_limit: float | None = Field(None, gt=0, le=MAX_TIME_LIMIT, description="Most run time (seconds, over "
                                     "all its runs).")
    gpus: BoundedInt | None = Field(None, description="GPUs the job needs, all at once.")
    queue: str | None = Field(None, min_length=1, max_length=64, pattern=QUEUE_NAME_PATTERN,
                              description="Tenant queue (a leaf queue the job's user may use).")
    after: list[BoundedInt] | None = Field(None, max_length=MAX_DEPENDENCIES, description="Start only after these "
                                           "jobs have ended; with after_ok, replaces the job's dependencies "
                                           "([] removes them).")
    after_ok: list[BoundedInt] | None = Field(None, max_length=MAX_DEPENDENCIES, description="Start only after "
                                              "these jobs have completed.")
    node: str | None = Field(None, max_length=MAX_NODE_NAME, pattern=r"^$|" + NODE_NAME_PATTERN[1:],
                             description="Run only on this node (its name or id); \"\" lets it run anywhere.")

    @model_validator(mode="after")
    def _some(self) -> "JobUpdate":
        if not self.model_fields_set:
            raise ValueError("nothing to change: give time_limit, gpus, queue, after, after_ok or node")
        return self


def add_control_routes(app: FastAPI, controller: Controller, Who: Any) -> None:
    store = controller.store

    @app.post("/v1/bulk/{action}", tags=["jobs"])
    def bulk(action: Annotated[Action, PathParam(description="cancel, hold or release.")], req: BulkAction,
             who: Who) -> dict[str, Any]:
        """Cancel, hold or release several jobs at once (as scancel -u/-n/-t); counts what was done."""
        if req.user is not None and not who.admin and req.user != who.user:
            raise HTTPException(403, f"only an admin token acts on another user's jobs ({req.user})")
        applies = APPLIES_TO[action]
        if req.state is not None and req.state not in applies:
            raise SubmitError("state", f"{action} applies to {_either(applies)} jobs, not {req.state} ones")
        user = req.user if who.admin else who.user
        states = applies if req.state is None else (req.state,)
        denied: list[int] = []
        not_found: list[int] = []
        skipped: list[dict[str, Any]] = []
        more = False
        if req.ids is not None:
            ids = list(dict.fromkeys(req.ids))
            rows = {int(r["id"]): r for r in job_control.some(store, ids)}
            chosen = {int(r["id"]) for r in job_control.select(store, ids=ids, user=user, name=req.name,
                                                               states=states, queue=req.queue, limit=MAX_BULK,
                                                               still=action)}
            targets = []
            for job_id in ids:
                row = rows.get(job_id)
                if row is None:
                    not_found.append(job_id)
                elif not who.admin and row["user"] != who.user:
                    denied.append(job_id)
                elif job_id not in chosen:
                    skipped.append({"id": job_id, "state": row["state"], "reason": _why_not(row, action, req)})
                else:
                    targets.append(row)
        else:
            targets = job_control.select(store, ids=None, user=user, name=req.name, states=states, queue=req.queue,
                                         limit=MAX_BULK + 1, still=action)
            more = len(targets) > MAX_BULK
            targets = targets[:MAX_BULK]
        if req.dry_run:
            return {"action": action, "dry_run": True, "would": [int(r["id"]) for r in targets],
                    "count": len(targets), "skipped": sorted(skipped, key=lambda s: s["id"]), "denied": denied,
                    "not_found": not_found, "more": more}
        done: list[dict[str, Any]] = []
        now = time.time()
        with store.tx():
            for row in targets:
                job_id = int(row["id"])
                result, why = _apply(controller, action, job_id, who.user, now)
                if result is not None:
                    done.append({"id": job_id, "result": result})
                else:
                    skipped.append({"id": job_id, "state": row["state"], "reason": why})
        if done:
            controller.wake()
        skipped.sort(key=lambda s: s["id"])
        return {"action": action, "done": done, "count": len(done), "skipped": skipped, "denied": denied,
                "not_found": not_found, "more": more}

    @app.patch("/v1/jobs/{job_id}", tags=["jobs"],
               responses={409: {"model": ErrorBody, "description": "The job does not wait (it runs or has ended)."}})
    def update(job_id: JobId, req: JobUpdate, who: Who) -> dict[str, Any]:
        """Change a waiting job's time limit, GPU count, queue, dependencies or node (as scontrol update)."""
        row = owned_job(store, job_id, who)
        _check_waiting(row)
        changes: dict[str, Any] = {}
        gpus = int(row["num_gpus"]) if req.gpus is None else req.gpus
        if req.gpus is not None:
            _check_gpus(controller, row, req.gpus)
            changes["num_gpus"] = req.gpus
        if req.time_limit is not None:
            used = float(row["executed"])
            if req.time_limit <= used:
                raise SubmitError("time_limit", f"job {job_id} has already run {used:.0f} s; give a time limit "
                                                "above that")
            changes["time_limit"] = req.time_limit
        if req.queue is not None or (req.gpus is not None and row["queue"]):
            owner = Principal(str(row["user"]), who.admin)
            queue = queue_for(controller, owner, req.queue or str(row["queue"]), str(row["priority_class"]), gpus)
            if queue != row["queue"]:
                changes["queue"] = queue
        if req.after is not None or req.after_ok is not None:
            changes["after"] = json.dumps(_dependencies(controller, job_id, req, who))
        node = row["node"] if req.node is None else (req.node or None)
        if node is not None and (req.node or req.gpus is not None):
            check_node(node, gpus, row["gpu_type"], controller)
        if req.node is not None and node != row["node"]:
            changes["node"] = node
        if changes:
            state = job_control.update_waiting(store, job_id, changes, who.user, time.time())
            if state is not None:
                raise HTTPException(409, f"job {job_id} is {state} now; only a waiting job can be updated")
            controller.wake()
        return job_view(jobs.get(store, job_id), allocations.current(store, job_id))


def _apply(controller: Controller, action: str, job_id: int, by: str, now: float) -> tuple[str | None, str]:
    """Do ``action`` to one job (in the caller's transaction): what was done (``cancelled``,
    ``cancelling`` for a running job now being stopped, ``held``, ``released``), or None and why not."""
    store = controller.store
    if action == "cancel":
        state = controller.cancel(job_id, by)
        if state in ("cancelled", "running"):
            return ("cancelled" if state == "cancelled" else "cancelling"), ""
        return None, f"it is already {state}"
    if action == "hold":
        state = jobs.hold(store, job_id, by, now)
        return ("held", "") if state in RUNNABLE_STATES else (None, f"it is {state}: only a waiting job can be held")
    return ("released", "") if jobs.release(store, job_id, by) else (None, "it is not held")


def _why_not(row: Any, action: str, req: BulkAction) -> str:
    """Why a job named by id is left alone: the first criterion it fails."""
    for field in ("name", "queue"):
        wanted = getattr(req, field)
        if wanted is not None and row[field] != wanted:
            return f"its {field} is not {wanted}"
    if req.user is not None and row["user"] != req.user:
        return f"it is not {req.user}'s"
    if req.state is not None and row["state"] != req.state:
        return f"it is {row['state']}, not {req.state}"
    if row["state"] in APPLIES_TO[action]:
        if row["cancel_requested"]:
            return "it is being cancelled"
        return "it is held already" if action == "hold" else "it is not held"
    if row["state"] in FINAL_STATES:
        return f"it is already {row['state']}"
    return f"it is {row['state']}; {action} applies to {_either(APPLIES_TO[action])} jobs"


def _either(states: tuple[str, ...]) -> str:
    return ", ".join(states[:-1]) + f" or {states[-1]}"


def _check_waiting(row: Any) -> None:
    state = str(row["state"])
    if state == "running" or (state in RUNNABLE_STATES and row["cancel_requested"]):
        raise HTTPException(409, f"job {row['id']} is {state}; only a waiting job can be updated (cancel and "
                                 "resubmit a running one)")
    if state not in RUNNABLE_STATES:
        raise HTTPException(409, f"job {row['id']} has ended ({state}); only a waiting job can be updated")


def _check_gpus(controller: Controller, row: Any, gpus: int) -> None:
    """The cluster can hold ``gpus`` for this job (as ``check_submission``)."""
    cluster = controller.cluster
    if gpus > cluster.num_gpus:
        raise SubmitError("gpus", f"this cluster has {cluster.num_gpus} GPUs; job {row['id']} cannot have {gpus}")
    biggest = max(cluster.gpus_by_type.values())
    if gpus > biggest:
        raise SubmitError("gpus", f"at most {biggest} GPUs of this cluster are of one type; job {row['id']} cannot "
                                  f"have {gpus}")
    if row["gpu_type"]:
        check_gpu_type(str(row["gpu_type"]), gpus, controller)


def _dependencies(controller: Controller, job_id: int, req: JobUpdate, who: Principal) -> list[list[Any]]:
    """The job's new ``after`` column: each dependency exists, is visible to ``who``, and makes no cycle."""
    after = list(dict.fromkeys(req.after or []))
    after_ok = list(dict.fromkeys(req.after_ok or []))
    if len(set(after) | set(after_ok)) > MAX_DEPENDENCIES:
        raise SubmitError("after", f"a job has at most {MAX_DEPENDENCIES} dependencies")
    store = controller.store
    for field, ids in (("after", after), ("after_ok", after_ok)):
        for dep in ids:
            if dep == job_id:
                raise SubmitError(field, f"job {job_id} cannot wait for itself")
            user = jobs.owner(store, dep)
            if user is None:
                raise SubmitError(field, f"job {dep} does not exist")
            if not who.admin and user != who.user:
                raise SubmitError(field, f"job {dep} belongs to another user")
    graph = job_control.dependencies_of_waiting(store)
    graph[job_id] = after + after_ok
    cycle = _cycle_through(graph, job_id)
    if cycle is not None:
        raise SubmitError("after" if req.after else "after_ok",
                          "a dependency cycle: " + " -> ".join(map(str, cycle)))
    return [[j, "any"] for j in after] + [[j, "ok"] for j in after_ok]


def _cycle_through(graph: dict[int, list[int]], start: int) -> list[int] | None:
    """Job ids from ``start`` along dependencies back to ``start``, if such a cycle exists."""
    nodes = sorted(set(graph) | {d for deps in graph.values() for d in deps})
    index = {n: i for i, n in enumerate(nodes)}
    g: rx.PyDiGraph = rx.PyDiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from_no_data([(index[a], index[b]) for a, deps in graph.items() for b in deps])
    for first in sorted(set(graph.get(start, []))):
        paths = rx.digraph_dijkstra_shortest_paths(g, index[first], target=index[start])
        if index[start] in paths:
            return [start, *(nodes[i] for i in paths[index[start]])]
        if first == start:
            return [start, start]
    return None
