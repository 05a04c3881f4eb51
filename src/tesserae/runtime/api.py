"""The HTTP API (FastAPI): jobs, logs, cluster state, tokens, Prometheus metrics.

Every ``/v1`` route needs ``Authorization: Bearer TOKEN``. A user sees and cancels only their own
jobs; an admin token sees and cancels all of them and may create tokens. Errors are JSON objects
``{"detail": "one clear sentence"}`` (422 validation errors add ``errors``: one entry per field;
the ``ErrorBody`` schema). Inputs are bounded (``api_limits``): no NUL or lone surrogate in any
string, integers at most 2^53, bodies at most 1 MiB (``--max-body-bytes``).
The OpenAPI schema is at ``/openapi.json`` and the interactive docs at ``/docs``; ``/healthz`` and
``/metrics`` need no token (the metrics are cluster-wide counts, no job names or commands).

``POST /v1/jobs`` takes an ``Idempotency-Key`` header (the CLI sends one by default): a retried
submission with the same key and body returns the job the first one created (status 200), so a
client that lost the answer can ask again without submitting twice.
"""

import hashlib
import json
import math
import os
import re
import shutil
import sqlite3
import time
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

import tesserae
from tesserae.runtime.api_limits import (
    DEFAULT_MAX_BODY,
    ERROR_RESPONSES,
    BodyLimit,
    BoundedInt,
    ErrorBody,
    SafeJSONResponse,
    SafeStr,
)
from tesserae.runtime.controller import Controller
from tesserae.runtime.job_files import MAX_INT, read_log
from tesserae.runtime.store import FINAL_STATES, JOB_STATES, Principal

LOG_CHUNK = 1 << 20
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "MASTER_ADDR", "MASTER_PORT", "RANK",
                          "LOCAL_RANK", "WORLD_SIZE"})
_INTERPRETERS = re.compile(r"^(python[0-9.]*|sh|bash|zsh|env|uv|torchrun)$")
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
#: Linux refuses a single argument or environment string longer than this (MAX_ARG_STRLEN).
MAX_ARG = 131072
JobId = Annotated[int, PathParam(ge=1, le=MAX_INT, description="A job id.")]
JobState = Literal[JOB_STATES]  # type: ignore[valid-type]


class JobSubmission(BaseModel):
    """A job to run: the command (an argv list), how many GPUs (a gang: all or nothing), and extras."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [
        {"command": ["python", "train.py", "--lr", "0.1"], "gpus": 2, "name": "resnet", "iterations": 1000},
        {"command": ["true"], "gpus": 1}]})

    # minItems and the pattern below are published in the schema; the validators give the clearer messages.
    command: list[Annotated[SafeStr, Field(max_length=MAX_ARG)]] = Field(
        max_length=4096, json_schema_extra={"minItems": 1},
        description="Program and arguments (argv), run without a shell unless `shell` is true, in which case it is "
                    "one shell command line.")
    gpus: BoundedInt = Field(description="GPUs the job needs, all at once (a gang).")
    name: SafeStr | None = Field(None, min_length=1, max_length=200, description="Display name.")
    job_type: str = Field("generic", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$",
                          description="Model / batch-size class, as the throughput profile names it.")
    iterations: BoundedInt | None = Field(None, description="Total iterations (the job's work), if known.")
    env: dict[Annotated[SafeStr, Field(max_length=256)], Annotated[SafeStr, Field(max_length=MAX_ARG)]] = Field(
        default_factory=dict, max_length=1024, description="Extra environment variables.")
    workdir: SafeStr | None = Field(None, max_length=4096, json_schema_extra={"pattern": "^/"},
                                    description="Absolute working directory on the server machine (default: a "
                                                "private folder of the job).")
    shell: bool = Field(False, description="Run `command[0]` with /bin/sh -c.")
    nproc: int = Field(1, ge=1, le=64, description="Copies of the command to start (RANK 0..nproc-1).")

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError('the command is empty: give the program and its arguments, e.g. ["python", '
                             '"train.py"]')
        if not v[0].strip():
            raise ValueError("the program name (first element) is empty")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _ENV_NAME.match(key):
                raise ValueError(f"'{key}' is not a valid environment variable name")
            if key.startswith("TESSERAE_") or key in RESERVED_ENV:
                raise ValueError(f"{key} is set by Tesserae for every job and cannot be overridden")
        return v

    @model_validator(mode="after")
    def _shell(self) -> "JobSubmission":
        if self.shell and len(self.command) != 1:
            raise ValueError("with shell=true, command must be exactly one shell command line")
        return self


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    user: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.@\-]+$")
    admin: bool = False
    label: SafeStr = Field("", max_length=200)


class SubmitError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _default_name(command: list[str]) -> str:
    parts = [os.path.basename(a) for a in command[:3] if a and not a.startswith("-")]
    if len(parts) > 1 and _INTERPRETERS.match(parts[0]):
        return parts[1][:200]
    return (parts[0] if parts else "job")[:200]


def check_submission(sub: JobSubmission, controller: Controller) -> None:
    """Checks that need the server: GPU count against this cluster, the job type, paths and the program."""
    cluster = controller.cluster
    biggest = max(cluster.gpus_by_type.values())
    if sub.gpus > cluster.num_gpus:
        raise SubmitError("gpus", f"the job asks for {sub.gpus} GPUs but this cluster has {cluster.num_gpus}")
    if sub.gpus > biggest:
        raise SubmitError("gpus", f"the job asks for {sub.gpus} GPUs but at most {biggest} are of one type")
    known = controller.job_types()
    if sub.job_type not in known:
        shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
        raise SubmitError("job_type", f"unknown job type '{sub.job_type}'; this server's profile knows: {shown}")
    workdir = None
    if sub.workdir is not None:
        workdir = sub.workdir
        if not os.path.isabs(workdir):
            raise SubmitError("workdir", f"'{sub.workdir}' is not an absolute path")
        if not os.path.isdir(workdir):
            raise SubmitError("workdir", f"'{sub.workdir}' is not a directory on the server")
    if sub.shell:
        return
    prog = sub.command[0]
    if "/" in prog:
        path = prog
        if not os.path.isabs(path):
            if workdir is None:
                raise SubmitError("command", f"'{prog}' is a relative path but the job runs in its own folder; "
                                             "give an absolute path or a workdir")
            path = os.path.join(workdir, path)
        if not os.path.isfile(path):
            raise SubmitError("command", f"'{prog}' does not exist on the server")
        if not os.access(path, os.X_OK):
            raise SubmitError("command", f"'{prog}' is not executable")
    else:
        try:
            found = shutil.which(prog, path=sub.env.get("PATH", os.environ.get("PATH")))
        except (OSError, ValueError):
            found = None
        if found is None:
            raise SubmitError("command", f"'{prog}' is not found on the server's PATH")


def request_hash(sub: JobSubmission) -> str:
    """What identifies a submission for its idempotency key: its canonical JSON."""
    return hashlib.sha256(json.dumps(sub.model_dump(), sort_keys=True).encode()).hexdigest()


def _num(v: Any) -> Any:
    return None if v is None else _finite(v)


def _finite(v: Any) -> float | None:
    x = float(v)
    return x if math.isfinite(x) else None


def job_view(row: Any, allocation: Any | None, events: list[Any] | None = None) -> dict[str, Any]:
    now = time.time()
    executed, attained = float(row["executed"]), float(row["attained"])
    gpus = None
    if allocation is not None:
        gpus = json.loads(allocation["gpus"])
        held = max(0.0, now - float(allocation["start_time"]))
        executed += held
        attained += held * int(row["num_gpus"])
    total = row["iterations"] if row["iterations"] is not None else row["total_reported"]
    finish = _num(row["finish_time"])
    submit = float(row["submit_time"])
    first = _num(row["first_start"])
    view: dict[str, Any] = {
        "id": int(row["id"]),
        "name": row["name"],
        "user": row["user"],
        "state": row["state"],
        "gpus": int(row["num_gpus"]),
        "job_type": row["job_type"],
        "command": json.loads(row["command"]),
        "shell": bool(row["shell"]),
        "nproc": int(row["nproc"]),
        "workdir": row["workdir"],
        "env": json.loads(row["env"]),
        "iterations_done": _finite(row["progress"]) or 0.0,
        "iterations_total": None if total is None else int(total),
        "submit_time": submit,
        "first_start_time": first,
        "finish_time": finish,
        "jct_seconds": None if finish is None else finish - submit,
        "queueing_seconds": None if first is None else first - submit,
        "executed_seconds": executed,
        "attained_gpu_seconds": attained,
        "preemptions": int(row["preemptions"]),
        "migrations": int(row["migrations"]),
        "exit_code": row["exit_code"],
        "reason": row["reason"],
        "cancel_requested": bool(row["cancel_requested"]),
        "assigned_gpus": gpus,
    }
    if events is not None:
        view["events"] = [{"time": float(e["time"]), "kind": e["kind"],
                           "detail": json.loads(e["detail"]) if e["detail"].startswith("{") else e["detail"]}
                          for e in events]
    return view


def _field_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    out = []
    for e in exc.errors():
        loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path")]
        field = ".".join(loc)
        kind = e.get("type", "")
        given = e.get("input")
        if kind == "extra_forbidden":
            msg = f"unknown field '{field}'"
        elif kind == "missing":
            msg = f"'{field}' is required" if field else "a JSON object body is required"
        elif kind == "json_invalid":
            msg = "the request body is not valid JSON"
        else:
            text = str(e.get("msg", "invalid")).removeprefix("Value error, ")
            msg = f"'{field}': {text}" if field else text
            if isinstance(given, str | int | float | bool) and kind.endswith("_type"):
                msg += f" (got {json.dumps(given)})"
        out.append({"field": field, "message": msg})
    return out


def create_app(controller: Controller, info: dict[str, Any], *, max_body: int = DEFAULT_MAX_BODY) -> FastAPI:
    store = controller.store
    # Swagger UI and ReDoc from the package (fastapi-offline), not a CDN: /docs works air-gapped.
    app = FastAPIOffline(title="Tesserae", static_url="/docs-static", version=tesserae.__version__,
                  description="GPU cluster scheduler: submit, watch and cancel jobs. Authenticate with "
                              "`Authorization: Bearer TOKEN` (`tesserae token create`).",
                  default_response_class=SafeJSONResponse, responses=ERROR_RESPONSES)
    app.add_middleware(BodyLimit, limit=max_body)
    bearer = HTTPBearer(auto_error=False, description="A Tesserae token (tsr_...).")

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _field_errors(exc)
        return SafeJSONResponse(status_code=422, content={"detail": "; ".join(e["message"] for e in errors),
                                                          "errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Starlette names only the first route's methods for a path
            path = request.url.path
            headers["Allow"] = ", ".join(sorted({m for r in app.routes if isinstance(r, APIRoute)
                                                 and r.path_regex.match(path) for m in r.methods or ()}))
        return SafeJSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(SubmitError)
    async def _submit_error(request: Request, exc: SubmitError) -> JSONResponse:
        msg = f"'{exc.field}': {exc}"
        return SafeJSONResponse(status_code=422, content={"detail": msg,
                                                          "errors": [{"field": exc.field, "message": msg}]})

    def principal(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
        if creds is None or not creds.credentials:
            raise HTTPException(401, "missing token: send 'Authorization: Bearer TOKEN' (set TESSERAE_TOKEN "
                                     "for the CLI)", headers={"WWW-Authenticate": "Bearer"})
        who = store.authenticate(creds.credentials)
        if who is None:
            raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
        return who

    Who = Annotated[Principal, Depends(principal)]

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

    @app.get("/healthz", tags=["server"])
    def healthz() -> dict[str, Any]:
        return {"ok": True, "version": tesserae.__version__}

    @app.get("/v1/whoami", tags=["server"])
    def whoami(who: Who) -> dict[str, Any]:
        return {"user": who.user, "admin": who.admin}

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
                    "iterations, state, submit_time, last_stop, idempotency_key, request_hash) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
                    (who.user, sub.name or _default_name(sub.command), sub.job_type, sub.gpus,
                     json.dumps(sub.command), int(sub.shell), json.dumps(sub.env), sub.workdir, sub.nproc,
                     sub.iterations, now, now, idempotency_key, digest)).lastrowid)
                store.event(job_id, "submitted", {"by": who.user, "gpus": sub.gpus}, now)
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
        return {"jobs": [job_view(r, allocs.get(int(r["id"]))) for r in reversed(rows)]}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    def show(job_id: JobId, who: Who) -> dict[str, Any]:
        row = own_job(job_id, who)
        events = store.query("SELECT * FROM events WHERE job_id=? ORDER BY id", (job_id,))
        return job_view(row, live_allocation(job_id), events)

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

    @app.get("/v1/cluster", tags=["cluster"])
    def cluster(who: Who) -> dict[str, Any]:
        """GPUs, what runs on each, and the queue."""
        allocs = store.query("SELECT a.job_id, a.gpus, a.phase, j.user, j.name FROM allocations a "
                             "JOIN jobs j ON j.id = a.job_id WHERE a.phase != 'ended'")
        on_gpu: dict[int, list[dict[str, Any]]] = {}
        for a in allocs:
            mine = who.admin or a["user"] == who.user
            for g in json.loads(a["gpus"]):
                on_gpu.setdefault(g, []).append({"job": int(a["job_id"]), "user": a["user"],
                                                 "name": a["name"] if mine else None, "phase": a["phase"]})
        gpus = [{"id": i, "device": g.device, "type": g.gpu_type, "name": g.name, "memory_gb": g.memory_gb,
                 "virtual": g.virtual, "jobs": on_gpu.get(i, [])} for i, g in enumerate(controller.executor.gpus)]
        counts = {s: 0 for s in JOB_STATES}
        for r in store.query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state"):
            counts[r["state"]] = int(r["n"])
        return {**info, "gpus": gpus, "gpus_total": len(gpus),
                "gpus_in_use": sum(1 for g in gpus if g["jobs"]), "jobs": counts,
                "rounds": controller.stats.rounds, "last_decision_time": controller.stats.last_decision}

    @app.post("/v1/tokens", status_code=201, tags=["server"])
    def create_token(req: TokenRequest, who: Who) -> dict[str, Any]:
        """Create a token (admins only). The token is shown once; the server keeps only its hash."""
        if not who.admin:
            raise HTTPException(403, "only an admin token can create tokens")
        return {"user": req.user, "admin": req.admin, "token": store.create_token(req.user, admin=req.admin,
                                                                                  label=req.label)}

    @app.get("/metrics", tags=["server"], response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text format."}})
    def metrics() -> Response:
        """Prometheus text format: jobs by state, GPUs, rounds, decision time, preemptions."""
        return Response(content=prometheus_text(controller), media_type="text/plain; version=0.0.4")

    from tesserae.web.dashboard import mount_web  # the dashboard at /ui (it imports this module)

    mount_web(app, controller, info)
    return app


def prometheus_text(controller: Controller) -> str:
    store, stats = controller.store, controller.stats
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{labels} {value:g}" if isinstance(value, float) else f"{name}{labels} {value}")

    counts = {s: 0 for s in JOB_STATES}
    for r in store.query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state"):
        counts[r["state"]] = int(r["n"])
    metric("tesserae_jobs", "gauge", "Jobs by state.", [(f'{{state="{s}"}}', n) for s, n in counts.items()])
    totals = store.one("SELECT COUNT(*) AS n, COALESCE(SUM(preemptions), 0) AS p, COALESCE(SUM(migrations), 0) AS m "
                       "FROM jobs")
    metric("tesserae_jobs_submitted_total", "counter", "Jobs ever submitted.", [("", int(totals["n"]))])
    metric("tesserae_preemptions_total", "counter", "Preemptions of jobs.", [("", int(totals["p"]))])
    metric("tesserae_migrations_total", "counter", "Migrations of jobs.", [("", int(totals["m"]))])
    runs = store.one("SELECT COUNT(*) AS n FROM allocations WHERE pid IS NOT NULL")
    metric("tesserae_runs_started_total", "counter", "Job processes started (first starts and resumptions).",
           [("", int(runs["n"]))])
    by_type: dict[str, int] = {}
    for g in controller.executor.gpus:
        by_type[g.gpu_type] = by_type.get(g.gpu_type, 0) + 1
    metric("tesserae_gpus", "gauge", "GPUs of this cluster by type.", [(f'{{type="{t}"}}', n) for t, n in
                                                                        by_type.items()])
    used: set[int] = set()
    for a in store.query("SELECT gpus FROM allocations WHERE phase != 'ended'"):
        used.update(json.loads(a["gpus"]))
    metric("tesserae_gpus_in_use", "gauge", "GPUs held by running jobs.", [("", len(used))])
    done = store.one("SELECT COUNT(*) AS n, COALESCE(SUM(finish_time - submit_time), 0) AS s FROM jobs "
                     "WHERE state='completed'")
    metric("tesserae_job_completion_seconds", "summary", "Job completion time (finish - submit) of completed "
           "jobs.", [("_sum", float(done["s"])), ("_count", int(done["n"]))])
    metric("tesserae_rounds_total", "counter", "Scheduling decisions since the server started.",
           [("", stats.rounds)])
    metric("tesserae_decision_seconds_total", "counter", "Time spent in Scheduler.decide since the server started.",
           [("", float(stats.decision_seconds_sum))])
    metric("tesserae_adopted_runs_total", "counter", "Runs adopted after a controller restart.",
           [("", stats.adopted)])
    metric("tesserae_lost_runs_total", "counter", "Runs whose processes vanished; their jobs were requeued.",
           [("", stats.lost)])
    return "\n".join(lines) + "\n"
