"""How often the dashboard's login form may be used (issue 27, point 4): per client and per user.

Before, nothing limited it: 291 bad logins a second from one client, and one user's 10,001 logins in
26 s pushed everyone else's sessions out. Now every login attempt takes a token from its client
address's bucket, and every accepted one from its user's bucket (token buckets: a burst, then a
steady rate); an empty bucket is a 429 with ``Retry-After``, before any session is made. The number
of buckets kept is bounded (the least recently used go first), so a client cannot grow memory by
trying many addresses or names.

Behind a proxy every client has the proxy's address: the per-client limit then applies to all of
them together (the proxy should limit per client itself).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

#: Login attempts per client address: a burst of this many, then one per CLIENT_EVERY seconds.
CLIENT_BURST, CLIENT_EVERY = 30, 1.0
#: Accepted logins per user: a burst of this many, then one per USER_EVERY seconds.
USER_BURST, USER_EVERY = 20, 10.0
#: Most buckets kept per kind.
MAX_KEYS = 10_000


class Buckets:
    """Token buckets by key: ``capacity`` tokens, one more every ``every`` seconds, at most ``max_keys`` keys."""

    def __init__(self, capacity: int, every: float, max_keys: int = MAX_KEYS) -> None:
        self.capacity, self.every, self.max_keys = capacity, every, max_keys
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def take(self, key: str, now: float | None = None) -> float:
        """Take a token for ``key``: 0.0 when there was one, else the seconds until there is."""
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, at = self._buckets.pop(key, (float(self.capacity), now))
            tokens = min(float(self.capacity), tokens + max(0.0, now - at) / self.every)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) * self.every
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            return wait


@dataclass
class LoginLimits:
    """The dashboard's two login limits."""

    clients: Buckets = field(default_factory=lambda: Buckets(CLIENT_BURST, CLIENT_EVERY))
    users: Buckets = field(default_factory=lambda: Buckets(USER_BURST, USER_EVERY))


def retry_after(wait: float) -> str:
    """A ``Retry-After`` value (whole seconds, at least 1)."""
    return str(max(1, math.ceil(wait)))
