"""The API's job routes: submit (idempotent), list, show, cancel, logs.

A user sees and cancels only their own jobs; an admin token sees and cancels all of them. A
retried submission with the same ``Idempotency-Key`` and body returns the job the first one
created (status 200); the same key with another body is a 409.
"""

import json
import re
import sqlite3
import time
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, HTTPException, Query, Response
from fastapi import Path as PathParam

from tesserae.runtime.api_limits import ErrorBody
from tesserae.runtime.api_models import JobSubmission, SubmitError, check_submission, default_name, request_hash
from tesserae.runtime.api_queues import annotate, queue_for
from tesserae.runtime.api_views import job_view
from tesserae.runtime.controller import Controller
from tesserae.runtime.job_files import MAX_INT, read_log
from tesserae.runtime.store import FINAL_STATES, JOB_STATES, Principal

LOG_CHUNK = 1 << 20
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
JobId = Annotated[int, PathParam(ge=1, le=MAX_INT, description="A job id.")]
JobState = Literal[JOB_STATES]  # type: ignore[valid-type]


def add_job_routes(app: FastAPI, controller: Controller, Who: Any) -> None:
    """The ``/v1/jobs`` routes, authenticated by ``Who`` (the principal dependency of ``api``)."""
    store = controller.store

    def own_job(job_id: int, who: Principal) -> Any:
        row = store.one("SELECT * FROM jobs WHERE id=?", (job_id,))
        if row is None:
            raise HTTPException(404, f"job {job_id} does not exist")
        if not who.admin and row["user"] != who.user:
            raise HTTPException(403, f"job {job_id} belongs to another user")
        return row

    def live_allocation(job_id: int) -> Any | None:
        return store.one("SELECT * FROM allocations WHERE job_id=? AND phase != 'ended' ORDER BY id DESC LIMIT 1",
                         (job_id,))

    job_links = {name: {"operationId": op, "parameters": {"job_id": "$response.body#/id"}}
                 for name, op in (("ShowJob", "show_v1_jobs__job_id__get"),
                                  ("CancelJob", "cancel_v1_jobs__job_id__cancel_post"),
                                  ("JobLogs", "logs_v1_jobs__job_id__logs_get"))}

    @app.post("/v1/jobs", status_code=201, tags=["jobs"],
              responses={201: {"description": "The job, queued.", "links": job_links},
                         200: {"description": "A retry: the job this Idempotency-Key already created."},
                         409: {"model": ErrorBody, "description": "The Idempotency-Key was used for another "
                                                                  "submission."}})
    def submit(sub: JobSubmission, who: Who, response: Response,
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
        now = time.time()
        try:
            with store.tx() as c:
                controller.reserve_job_id(store.next_job_id())
                job_id = int(c.execute(
                    "INSERT INTO jobs (user, name, job_type, num_gpus, command, shell, env, workdir, nproc, "
                    "iterations, state, submit_time, last_stop, idempotency_key, request_hash, queue, priority_class) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)",
                    (who.user, sub.name or default_name(sub.command), sub.job_type, sub.gpus,
                     json.dumps(sub.command), int(sub.shell), json.dumps(sub.env), sub.workdir, sub.nproc,
                     sub.iterations, now, now, idempotency_key, digest, queue, sub.priority_class)).lastrowid)
                store.event(job_id, "submitted", {"by": who.user, "gpus": sub.gpus, **({"queue": queue} if queue
                                                                                     else {})}, now)
        except sqlite3.IntegrityError:  # the same key, submitted concurrently: the other request won
            replay = _replay(who, idempotency_key or "", digest)
            if replay is None:
                raise
            response.status_code = 200
            return replay
        controller.wake()
        row = store.one("SELECT * FROM jobs WHERE id=?", (job_id,))
        return job_view(row, None)

    def _replay(who: Principal, key: str, digest: str) -> dict[str, Any] | None:
        row = store.one("SELECT * FROM jobs WHERE user=? AND idempotency_key=?", (who.user, key))
        if row is None:
            return None
        if row["request_hash"] != digest:
            raise HTTPException(409, f"this Idempotency-Key was already used for another submission (job "
                                     f"{row['id']}); use a new key for a new job")
        return job_view(row, live_allocation(int(row["id"])))

    @app.get("/v1/jobs", tags=["jobs"])
    def list_jobs(who: Who,
                  state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
                  limit: Annotated[int, Query(ge=1, le=100000)] = 1000) -> dict[str, Any]:
        """Your jobs (all jobs for an admin), oldest first."""
        sql, params = "SELECT * FROM jobs WHERE 1=1", []
        if not who.admin:
            sql += " AND user=?"
            params.append(who.user)
        if state is not None:
            sql += " AND state=?"
            params.append(state)
        rows = store.query(sql + " ORDER BY id DESC LIMIT ?", (*params, limit))
        allocs = {int(a["job_id"]): a for a in store.query("SELECT * FROM allocations WHERE phase != 'ended'")}
        return {"jobs": annotate(controller, [job_view(r, allocs.get(int(r["id"]))) for r in reversed(rows)])}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    def show(job_id: JobId, who: Who) -> dict[str, Any]:
        row = own_job(job_id, who)
        events = store.query("SELECT * FROM events WHERE job_id=? ORDER BY id", (job_id,))
        return annotate(controller, [job_view(row, live_allocation(job_id), events)])[0]

    @app.post("/v1/jobs/{job_id}/cancel", tags=["jobs"],
              responses={409: {"model": ErrorBody, "description": "The job has already ended."}})
    def cancel(job_id: JobId, who: Who) -> dict[str, Any]:
        """Cancel a job: at once if it waits; a running job gets SIGTERM, then SIGKILL after the grace."""
        row = own_job(job_id, who)
        if row["state"] in FINAL_STATES:
            raise HTTPException(409, f"job {job_id} is already {row['state']}")
        controller.cancel(job_id, who.user)
        return job_view(store.one("SELECT * FROM jobs WHERE id=?", (job_id,)), live_allocation(job_id))

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"], response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "The log bytes from `offset` (at most `limit`)."}})
    def logs(job_id: JobId, who: Who, offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
             limit: Annotated[int, Query(ge=1, le=LOG_CHUNK)] = LOG_CHUNK) -> Response:
        """The job's output (stdout and stderr of every run) from byte ``offset``; the next offset is in
        the ``X-Next-Offset`` header and the job's state in ``X-Job-State``."""
        row = own_job(job_id, who)
        data = read_log(controller.log_path(job_id), offset, limit)
        return Response(content=data, media_type="text/plain; charset=utf-8",
                        headers={"X-Next-Offset": str(offset + len(data)), "X-Job-State": row["state"]})
