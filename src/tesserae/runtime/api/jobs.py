"""The API's job routes: submit (idempotent), list, show, cancel, logs.

A user sees and cancels only their own jobs; an admin token sees and cancels all of them. A
retried submission with the same ``Idempotency-Key`` and body returns the job the first one
created (status 200); the same key with another body is a 409.
"""

import json
import re
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, HTTPException, Query, Request, Response
from fastapi import Path as PathParam

from tesserae.runtime.api.budgets import charged
from tesserae.runtime.api.limits import ErrorBody
from tesserae.runtime.api.models import JobSubmission, SubmitError, check_submission, default_name, request_hash
from tesserae.runtime.api.queues import annotate, queue_for
from tesserae.runtime.api.submission import check_dependencies, lifecycle_columns
from tesserae.runtime.api.views import job_view
from tesserae.runtime.controller import pending
from tesserae.runtime.controller.lifecycle import parse_array
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.job.files import MAX_INT, read_log, tail_offset
from tesserae.runtime.store import allocations, jobs
from tesserae.runtime.store.database import FINAL_STATES, JOB_STATES, RUNNABLE_STATES, Principal, Store

LOG_CHUNK = 1 << 20
MAX_TAIL_LINES = 100000
MAX_NODES = 4096
#: Most jobs one page of ``GET /v1/jobs`` holds (follow ``next_cursor`` for more).
MAX_PAGE = 10_000
MAX_TIME = 1e11  # Unix seconds: year 5138
USER_PATTERN = r"^[A-Za-z0-9_.@\-]+$"
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
JobId = Annotated[int, PathParam(ge=1, le=MAX_INT, description="A job id.")]
JobState = Literal[JOB_STATES]  # type: ignore[valid-type]


def owned_job(store: Store, job_id: int, who: Principal) -> Any:
    """The job's row; 404 when there is none, 403 when it is another user's (unless ``who`` is an admin)."""
    row = jobs.get(store, job_id)
    if row is None:
        raise HTTPException(404, f"job {job_id} does not exist")
    if not who.admin and row["user"] != who.user:
        raise HTTPException(403, f"job {job_id} belongs to another user")
    return row


def add_job_routes(app: FastAPI, controller: Controller, Who: Any) -> None:
    """The ``/v1/jobs`` routes, authenticated by ``Who`` (``auth``)."""
    store = controller.store
    Lister = charged("list", Who)

    def own_job(job_id: int, who: Principal) -> Any:
        return owned_job(store, job_id, who)

    def live_allocation(job_id: int) -> Any | None:
        return allocations.current(store, job_id)

    job_links = {name: {"operationId": op, "parameters": {"job_id": "$response.body#/id"}}
                 for name, op in (("ShowJob", "show_v1_jobs__job_id__get"),
                                  ("CancelJob", "cancel_v1_jobs__job_id__cancel_post"),
                                  ("JobLogs", "logs_v1_jobs__job_id__logs_get"))}

    @app.post("/v1/jobs", status_code=201, tags=["jobs"],
              responses={201: {"description": "The job, queued.", "links": job_links},
                         200: {"description": "A retry: the job this Idempotency-Key already created."},
                         409: {"model": ErrorBody, "description": "The Idempotency-Key was used for another "
                                                                  "submission."}})
    def submit(sub: JobSubmission, who: Who, response: Response, request: Request,
               idempotency_key: Annotated[str | None, Header(
                   max_length=200, description="Any unique string (a UUID): a retry with the same key and body "
                                               "returns the job the first request created.")] = None,
               ) -> dict[str, Any]:
        """Submit a job; it is queued and the scheduler decides when and where it runs."""
        if idempotency_key is not None and not _IDEMPOTENCY_KEY.match(idempotency_key):
            raise SubmitError("Idempotency-Key", "must be 1 to 200 printable ASCII characters without spaces")
        digest = request_hash(sub)
        if idempotency_key is not None:
            replay = _replay(who, idempotency_key, digest)
            if replay is not None:
                response.status_code = 200
                return replay
        check_submission(sub, controller)
        queue = queue_for(controller, who, sub.queue, sub.priority_class, sub.gpus)
        try:
            controller.isolation.account_for(who.user)
        except PermissionError as e:
            raise HTTPException(403, str(e)) from None
        check_dependencies(store, sub, who)
        now = time.time()
        columns = {"user": who.user, "name": sub.name or default_name(sub.command), "job_type": sub.job_type,
                   "num_gpus": sub.gpus, "command": json.dumps(sub.command), "shell": int(sub.shell),
                   "env": json.dumps(sub.env), "workdir": sub.workdir, "nproc": sub.nproc,
                   "iterations": sub.iterations, "state": "queued", "submit_time": now, "last_stop": now,
                   "idempotency_key": idempotency_key, "request_hash": digest, "queue": queue,
                   "priority_class": sub.priority_class, **lifecycle_columns(sub)}
        indexes = parse_array(sub.array) if sub.array is not None else None
        try:
            with store.tx():  # the limits are checked where the jobs are stored: concurrent submits cannot overshoot
                request.app.state.budgets.admit(store, who.user, 1 if indexes is None else len(indexes))
                job_ids = jobs.insert_jobs(store, controller.job_ids, columns, indexes)
        except jobs.KeyTaken:  # the same key, submitted concurrently: the other request won
            replay = _replay(who, idempotency_key or "", digest)
            if replay is None:
                raise
            response.status_code = 200
            return replay
        controller.wake()
        row = jobs.get(store, job_ids[0])
        return {**job_view(row, None), "array_job_ids": job_ids if sub.array is not None else None}

    def _replay(who: Principal, key: str, digest: str) -> dict[str, Any] | None:
        row = jobs.by_idempotency_key(store, who.user, key)
        if row is None:
            return None
        if row["request_hash"] != digest:
            raise HTTPException(409, f"this Idempotency-Key was already used for another submission (job "
                                     f"{row['id']}); use a new key for a new job")
        tasks = None if row["array_job"] is None else jobs.array_tasks(store, int(row["id"]))
        return {**job_view(row, live_allocation(int(row["id"]))), "array_job_ids": tasks}

    def waits(rows: list[Any]) -> dict[int, Any]:
        """The queue places of ``rows`` (``pending.Cache``: none read when no row waits)."""
        waiting = [int(r["id"]) for r in rows if r["state"] in RUNNABLE_STATES and not r["cancel_requested"]]
        if not waiting:
            return {}
        return pending.board(controller, need=max(waiting)).places

    @app.get("/v1/jobs", tags=["jobs"])
    def list_jobs(who: Lister,
                  state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
                  limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="The most recent N (at most "
                                                                             f"{MAX_PAGE} a page).")] = 1000,
                  cursor: Annotated[int | None, Query(ge=1, le=MAX_INT, description="The next page: the "
                                                      "`next_cursor` of the previous answer (older jobs).")] = None,
                  user: Annotated[str | None, Query(min_length=1, max_length=100, pattern=USER_PATTERN,
                                                    description="Only this user's jobs (another user's: admins "
                                                                "only).")] = None,
                  since: Annotated[float | None, Query(ge=0, le=MAX_TIME, description="Only jobs not ended "
                                                       "before this time (Unix seconds).")] = None,
                  until: Annotated[float | None, Query(ge=0, le=MAX_TIME, description="Only jobs submitted "
                                                       "by this time (Unix seconds).")] = None,
                  ) -> dict[str, Any]:
        """Your jobs (all jobs for an admin): the most recent ``limit``, oldest first; with ``since``/``until``,
        the jobs whose life overlaps that window (``accounting``). When there may be older ones,
        ``next_cursor`` is set: pass it as ``cursor`` for the next page (null: this was the last)."""
        if user is not None and not who.admin and user != who.user:
            raise HTTPException(403, f"only an admin token sees another user's jobs ({user})")
        if since is not None and until is not None and until < since:
            raise HTTPException(422, "'until' is before 'since'")
        owner = (user or who.user) if not who.admin or user is not None else None
        rows = jobs.listing(store, user=owner, state=state, since=since, until=until, limit=limit, before=cursor)
        allocs = allocations.unended_of(store, [int(r["id"]) for r in rows if r["state"] not in FINAL_STATES])
        places = waits(rows)
        return {"jobs": annotate(controller, [job_view(r, allocs.get(int(r["id"])), pending=places.get(int(r["id"])))
                                              for r in reversed(rows)]),
                "next_cursor": int(rows[-1]["id"]) if len(rows) == limit else None}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    def show(job_id: JobId, who: Who) -> dict[str, Any]:
        row = own_job(job_id, who)
        view = annotate(controller, [job_view(row, live_allocation(job_id), jobs.events(store, job_id),
                                              waits([row]).get(job_id))])[0]
        learning = controller.learning  # its learned rates per GPU type and partner (learned throughputs)
        view["learned"] = None if learning is None else learning.describe(job_id)
        return view

    @app.post("/v1/jobs/{job_id}/cancel", tags=["jobs"],
              responses={409: {"model": ErrorBody, "description": "The job has already ended."}})
    def cancel(job_id: JobId, who: Who) -> dict[str, Any]:
        """Cancel a job: at once if it waits; a running job gets SIGTERM, then SIGKILL after the grace."""
        row = own_job(job_id, who)
        if row["state"] in FINAL_STATES:
            raise HTTPException(409, f"job {job_id} is already {row['state']}")
        controller.cancel(job_id, who.user)
        return job_view(jobs.get(store, job_id), live_allocation(job_id))

    @app.get("/v1/jobs/{job_id}/runs", tags=["jobs"])
    def runs(job_id: JobId, who: Who) -> dict[str, Any]:
        """Every run of a job: GPUs, the job sharing them (packing), start, end and outcome."""
        own_job(job_id, who)
        return {"runs": [{"run": int(a["id"]), "gpus": json.loads(a["gpus"]), "partner": a["partner"],
                          "strategy": a["strategy"], "phase": a["phase"], "start_time": float(a["start_time"]),
                          "end_time": None if a["end_time"] is None else float(a["end_time"]),
                          "outcome": a["outcome"], "exit_code": a["exit_code"], "stop_reason": a["stop_reason"]}
                         for a in allocations.of_job(store, job_id)]}

    def node_log(job_id: int, node: int, run: int | None) -> Path:
        """The log of a run's node ``node`` (``runs/RUN/part-K/output.log``); 404 when there is none."""
        if run is None:
            run = allocations.latest_id(store, job_id)
            if run is None:
                raise HTTPException(404, f"job {job_id} has not run yet")
        elif not allocations.is_run_of(store, run, job_id):
            raise HTTPException(404, f"job {job_id} has no run {run}")
        path = controller.paths.run_dir(job_id, run) / f"part-{node}" / "output.log"
        if not path.is_file():
            raise HTTPException(404, f"run {run} of job {job_id} has no node {node} (it ran on fewer nodes; "
                                     "the job's log names each run's nodes)")
        return path

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"], response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "The log bytes from `offset` (at most `limit`)."}})
    def logs(job_id: JobId, who: Who, offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
             limit: Annotated[int, Query(ge=1, le=LOG_CHUNK)] = LOG_CHUNK,
             tail: Annotated[int | None, Query(ge=1, le=MAX_TAIL_LINES, description="Only the last N lines "
                                               "(within the last MiB); `offset` is then ignored.")] = None,
             node: Annotated[int | None, Query(ge=1, le=MAX_NODES, description="A run over several nodes (Ray): "
                                               "the output of the ranks on its node K (0, the default, is the "
                                               "job's log, with every run's first node).")] = None,
             run: Annotated[int | None, Query(ge=1, le=MAX_INT, description="With `node`: which run (default: "
                                              "the latest).")] = None,
             ) -> Response:
        """The job's output (stdout and stderr of every run and of every rank on a run's first node) from
        byte ``offset``; with ``node``, the ranks on another node of a multi-node run. The next offset
        is in the ``X-Next-Offset`` header and the job's state in ``X-Job-State``."""
        row = own_job(job_id, who)
        path = controller.log_path(job_id) if node is None else node_log(job_id, node, run)
        if tail is not None:
            offset = tail_offset(path, tail, LOG_CHUNK)
        data = read_log(path, offset, limit)
        return Response(content=data, media_type="text/plain; charset=utf-8",
                        headers={"X-Next-Offset": str(offset + len(data)), "X-Job-State": row["state"]})
