"""Headers every response of the server carries, whatever route (API, logs, dashboard, docs, static
files) or error made it.

``X-Content-Type-Options: nosniff``: a browser takes a response as the type it is declared, never as
what its bytes look like; a job's log (``text/plain``, the job's own bytes) is never run as a script
or rendered as a page.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS = ((b"x-content-type-options", b"nosniff"),)


class SecurityHeaders:
    """ASGI middleware: add ``HEADERS`` to every HTTP response that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in HEADERS if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
