"""Shared by the benchmarks: machine description and writing one section of BENCHMARKS.md.

Each benchmark owns one section between markers, so benchmarks can be re-run independently
without clobbering each other's tables.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The test-support package (tests/support/: the harnesses a benchmark shares with the tests) imports as ``support``.
sys.path.insert(0, str(ROOT / "tests"))
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"
SHARED_DATA = ROOT.parent / "shared" / "data"
HEADER = """# Benchmarks

Every figure here was measured by the script named in its section, on the machine and date given
there. These machines are shared and noisy: compare ratios within one run, not absolute times
across runs.
"""


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} cores ({cpu}){mem}, Python {platform.python_version()}, {platform.system()}"


def today() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def merge_rows(store: Path, rows: list[dict], key, stamp: dict) -> list[dict]:  # type: ignore[no-untyped-def]
    """The rows saved in ``store`` (JSON) with those of ``rows`` replaced by them (matched by ``key(row)``),
    each fresh row stamped with ``stamp`` (date, command, ...): a partial rerun replaces only its own rows."""
    import json

    store.parent.mkdir(parents=True, exist_ok=True)
    saved = json.loads(store.read_text()) if store.exists() else []
    fresh = {key(r) for r in rows}
    return [r for r in saved if key(r) not in fresh] + [{**r, **stamp} for r in rows]


def update_section(name: str, body: str) -> None:
    """Replace (or append) the section ``name`` of BENCHMARKS.md."""
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else HEADER
    block = f"<!-- BEGIN {name} -->\n{body.rstrip()}\n<!-- END {name} -->"
    pattern = re.compile(rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    BENCHMARKS_MD.write_text(text)
