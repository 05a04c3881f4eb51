"""tesserae.heap: a process that keeps its freed memory holds it between rounds; one that does not, gives it back."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import sys
from tesserae.heap import keep_freed_memory
ok = keep_freed_memory() if sys.argv[1] == "keep" else None
import numpy as np
page = 4096
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
base = rss()
# A round's temporaries: blocks of 1 MiB (above glibc's first mmap threshold), written, then freed.
blocks = [np.ones(1 << 17) for _ in range(64)]
del blocks
print(ok, (rss() - base) >> 20)
"""


def _kept_mib(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True).stdout
    ok, mib = out.split()
    return ok, int(mib)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc are Linux's")
def test_freed_blocks_stay_mapped_only_when_asked() -> None:
    ok, kept = _kept_mib("keep")
    if ok != "True":
        pytest.skip("the C library is not glibc (no mallopt): its own policy stands")
    _, given_back = _kept_mib("default")
    assert kept >= 48, kept  # 64 MiB written and freed: still resident, ready for the next round
    assert given_back <= 16, given_back  # glibc's defaults trim / unmap it


def test_asking_twice_is_harmless() -> None:
    from tesserae.heap import keep_freed_memory

    assert keep_freed_memory() == keep_freed_memory()
