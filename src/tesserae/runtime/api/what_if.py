"""``POST /v1/what-if``: the active jobs' predicted start and finish, now and under another policy,
placement or queue config, both simulated from the same snapshot of the latest decision
(``prediction.Predictor.what_if``). 409 when the server makes no predictions or has not decided
yet; 422 naming the field for an unknown policy, placement or a bad queue config.
"""

import time
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from tesserae.core.errors import InputError
from tesserae.runtime.api.budgets import charged
from tesserae.runtime.api.limits import ErrorBody
from tesserae.runtime.controller.prediction import not_started
from tesserae.runtime.controller.tenancy import QueueRefused
from tesserae.runtime.store import jobs as stored_jobs
from tesserae.runtime.store.database import RUNNABLE_STATES


class WhatIf(BaseModel):
    """Another policy, placement or queue config for the same snapshot (omitted: as the server runs)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    policy: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[a-z0-9\-]+$")
    placement: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[a-z0-9\-]+$")
    queues: dict[str, Any] | None = Field(None, description="A queue config as for PUT /v1/queues.")
    no_queues: bool = Field(False, description="One global queue instead of the server's tenant queues.")


def _average_jct(pred: Any, submit: dict[int, float], epoch: float) -> float | None:
    jcts = [f + epoch - submit[j] for j, f in pred.finish.items() if f is not None and j in submit]
    return sum(jcts) / len(jcts) if jcts else None


def add_what_if_routes(app: FastAPI, controller: Any, Who: Any) -> None:
    """``POST /v1/what-if``, authenticated by ``Who`` (``auth``), within the user's budget (``budgets``)."""
    Asker = charged("what-if", Who)

    @app.post("/v1/what-if", tags=["queues"],
              responses={409: {"model": ErrorBody, "description": "No decision has been made yet: nothing to "
                                                                  "predict from."}})
    def what_if(req: WhatIf, who: Asker, request: Request) -> dict[str, Any]:
        """Predicted start and finish of the active jobs now, and under another policy, placement or quota.

        Both come from the same snapshot of the latest decision, simulated forward. A user sees their own
        jobs (an admin every job); the averages cover every active job. One what-if per user at a time
        (429 otherwise), checked before anything is simulated; each simulation stops at its time budget:
        then ``partial`` is true and the jobs it did not reach have no prediction (null).
        """
        from tesserae.core.queues import parse_config
        from tesserae.placement.base import placement_names
        from tesserae.scheduling.base import policy_names

        predictor = controller.predictor
        if predictor is None:
            raise HTTPException(409, "this server makes no predictions")
        if req.policy is not None and req.policy not in policy_names(include_oracles=False):
            raise QueueRefused(422, "policy", f"unknown policy '{req.policy}'; the server accepts "
                                              f"{', '.join(policy_names(include_oracles=False))}")
        if req.placement is not None and req.placement not in placement_names():
            raise QueueRefused(422, "placement", f"unknown placement '{req.placement}'; choose one of: "
                                                 f"{', '.join(placement_names())}")
        try:
            queues = None if req.queues is None else parse_config(req.queues, path="body")
            with request.app.state.budgets.what_ifs.slot(who.user):
                base, alt = predictor.what_if(req.policy, req.placement, queues, no_queues=req.no_queues)
        except InputError as e:
            raise QueueRefused(422, e.field or "queues", str(e)) from None
        except LookupError as e:
            raise HTTPException(409, str(e)) from None
        ids = sorted(set(base.start) | set(base.finish))
        rows = stored_jobs.briefs(controller.store, ids)
        epoch = predictor.epoch

        def at(v: float | None) -> float | None:
            return None if v is None else v + epoch

        jobs = []
        now = time.time()
        for j in ids:
            r = rows.get(j)
            if r is None or (not who.admin and r["user"] != who.user):
                continue
            start, finish = at(base.start.get(j)), at(base.finish.get(j))
            alt_start, alt_finish = at(alt.start.get(j)), at(alt.finish.get(j))
            if r["state"] in RUNNABLE_STATES:  # not started: as of now (``prediction.not_started``)
                start, finish = not_started(start, finish, now)
                alt_start, alt_finish = not_started(alt_start, alt_finish, now)
            jobs.append({"id": j, "name": r["name"], "user": r["user"], "state": r["state"],
                         "start": start, "finish": finish, "what_if_start": alt_start, "what_if_finish": alt_finish})
        submit = {j: float(r["submit_time"]) for j, r in rows.items()}
        return {"policy": base.policy, "what_if_policy": alt.policy, "jobs": jobs,
                "avg_jct": _average_jct(base, submit, epoch), "what_if_avg_jct": _average_jct(alt, submit, epoch),
                "complete": base.complete and alt.complete, "estimated_work": sorted(set(base.estimated_work)),
                "partial": base.out_of_time or alt.out_of_time,
                "budget_seconds": predictor.budget_seconds,
                "snapshot_time": base.now + epoch}
