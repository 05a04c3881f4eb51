"""Fixtures of the web tests: a real server with virtual GPUs, headless Chromium (Debian's, never a
downloaded one) driven by Playwright, and the folder the screenshots go to."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.server import Server, running_server

REPO = Path(__file__).resolve().parents[2]
#: Screenshots of every browser test (look at them); README's come from here.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("TESSERAE_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    exe = chromium_path()
    if exe is None:
        pytest.skip("Chromium is not installed (looked for $TESSERAE_CHROMIUM, chromium on PATH, /usr/bin/chromium); "
                    ".ci/run installs Debian's with 'apt-get install chromium'")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS)
        yield b
        b.close()


@pytest.fixture
def page_of(browser: Any) -> Iterator[Callable[[], Any]]:
    """New pages in fresh contexts (separate cookies), each failing the test on a script error."""
    contexts: list[Any] = []
    errors: list[str] = []

    def make() -> Any:
        ctx = browser.new_context(viewport={"width": 1320, "height": 860})
        contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(15000 * float(os.environ.get("TESSERAE_TEST_TIMEOUT_SCALE", "3")))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: d.accept())
        return page

    yield make
    for ctx in contexts:
        ctx.close()
    assert not errors, f"script errors on the page: {errors}"


@pytest.fixture(scope="module")
def web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A FIFO server with 4 virtual GPUs, one-second rounds."""
    state = tmp_path_factory.mktemp("web") / "state"
    with running_server(state, gpus=4, policy="fifo", round_seconds=1.0, grace=1.0) as s:
        yield s
