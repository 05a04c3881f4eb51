"""The API's lifecycle routes: hold and release a waiting job, resubmit (clone) an ended one.

Like the other job routes, a user acts on their own jobs only and an admin on all of them. A hold
is a column of the job (``lifecycle``), so it outlives a controller restart; a resubmission is a
new job with the ended one's spec and lifecycle controls (not its dependencies, which have ended),
owned by the same user, in the queue and priority class it would get now (``api.queues.queue_for``:
the queues may have changed), that names the job it copies (``resubmit_of``).
"""

import json
import time
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from tesserae.runtime.api.jobs import JobId, owned_job
from tesserae.runtime.api.limits import ErrorBody
from tesserae.runtime.api.models import check_env_allowed
from tesserae.runtime.api.queues import queue_for
from tesserae.runtime.api.views import job_view
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.store import allocations, jobs
from tesserae.runtime.store.database import FINAL_STATES, RUNNABLE_STATES, Principal

#: The columns a resubmission copies.
_SPEC = ("user", "name", "job_type", "num_gpus", "command", "shell", "env", "workdir", "nproc", "iterations",
         "time_limit", "retries", "retry_backoff", "gpu_type", "cpus", "memory_mb", "queue", "priority_class",
         "output", "error", "node")


def add_lifecycle_routes(app: FastAPI, controller: Controller, Who: Any) -> None:
    store = controller.store
    conflict = {409: {"model": ErrorBody, "description": "The job is not in a state this applies to."}}

    def answer(job_id: int) -> dict[str, Any]:
        return job_view(jobs.get(store, job_id), allocations.current(store, job_id))

    @app.post("/v1/jobs/{job_id}/hold", tags=["jobs"], responses=conflict)
    def hold(job_id: JobId, who: Who) -> dict[str, Any]:
        """Hold a waiting job: it is not scheduled until released (a running job cannot be held)."""
        owned_job(store, job_id, who)
        state = jobs.hold(store, job_id, who.user, time.time())
        if state not in RUNNABLE_STATES:
            raise HTTPException(409, f"job {job_id} is {state}; only a waiting job can be held")
        return answer(job_id)

    @app.post("/v1/jobs/{job_id}/release", tags=["jobs"], responses=conflict)
    def release(job_id: JobId, who: Who) -> dict[str, Any]:
        """Release a held job: it waits for the scheduler again."""
        owned_job(store, job_id, who)
        if not jobs.release(store, job_id, who.user):
            raise HTTPException(409, f"job {job_id} is not held")
        controller.wake()
        return answer(job_id)

    @app.post("/v1/jobs/{job_id}/resubmit", status_code=201, tags=["jobs"], responses=conflict)
    def resubmit(job_id: JobId, who: Who, request: Request) -> dict[str, Any]:
        """A new job with the spec of an ended one (completed, failed or cancelled)."""
        row = owned_job(store, job_id, who)
        if row["state"] not in FINAL_STATES:
            raise HTTPException(409, f"job {job_id} is {row['state']}; only an ended job can be resubmitted")
        check_env_allowed(json.loads(row["env"]), controller)  # stored when the server allowed it, perhaps
        now = time.time()
        columns = {k: row[k] for k in _SPEC}
        # Into the queue the job would go to now (the queues may have changed since it ran).
        columns["queue"] = queue_for(controller, Principal(str(row["user"]), who.admin), row["queue"] or None,
                                     str(row["priority_class"]), int(row["num_gpus"]))
        columns.update(state="queued", submit_time=now, last_stop=now, resubmit_of=job_id)
        with store.tx():  # the admission limits (``budgets``) count the job's owner's jobs
            request.app.state.budgets.admit(store, str(row["user"]), 1)
            new_id = jobs.insert_jobs(store, controller.job_ids, columns, None, same_task_as=row)[0]
        controller.wake()
        return answer(new_id)
