"""Bounds on what the HTTP API accepts, and the shape of its errors.

Every string a request carries must be text a process can be given: no NUL (``execve`` and
environment entries end at it) and no lone surrogate (``"\\ud800"`` is valid JSON but not UTF-8, and
cannot be encoded for ``execve`` or stored and served back). Every integer is at most 2^53 (what a
JSON number holds exactly, and what SQLite stores), and every body at most ``--max-body-bytes``
(1 MiB by default). A violation is a 422 (413 for a body too large) whose JSON body matches the
``ErrorBody`` schema published in the OpenAPI document.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tesserae.runtime.job.files import MAX_INT

DEFAULT_MAX_BODY = 1 << 20
#: Longest window (seconds) a query over past time may ask for (usage, the cluster over time): a year.
MAX_WINDOW = 366 * 86400.0


def check_text(value: str) -> str:
    """Refuse NUL characters and lone surrogates."""
    if "\0" in value:
        raise ValueError("contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains a lone surrogate (text that is not valid Unicode)") from None
    return value


#: A string the server can pass to a process, store and serve back.
SafeStr = Annotated[str, AfterValidator(check_text)]
#: A positive integer the store and JSON hold exactly.
BoundedInt = Annotated[int, Field(ge=1, le=MAX_INT)]


class FieldError(BaseModel):
    field: str = Field(description="The offending field ('' for the body as a whole).")
    message: str = Field(description="One sentence: what is wrong with it.")


class ErrorBody(BaseModel):
    """Every error of the API: one sentence, and for 422 one entry per offending field."""

    detail: str = Field(description="What went wrong, in one sentence.")
    errors: list[FieldError] | None = Field(None, description="Validation errors, one per field (422 only).")


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "The body cannot be parsed (it is not UTF-8 text)."},
    401: {"model": ErrorBody, "description": "Missing, invalid or revoked token."},
    403: {"model": ErrorBody, "description": "Not allowed for this token."},
    404: {"model": ErrorBody, "description": "No such object."},
    413: {"model": ErrorBody, "description": "The request body is larger than the server accepts."},
    422: {"model": ErrorBody, "description": "The request is malformed; `errors` names each field."},
}


class SafeJSONResponse(JSONResponse):
    """JSON that is always valid UTF-8 (non-ASCII escaped), so no stored text can make a response fail."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


class BodyLimit:
    """ASGI middleware: refuse (413) a request body larger than ``limit`` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int = DEFAULT_MAX_BODY) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0 or declared > self.limit:
                    await self._refuse(scope, receive, send)
                    return
        chunks: list[Message] = []
        size = 0
        while True:  # read the whole (bounded) body first, then hand it on
            message = await receive()
            if message["type"] != "http.request":
                chunks.append(message)
                break
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            chunks.append(message)
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return chunks.pop(0) if chunks else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        msg = f"the request body is larger than this server accepts ({self.limit} bytes, --max-body-bytes)"
        await SafeJSONResponse({"detail": msg, "errors": [{"field": "", "message": msg}]}, status_code=413)(
            scope, receive, send)
