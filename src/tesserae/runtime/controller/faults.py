"""Fault injection for crash tests: the controller SIGKILLs itself at named points.

``TESSERAE_FAULT`` holds comma-separated rules:

- ``POINT:N`` kills the controller at the N-th time it reaches POINT (``spawn:3``: right after its
  3rd spawn, before the pid is recorded);
- ``random:SEED:P`` kills it at any point with probability P each time one is reached (the chaos
  tests: a different SEED per restart gives a different kill).

Points, in the order a run lives through them:

=============== ===============================================================================
``decided``     a Plan was made, nothing of it applied yet
``start-intent`` a run is recorded as ``starting``; its process does not exist yet
``spawn``       its process exists; its pid is not recorded yet
``stop-intent`` a run is recorded as ``stopping``; no signal sent yet
``stop``        SIGTERM sent; the run has not exited yet
``exit-seen``   a run's end was seen (its exit code read); nothing recorded yet
``closed``      a run's end is recorded (job state, attained service, events)
=============== ===============================================================================

A real crash can happen anywhere; these points sit between each step of the write-ahead protocol
and its action, where a crash is the most likely to leave the store and the processes disagreeing.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable

POINTS = ("decided", "start-intent", "spawn", "stop-intent", "stop", "exit-seen", "closed")


class Faults:
    def __init__(self, text: str = "", log: Callable[[str], None] | None = None) -> None:
        self.at: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.rng: random.Random | None = None
        self.p = 0.0
        self.log = log or (lambda msg: None)
        for part in text.split(","):
            fields = [f.strip() for f in part.split(":")]
            if len(fields) == 3 and fields[0] == "random":
                self.rng, self.p = random.Random(fields[1]), float(fields[2])
            elif len(fields) == 2 and fields[0] and fields[1].isdigit():
                self.at[fields[0]] = int(fields[1])

    @classmethod
    def from_env(cls, log: Callable[[str], None] | None = None) -> Faults:
        return cls(os.environ.get("TESSERAE_FAULT", ""), log)

    def __bool__(self) -> bool:
        return bool(self.at) or self.rng is not None

    def hit(self, point: str) -> None:
        """SIGKILL this process if a rule says so for ``point``."""
        if not self:
            return
        n = self.counts[point] = self.counts.get(point, 0) + 1
        if self.at.get(point) == n or (self.rng is not None and self.rng.random() < self.p):
            self.log(f"fault injection: killing the controller at {point} #{n}")
            os.kill(os.getpid(), signal.SIGKILL)
