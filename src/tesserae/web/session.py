"""Dashboard sessions: a login form trades a token for an HttpOnly session cookie.

The token stays on the server, in memory, next to a random session id; the browser holds only
that id (``HttpOnly``, ``SameSite=Strict``, ``Secure`` behind HTTPS), so the token is never in a
URL, a page or a script. Every request re-checks the token against the store, so a revoked token
ends its sessions at once. Each session has a CSRF secret that every form posts back; the login
form, which comes before any session, has its own (``login_csrf``: a random value in a cookie, and
its HMAC under a key of this server in the form), so another site cannot log a browser in.
Sessions end on logout, after ``IDLE_SECONDS`` without a request, or when the server restarts.

Sessions are counted per user (issue 27, point 4): a user has at most ``MAX_SESSIONS_PER_USER``
(their least recently used goes first), and when all users together reach ``MAX_SESSIONS`` the
idle ones go, then the least recently used of the user holding the most. One user logging in over
and over thus ends only their own sessions, never another user's.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import Response

from tesserae.runtime.store.database import Principal, Store

COOKIE = "tesserae_session"
IDLE_SECONDS = 12 * 3600.0
MAX_SESSIONS = 10_000
MAX_SESSIONS_PER_USER = 100
#: The login form's CSRF cookie (a random value; the form carries its HMAC).
LOGIN_COOKIE = "tesserae_login"
#: Largest form body the dashboard reads (a token, a CSRF secret, a path).
MAX_FORM_BYTES = 16 * 1024


@dataclass
class Session:
    token: str
    csrf: str
    last_seen: float
    user: str = ""
    flash: list[str] = field(default_factory=list)


class Sessions:
    """Session id -> Session, in memory, bounded per user and in all (see the module docstring)."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS, max_sessions: int = MAX_SESSIONS,
                 per_user: int = MAX_SESSIONS_PER_USER) -> None:
        self.idle_seconds, self.max_sessions, self.per_user = idle_seconds, max_sessions, per_user
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}
        #: Each user's session ids, least recently used first.
        self._by_user: dict[str, OrderedDict[str, None]] = {}

    def create(self, token: str, user: str) -> str:
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._by_id[sid] = Session(token, secrets.token_urlsafe(24), now, user)
            mine = self._by_user.setdefault(user, OrderedDict())
            mine[sid] = None
            while len(mine) > self.per_user:
                self._remove(next(iter(mine)))
            if len(self._by_id) > self.max_sessions:
                for old in [k for k, v in self._by_id.items() if now - v.last_seen > self.idle_seconds]:
                    self._remove(old)
            while len(self._by_id) > self.max_sessions:
                heaviest = max(self._by_user.values(), key=len)
                self._remove(next(iter(heaviest)))
        return sid

    def count(self, user: str) -> int:
        with self._lock:
            return len(self._by_user.get(user, ()))

    def _remove(self, sid: str) -> None:
        s = self._by_id.pop(sid, None)
        if s is None:
            return
        mine = self._by_user.get(s.user)
        if mine is not None:
            mine.pop(sid, None)
            if not mine:
                del self._by_user[s.user]

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            s = self._by_id.get(sid)
            if s is None:
                return None
            if now - s.last_seen > self.idle_seconds:
                self._remove(sid)
                return None
            s.last_seen = now
            self._by_user[s.user].move_to_end(sid)
            return s

    def drop(self, sid: str | None) -> None:
        with self._lock:
            self._remove(sid or "")


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


def login_nonce(request: Request) -> str:
    """The login form's cookie value: the browser's own if it has a well-formed one, else a new one."""
    have = request.cookies.get(LOGIN_COOKIE, "")
    return have if len(have) == 43 and have.replace("-", "").replace("_", "").isalnum() else secrets.token_urlsafe(32)


def login_csrf(key: bytes, nonce: str) -> str:
    """What the login form carries for the cookie value ``nonce``: its HMAC under this server's ``key``."""
    return hmac.new(key, nonce.encode(), hashlib.sha256).hexdigest()


def login_csrf_ok(key: bytes, request: Request, form: dict[str, str]) -> bool:
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    return bool(nonce) and hmac.compare_digest(form.get("csrf", ""), login_csrf(key, nonce))


def set_login_cookie(response: Response, request: Request, nonce: str) -> None:
    response.set_cookie(LOGIN_COOKIE, nonce, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                        path="/ui/login")


def safe_next(path: str | None) -> str:
    """Where to go after login: a dashboard path only (no other host, no scheme)."""
    if not path or not path.startswith("/ui/") or path.startswith("//") or "\\" in path or "\n" in path:
        return "/ui/cluster"
    return path
