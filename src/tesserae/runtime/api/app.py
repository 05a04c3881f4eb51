"""The HTTP API (FastAPI): jobs, logs, cluster state, tokens, Prometheus metrics.

Every ``/v1`` route needs ``Authorization: Bearer TOKEN``. A user sees and cancels only their own
jobs; an admin token sees and cancels all of them and may create tokens. Errors are JSON objects
``{"detail": "one clear sentence"}`` (422 validation errors add ``errors``: one entry per field;
the ``ErrorBody`` schema). Inputs are bounded (``limits``): no NUL or lone surrogate in any
string, integers at most 2^53, bodies at most 1 MiB (``--max-body-bytes``).
The OpenAPI schema is at ``/openapi.json`` and the interactive docs at ``/docs``; ``/healthz`` and
``/metrics`` need no token (the metrics are cluster-wide counts, no job names or commands).

``POST /v1/jobs`` takes an ``Idempotency-Key`` header (the CLI sends one by default): a retried
submission with the same key and body returns the job the first one created (status 200), so a
client that lost the answer can ask again without submitting twice.

Here: the app, its error handlers, and the server's own routes (health, whoami, tokens, metrics).
Every route is authenticated by one dependency (``auth``); the job routes are ``jobs`` (hold,
release and resubmit: ``lifecycle``; bulk actions and updates of a waiting job: ``control``;
usage: ``accounting``); the cluster views ``cluster`` (over time: ``history``); the tenant queues
``queues``; predictions under another policy ``what_if``; the bodies and submission checks
``models``; the answers ``views``. A new group of routes is a module with an
``add_..._routes(app, controller, Who)``, called from ``create_app``. The dashboard (``/ui``) is
not the API's: the ``tesserae server`` command mounts it (``AppExtension``), so the runtime never
imports ``tesserae.web``.
"""


import json
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException

import tesserae
from tesserae.runtime.api.accounting import add_accounting_routes
from tesserae.runtime.api.auth import authenticated, require_admin
from tesserae.runtime.api.budgets import Budgets
from tesserae.runtime.api.cluster import add_cluster_routes
from tesserae.runtime.api.control import add_control_routes
from tesserae.runtime.api.early_refusal import EarlyRefusal, charged_routes
from tesserae.runtime.api.headers import SecurityHeaders
from tesserae.runtime.api.history import add_history_routes
from tesserae.runtime.api.jobs import add_job_routes
from tesserae.runtime.api.lifecycle import add_lifecycle_routes
from tesserae.runtime.api.limits import DEFAULT_MAX_BODY, ERROR_RESPONSES, BodyLimit, SafeJSONResponse
from tesserae.runtime.api.models import SubmitError, TokenRequest
from tesserae.runtime.api.queues import add_queue_routes
from tesserae.runtime.api.redoc import add_redoc_route
from tesserae.runtime.api.tokens import add_token_routes
from tesserae.runtime.api.views import prometheus_text
from tesserae.runtime.api.what_if import add_what_if_routes
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.controller.tenancy import QueueRefused


def _shown(part: object) -> str:
    """A field name as an error shows it: a control character or lone surrogate in a key the request sent
    (an env variable's name) is written as an escape, never echoed."""
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}"
                   for ch in str(part))


def _field_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    out = []
    for e in exc.errors():
        loc = [_shown(p) for p in e.get("loc", ()) if p not in ("body", "query", "path")]
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


#: Something mounted on the server's app besides the API (the dashboard of ``tesserae.web``, which the
#: ``tesserae server`` command passes in): called with the app, the controller and the server's info.
AppExtension = Callable[[FastAPI, Controller, dict[str, Any]], object]


def create_app(controller: Controller, info: dict[str, Any], *, max_body: int = DEFAULT_MAX_BODY,
               extensions: Sequence[AppExtension] = (), budgets: Budgets | None = None) -> FastAPI:
    """The API app; each of ``extensions`` is then mounted on it, in order. ``budgets``: the per-user
    request budgets (``budgets``; the defaults when None)."""
    store = controller.store
    # Swagger UI and ReDoc from the package (fastapi-offline), not a CDN: /docs works air-gapped.
    # /redoc is our own page (``redoc``): the package's ReDoc under a policy that loads nothing external.
    app = FastAPIOffline(title="Tesserae", static_url="/docs-static", redoc_url=None, version=tesserae.__version__,
                  description="GPU cluster scheduler: submit, watch and cancel jobs. Authenticate with "
                              "`Authorization: Bearer TOKEN` (`tesserae token create`).",
                  default_response_class=SafeJSONResponse, responses=ERROR_RESPONSES)
    add_redoc_route(app, "/docs-static")
    app.state.budgets = budgets or Budgets()
    app.add_middleware(BodyLimit, limit=max_body)
    # A request of a user already over its budget is refused before it is read, routed or authenticated.
    app.add_middleware(EarlyRefusal, budgets=app.state.budgets, routes=lambda: charged_routes(app.routes))
    app.add_middleware(SecurityHeaders)  # the outermost: on every response, the body limit's 413 included

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

    @app.exception_handler(QueueRefused)
    async def _queue_refused(request: Request, exc: QueueRefused) -> JSONResponse:
        msg = f"'{exc.field}': {exc}"
        return SafeJSONResponse(status_code=exc.status, content={"detail": msg,
                                                                 "errors": [{"field": exc.field, "message": msg}]})

    @app.exception_handler(SubmitError)
    async def _submit_error(request: Request, exc: SubmitError) -> JSONResponse:
        msg = f"'{exc.field}': {exc}"
        return SafeJSONResponse(status_code=422, content={"detail": msg,
                                                          "errors": [{"field": exc.field, "message": msg}]})

    Who = authenticated(store)

    @app.get("/healthz", tags=["server"])
    def healthz() -> dict[str, Any]:
        return {"ok": True, "version": tesserae.__version__}

    @app.get("/v1/whoami", tags=["server"])
    def whoami(who: Who) -> dict[str, Any]:
        return {"user": who.user, "admin": who.admin}

    add_job_routes(app, controller, Who)
    add_lifecycle_routes(app, controller, Who)
    add_control_routes(app, controller, Who)
    add_accounting_routes(app, controller, Who)
    add_queue_routes(app, controller, Who)
    add_what_if_routes(app, controller, Who)
    add_cluster_routes(app, controller, Who, info)
    add_history_routes(app, controller, Who)
    add_token_routes(app, controller, Who)

    @app.post("/v1/tokens", status_code=201, tags=["server"])
    def create_token(req: TokenRequest, who: Who) -> dict[str, Any]:
        """Create a token (admins only). The token is shown once; the server keeps only its hash."""
        require_admin(who, "create tokens")
        return {"user": req.user, "admin": req.admin, "token": store.create_token(req.user, admin=req.admin,
                                                                                  label=req.label)}

    @app.get("/metrics", tags=["server"], response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text format."}})
    def metrics() -> Response:
        """Prometheus text format: jobs by state, GPUs, rounds, decision time, preemptions."""
        return Response(content=prometheus_text(controller), media_type="text/plain; version=0.0.4")

    for extend in extensions:
        extend(app, controller, info)
    return app
