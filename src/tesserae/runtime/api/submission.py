"""A submission's lifecycle columns and its dependencies' checks (``POST /v1/jobs``); its rows (one per
task of an array) are stored by ``store.jobs.insert_jobs``."""

from __future__ import annotations

import json
from typing import Any

from tesserae.runtime.api.models import JobSubmission, SubmitError
from tesserae.runtime.store import jobs
from tesserae.runtime.store.database import Principal, Store


def lifecycle_columns(sub: JobSubmission) -> dict[str, Any]:
    """The ``jobs`` columns of the submission's lifecycle controls (``lifecycle``), resource requests
    (``resources``) and output files (``job.output``)."""
    after = [[j, "any"] for j in dict.fromkeys(sub.after)] + [[j, "ok"] for j in dict.fromkeys(sub.after_ok)]
    return {"time_limit": sub.time_limit, "retries": sub.retries, "retry_backoff": sub.retry_backoff,
            "held": int(sub.hold), "after": json.dumps(after), "gpu_type": sub.gpu_type, "cpus": sub.cpus,
            "memory_mb": sub.memory_mb, "output": sub.output, "error": sub.error, "node": sub.node}


def check_dependencies(store: Store, sub: JobSubmission, who: Principal) -> None:
    """Each dependency names an existing job the submitter may see (422 naming the field otherwise)."""
    for field, ids in (("after", sub.after), ("after_ok", sub.after_ok)):
        for job_id in ids:
            user = jobs.owner(store, job_id)
            if user is None:
                raise SubmitError(field, f"job {job_id} does not exist")
            if not who.admin and user != who.user:
                raise SubmitError(field, f"job {job_id} belongs to another user")
