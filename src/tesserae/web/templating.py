"""The Jinja2 environment of every page: autoescaping always on, and the formatting filters.

Autoescaping is what keeps job names, users and logs from ever being read as HTML; data for
scripts goes through ``tojson``, which escapes ``<``, ``>`` and ``&``.
"""

from __future__ import annotations

import math
import time
from functools import lru_cache

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from tesserae.web.assets import STATIC_URL, TEMPLATE_DIR, read_asset


def job_colour(job_id: int | None) -> str:
    """A stable, well-spread colour per job id (golden-angle hues)."""
    if job_id is None:
        return "hsl(0, 0%, 70%)"
    return f"hsl({(int(job_id) * 137.508) % 360:.0f}, 62%, 58%)"


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
    env.filters.update(colour=job_colour, duration=duration, clock=clock, number=number)
    env.globals.update(static=STATIC_URL, read_asset=read_asset)
    return env
