"""Keep freed memory in the process instead of handing it back to the OS after every array.

A decision at 16,384 GPUs makes many short-lived NumPy temporaries of 100 KB to a few MB. glibc's
malloc serves blocks above its mmap threshold (128 KiB at start, raised dynamically) with fresh
``mmap`` pages and trims the heap's free top above its trim threshold, so the next round's
temporaries fault their pages in again: measured at 1,100-2,200 minor page faults per learned
refit (issue 25). Raising both thresholds once at start keeps those pages mapped for reuse; the
cost is that the process holds on to its peak heap (what it needed once, it will need again next
round). Values and results do not change, only where the bytes come from.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Free heap top kept before trimming (bytes).
TRIM_THRESHOLD = 1 << 30
#: Blocks below this come from the heap; 32 MiB is glibc's upper bound on 64-bit machines.
MMAP_THRESHOLD = 32 << 20

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds once per process; False where the C library is not glibc."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt, their own policy stands
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
