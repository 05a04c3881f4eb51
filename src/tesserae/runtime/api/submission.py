"""Storing a submission: its rows (one per task of an array), its lifecycle columns, its dependencies'
checks. Shared by ``POST /v1/jobs`` and resubmission (``api_lifecycle``)."""

from __future__ import annotations

import json
from typing import Any

from tesserae.runtime.api.models import JobSubmission, SubmitError
from tesserae.runtime.store.database import Principal, Store
from tesserae.runtime.store.job_ids import JobIds


def lifecycle_columns(sub: JobSubmission) -> dict[str, Any]:
    """The ``jobs`` columns of the submission's lifecycle controls (``lifecycle``) and resource requests
    (``resources``)."""
    after = [[j, "any"] for j in dict.fromkeys(sub.after)] + [[j, "ok"] for j in dict.fromkeys(sub.after_ok)]
    return {"time_limit": sub.time_limit, "retries": sub.retries, "retry_backoff": sub.retry_backoff,
            "held": int(sub.hold), "after": json.dumps(after), "gpu_type": sub.gpu_type, "cpus": sub.cpus,
            "memory_mb": sub.memory_mb}


def check_dependencies(store: Store, sub: JobSubmission, who: Principal) -> None:
    """Each dependency names an existing job the submitter may see (422 naming the field otherwise)."""
    for field, ids in (("after", sub.after), ("after_ok", sub.after_ok)):
        for job_id in ids:
            row = store.one("SELECT user FROM jobs WHERE id=?", (job_id,))
            if row is None:
                raise SubmitError(field, f"job {job_id} does not exist")
            if not who.admin and row["user"] != who.user:
                raise SubmitError(field, f"job {job_id} belongs to another user")


def insert_jobs(store: Store, ids_source: JobIds, columns: dict[str, Any], indexes: list[int] | None) -> list[int]:
    """Insert one job, or one per array index (the first task's id names the array; only it keeps the
    idempotency key). Inside the caller's transaction; each id is claimed (``job_ids``: reserved, its
    folder made) before it is used, and the folders are durable before the caller commits."""
    names = ", ".join(columns)
    sql = (f"INSERT INTO jobs (id, {names}, array_job, array_index) VALUES (?, {', '.join('?' * len(columns))}, "
           "?, ?)")
    ids: list[int] = []
    for index in indexes if indexes is not None else [None]:
        values = dict(columns)
        if ids:
            values["idempotency_key"] = None
        job_id = ids_source.claim(max(store.next_job_id(), ids[-1] + 1 if ids else 1))
        store.execute(sql, (job_id, *values.values(), None, index))
        if index is not None:
            store.execute("UPDATE jobs SET array_job=? WHERE id=?", (ids[0] if ids else job_id, job_id))
        store.event(job_id, "submitted", {"by": columns["user"], "gpus": columns["num_gpus"],
                                          **({"queue": columns["queue"]} if columns.get("queue") else {}),
                                          **({} if index is None else {"array_index": index})},
                    columns["submit_time"])
        ids.append(job_id)
    ids_source.sync()
    return ids
