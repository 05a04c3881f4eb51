"""What the web front end's tests share: logging in (a form post, or in a real browser) and screenshots."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx

from support.server import REPO, Server

SHOTS = Path(os.environ.get("TESSERAE_SCREENSHOTS", REPO / "out" / "test-screenshots"))


def end_all_jobs(s: Server) -> None:
    """Cancel every job of the server that has not ended, and wait until each has (a shared server's
    next test starts on an idle cluster)."""
    for j in s.client().get("/v1/jobs").json()["jobs"]:
        if j["state"] in ("queued", "running", "preempted"):
            s.client().post(f"/v1/jobs/{j['id']}/cancel")
    for j in s.client().get("/v1/jobs").json()["jobs"]:
        s.wait_state(j["id"], ("completed", "failed", "cancelled"))


def shot(page: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def form_login(c: httpx.Client, token: str, next: str = "/ui/jobs") -> httpx.Response:
    """Log in as a browser does: the form first (its CSRF value and cookie), then the post (a new session,
    whatever session ``c`` had)."""
    c.cookies.delete("tesserae_session")
    form = c.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf, form.text
    return c.post("/ui/login", data={"token": token, "next": next, "csrf": csrf.group(1)})


def login(page: Any, url: str, token: str, path: str = "/ui/cluster") -> None:
    page.goto(url + path)
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"**{path}")
