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

from dataclasses import dataclass, field

from tesserae.runtime.api.budgets import Buckets, retry_after

__all__ = ["Buckets", "LoginLimits", "retry_after"]

#: Login attempts per client address: a burst of this many, then one per CLIENT_EVERY seconds.
CLIENT_BURST, CLIENT_EVERY = 30, 1.0
#: Accepted logins per user: a burst of this many, then one per USER_EVERY seconds.
USER_BURST, USER_EVERY = 20, 10.0


@dataclass
class LoginLimits:
    """The dashboard's two login limits."""

    clients: Buckets = field(default_factory=lambda: Buckets(CLIENT_BURST, CLIENT_EVERY))
    users: Buckets = field(default_factory=lambda: Buckets(USER_BURST, USER_EVERY))
