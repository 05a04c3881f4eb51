"""The Jinja2 environment of every page: autoescaping always on, and the formatting filters.

Autoescaping is what keeps job names, users and logs from ever being read as HTML; data for
scripts goes through ``tojson``, which escapes ``<``, ``>`` and ``&``.
"""

from __future__ import annotations

import colorsys
import math
import re
import time
from functools import lru_cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from tesserae.web.assets import STATIC_URL, TEMPLATE_DIR, read_asset


def _job_rgb(job_id: int | None) -> tuple[float, float, float]:
    """A stable, well-spread colour per job id (golden-angle hues), as RGB in [0, 1]."""
    if job_id is None:
        return colorsys.hls_to_rgb(0.0, 0.70, 0.0)
    return colorsys.hls_to_rgb(round((int(job_id) * 137.508) % 360) / 360.0, 0.58, 0.62)


def _hex(rgb: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(255 * c):02x}" for c in rgb)


def job_colour(job_id: int | None) -> str:
    """A job's colour on the grid, its timeline and its swatches."""
    return _hex(_job_rgb(job_id))


def luminance(colour: str) -> float:
    """WCAG 2 relative luminance of ``#rrggbb``."""
    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(int(colour[i:i + 2], 16) / 255.0) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def job_ink(job_id: int | None) -> str:
    """The text colour of a label on the job's colour: black or white, whichever contrasts more
    (at least 4.58:1 on any colour, above WCAG AA's 4.5:1)."""
    bg = job_colour(job_id)
    return "#000000" if contrast(bg, "#000000") >= contrast(bg, "#ffffff") else "#ffffff"


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = max(0.0, float(seconds))
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    if s < 3600:
        return f"{s // 60:.0f} min {s % 60:02.0f} s"
    if s < 86400:
        return f"{s // 3600:.0f} h {(s % 3600) // 60:02.0f} min"
    return f"{s // 86400:.0f} d {(s % 86400) // 3600:.0f} h"


def clock(ts: float | None) -> str:
    """Server-local wall time: the time of day when it is today, else the date too."""
    if ts is None:
        return "-"
    t = time.localtime(float(ts))
    if time.strftime("%Y-%m-%d", t) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", t)
    return time.strftime("%Y-%m-%d %H:%M", t)


#: A pending reason's trailing CLI hint, e.g. "held (tesserae release 7)": a page shows a button instead.
CLI_HINT = re.compile(r"\s*\(tesserae [a-z-]+(?: [^()]*)?\)\s*$")


def shown_state(job: dict[str, Any]) -> str:
    """The state a badge shows: ``held`` for a waiting job that is held (it will not start until
    released), else the job's state."""
    if job.get("held") and job.get("state") in ("queued", "preempted"):
        return "held"
    return str(job.get("state", "?"))


def without_cli_hint(reason: str | None) -> str | None:
    """A pending reason without its trailing ``(tesserae ...)`` hint, for pages that offer the action."""
    return None if reason is None else CLI_HINT.sub("", reason)


def number(v: float | int | None, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    if not math.isfinite(v):
        return "-"
    return f"{v:,.{digits}f}"


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATE_DIR)), autoescape=select_autoescape(default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(colour=job_colour, ink=job_ink, shown_state=shown_state, no_hint=without_cli_hint,
                       duration=duration, clock=clock, number=number)
    env.globals.update(static=STATIC_URL, read_asset=read_asset)
    return env
