"""Dashboard sessions: a login form trades a token for an HttpOnly session cookie.

The token stays on the server, in memory, next to a random session id; the browser holds only
that id (``HttpOnly``, ``SameSite=Strict``, ``Secure`` behind HTTPS), so the token is never in a
URL, a page or a script. Every request re-checks the token against the store, so a revoked token
ends its sessions at once. Each session has a CSRF secret that every form posts back.
Sessions end on logout, after ``IDLE_SECONDS`` without a request, or when the server restarts.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import Response

from tesserae.runtime.store import Principal, Store

COOKIE = "tesserae_session"
IDLE_SECONDS = 12 * 3600.0
MAX_SESSIONS = 10_000
#: Largest form body the dashboard reads (a token, a CSRF secret, a path).
MAX_FORM_BYTES = 16 * 1024


@dataclass
class Session:
    token: str
    csrf: str
    last_seen: float
    flash: list[str] = field(default_factory=list)


class Sessions:
    """Session id -> Session, in memory, oldest evicted beyond ``MAX_SESSIONS``."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS, max_sessions: int = MAX_SESSIONS) -> None:
        self.idle_seconds, self.max_sessions = idle_seconds, max_sessions
        self._lock = threading.Lock()
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def create(self, token: str) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._by_id[sid] = Session(token, secrets.token_urlsafe(24), time.monotonic())
            while len(self._by_id) > self.max_sessions:
                self._by_id.popitem(last=False)
        return sid

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            s = self._by_id.get(sid)
            if s is None:
                return None
            if now - s.last_seen > self.idle_seconds:
                del self._by_id[sid]
                return None
            s.last_seen = now
            self._by_id.move_to_end(sid)
            return s

    def drop(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)


@dataclass(frozen=True)
class Visitor:
    """A logged-in browser: its session and who its token says it is."""

    sid: str
    session: Session
    who: Principal


def visitor(request: Request, sessions: Sessions, store: Store) -> Visitor | None:
    sid = request.cookies.get(COOKIE)
    s = sessions.get(sid)
    if s is None or sid is None:
        return None
    who = store.authenticate(s.token)
    if who is None:  # revoked since the login
        sessions.drop(sid)
        return None
    return Visitor(sid, s, who)


def set_cookie(response: Response, request: Request, sid: str) -> None:
    response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                        path="/")


def clear_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/")


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body, bounded; the first value of each field."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}


def csrf_ok(v: Visitor, form: dict[str, str]) -> bool:
    return hmac.compare_digest(form.get("csrf", ""), v.session.csrf)


def safe_next(path: str | None) -> str:
    """Where to go after login: a dashboard path only (no other host, no scheme)."""
    if not path or not path.startswith("/ui/") or path.startswith("//") or "\\" in path or "\n" in path:
        return "/ui/cluster"
    return path
