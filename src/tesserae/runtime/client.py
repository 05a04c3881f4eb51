"""HTTP client of the Tesserae API, used by the CLI (``tesserae submit/jobs/show/cancel/logs/cluster``).

The server address and token come from ``TESSERAE_URL`` and ``TESSERAE_TOKEN``, or else from a
TOML file (``TESSERAE_CONFIG``, default ``~/.config/tesserae/config.toml``)::

    url = "http://127.0.0.1:8765"
    token = "tsr_..."            # or: token_file = "/path/to/state/admin.token"

Any other key in the file is an error that names the file, the line and the key.

Every failure (no address, server down, HTTP 4xx/5xx) is a ``ClientError`` whose message is one
line: the CLI prints it and exits with status 2.

A submission carries an ``Idempotency-Key`` (a fresh UUID unless given) and is retried with the
same key when the connection fails or the answer is lost: the server returns the job the first
attempt created, so a submission the client did not hear back from is never stored twice.
"""

from __future__ import annotations

import os
import re
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from tesserae.core.errors import InputError

DEFAULT_CONFIG = Path("~/.config/tesserae/config.toml")


#: A read refused for the user's request rate waits at most this many times, this many seconds each.
MAX_RATE_WAITS, MAX_RATE_WAIT = 3, 10.0


class ClientError(InputError):
    """A request could not be made or the server refused it."""


@dataclass(frozen=True)
class ClientConfig:
    url: str
    token: str


class ConfigFile(BaseModel):
    """The keys the configuration file may hold; any other key is an error (a typo must not pass silently)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: str | None = None
    token: str | None = None
    token_file: str | None = None


def _read_config_file(path: Path) -> ConfigFile:
    try:
        text = path.read_text()
        doc = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ClientError(f"cannot read the client configuration: {e}", path=str(path)) from None
    try:
        return ConfigFile.model_validate(doc)
    except ValidationError as e:
        first = e.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else ""
        # tomllib keeps no positions: the line is the first that sets the key (or opens it as a table).
        pattern = re.compile(rf"^\s*\[?\s*[\"']?{re.escape(key)}[\"']?\s*[=\].]")
        line = next((n for n, ln in enumerate(text.splitlines(), 1) if pattern.match(ln)), None)
        if first["type"] == "extra_forbidden":
            raise ClientError(f"unknown key '{key}'; the keys are {', '.join(ConfigFile.model_fields)}",
                              path=str(path), line=line) from None
        raise ClientError(first["msg"], path=str(path), line=line, field=key) from None


def config_path() -> Path:
    return Path(os.environ.get("TESSERAE_CONFIG") or DEFAULT_CONFIG).expanduser()


def load_config() -> ClientConfig:
    url = os.environ.get("TESSERAE_URL", "").strip()
    token = os.environ.get("TESSERAE_TOKEN", "").strip()
    path = config_path()
    if (not url or not token) and path.is_file():
        doc = _read_config_file(path)
        url = url or (doc.url or "").strip()
        if not token and doc.token:
            token = doc.token.strip()
        elif not token and doc.token_file:
            token_file = Path(doc.token_file).expanduser()
            try:
                token = token_file.read_text().strip()
            except OSError as e:
                raise ClientError(f"cannot read the token file: {e.strerror}", path=str(token_file)) from None
    if not url:
        raise ClientError(f"no server address: set TESSERAE_URL (e.g. http://127.0.0.1:8765) or 'url' in {path}")
    if not token:
        raise ClientError("no token: set TESSERAE_TOKEN (the server writes the admin token to STATE/admin.token; "
                          f"'tesserae token create' makes more) or 'token' in {path}")
    if not url.startswith(("http://", "https://")):
        raise ClientError(f"TESSERAE_URL '{url}' must start with http:// or https://")
    return ClientConfig(url.rstrip("/"), token)


class Client:
    def __init__(self, config: ClientConfig | None = None, timeout: float = 30.0) -> None:
        self.config = config or load_config()
        self.http = httpx.Client(base_url=self.config.url, timeout=timeout,
                                 headers={"Authorization": f"Bearer {self.config.token}"})

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, path: str, *, retries: int = 0, waits: int = 0, **kwargs: Any) -> httpx.Response:
        """One request; with ``retries``, a failed connection or a lost answer is tried again (only for
        requests that are safe to repeat). A read refused for the user's request rate (429) is sent
        again after its ``Retry-After`` (at most MAX_RATE_WAITS times, MAX_RATE_WAIT seconds each)."""
        url = self.config.url
        for attempt in range(retries + 1):
            try:
                r = self.http.request(method, path, **kwargs)
                break
            except httpx.TransportError as e:
                if attempt < retries:
                    time.sleep(min(2.0, 0.25 * 2**attempt))
                    continue
                if isinstance(e, httpx.ConnectError):
                    raise ClientError(f"cannot reach the Tesserae server at {url} (is 'tesserae server' "
                                      "running?)") from None
                if isinstance(e, httpx.TimeoutException):
                    raise ClientError(f"the Tesserae server at {url} did not answer in time") from None
                raise ClientError(f"request to {url} failed: {e}") from None
        if r.status_code == 429 and method == "GET" and waits < MAX_RATE_WAITS:
            # The user's request budget (``runtime.api.budgets``): a read waits as the server says, briefly.
            delay = r.headers.get("Retry-After", "1")
            time.sleep(min(MAX_RATE_WAIT, float(delay) if delay.isdigit() else 1.0))
            return self.call(method, path, retries=retries, waits=waits + 1, **kwargs)
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = None
            text = detail if isinstance(detail, str) else (r.text.strip()[:200] or r.reason_phrase)
            raise ClientError(f"{text} (HTTP {r.status_code})")
        return r

    # ------------------------------------------------------------------ the API
    def submit(self, payload: dict[str, Any], idempotency_key: str | None = None, retries: int = 3) -> dict[str, Any]:
        """Submit a job once, whatever happens to the connection (see the module docstring)."""
        key = idempotency_key or str(uuid.uuid4())
        return self.call("POST", "/v1/jobs", json=payload, headers={"Idempotency-Key": key}, retries=retries).json()

    def jobs(self, state: str | None = None, limit: int = 1000, page: int = 10_000, **filters: Any
             ) -> list[dict[str, Any]]:
        """The most recent ``limit`` jobs, oldest first, filtered by ``state`` and the other query parameters
        of ``GET /v1/jobs`` (user, since, until) that are not None; asked ``page`` at a time, following
        each answer's ``next_cursor`` (a server that sends none answered in one page)."""
        params = {k: v for k, v in {"state": state, **filters}.items() if v is not None}
        pages: list[list[dict[str, Any]]] = []
        left, cursor = limit, None
        while left > 0:
            ask = {**params, "limit": min(page, left), **({} if cursor is None else {"cursor": cursor})}
            answer = self.call("GET", "/v1/jobs", params=ask).json()
            pages.append(answer["jobs"])
            left -= len(answer["jobs"])
            cursor = answer.get("next_cursor")
            if cursor is None or not answer["jobs"]:
                break
        return [job for chunk in reversed(pages) for job in chunk]

    def show(self, job_id: int) -> dict[str, Any]:
        return self.call("GET", f"/v1/jobs/{job_id}").json()

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self.job_action(job_id, "cancel")

    def job_action(self, job_id: int, action: str) -> dict[str, Any]:
        """``POST /v1/jobs/ID/ACTION``: cancel, hold, release or resubmit."""
        return self.call("POST", f"/v1/jobs/{job_id}/{action}").json()

    def bulk(self, action: str, selection: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/bulk/ACTION`` (cancel, hold, release) on the jobs ``selection`` names (ids and
        filters): what was done, per job."""
        return self.call("POST", f"/v1/bulk/{action}", json=selection).json()

    def update(self, job_id: int, changes: dict[str, Any]) -> dict[str, Any]:
        """``PATCH /v1/jobs/ID``: change a waiting job's time limit, GPUs, queue or dependencies."""
        return self.call("PATCH", f"/v1/jobs/{job_id}", json=changes).json()

    def logs(self, job_id: int, offset: int = 0, tail: int | None = None, **where: int | None
             ) -> tuple[bytes, int, str]:
        """Log bytes from ``offset`` (or the last ``tail`` lines), the next offset, the job's state;
        ``where``: ``node`` and ``run`` of a multi-node run."""
        params: dict[str, int] = {"offset": offset} if tail is None else {"tail": tail}
        params.update({k: v for k, v in where.items() if v is not None})
        r = self.call("GET", f"/v1/jobs/{job_id}/logs", params=params)
        return r.content, int(r.headers.get("X-Next-Offset", offset + len(r.content))), r.headers.get(
            "X-Job-State", "")

    def cluster(self) -> dict[str, Any]:
        return self.call("GET", "/v1/cluster").json()

    def nodes(self) -> list[dict[str, Any]]:
        return self.call("GET", "/v1/nodes").json()["nodes"]

    def node_action(self, name: str, action: str, reason: str = "") -> dict[str, Any]:
        """``POST /v1/nodes/NAME/drain`` (with ``reason``) or ``.../undrain`` (admin tokens)."""
        body = {"json": {"reason": reason}} if action == "drain" else {}
        return self.call("POST", f"/v1/nodes/{quote(name, safe='')}/{action}", **body).json()

    def create_token(self, user: str, admin: bool = False, label: str = "") -> str:
        return self.call("POST", "/v1/tokens", json={"user": user, "admin": admin, "label": label}).json()["token"]

    def whoami(self) -> dict[str, Any]:
        return self.call("GET", "/v1/whoami").json()
