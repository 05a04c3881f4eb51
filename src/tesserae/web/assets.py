"""Where the dashboard's files live (templates, CSS, JS, vendored libraries), all package data.

Nothing is loaded from a CDN: the server mounts ``static/`` at ``/ui/static`` and a report inlines
the same files, so every page works on an air-gapped cluster.
"""

from __future__ import annotations

from pathlib import Path

WEB_DIR = Path(__file__).resolve().parent
STATIC_DIR = WEB_DIR / "static"
TEMPLATE_DIR = WEB_DIR / "templates"
STATIC_URL = "/ui/static"


def read_asset(name: str) -> str:
    """The text of a file under ``static/`` (to inline it into a self-contained page)."""
    path = (STATIC_DIR / name).resolve()
    if STATIC_DIR not in path.parents:
        raise ValueError(f"{name} is not a dashboard asset")
    return path.read_text(encoding="utf-8")
