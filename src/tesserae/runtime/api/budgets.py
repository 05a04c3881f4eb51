"""Per-user budgets on the API (issue 27, point 5): what one user may cost everyone else.

Before, nothing limited them: one user's ``GET /v1/jobs?limit=100000`` in a loop, or ten what-ifs
at once (17 s of server CPU), slowed the server for all. Now:

- **Request rates** on the expensive routes: each user has a token bucket per kind of route
  (``RATES``: a burst, then a steady rate; ``Buckets``); an empty bucket is a 429 with
  ``Retry-After`` before any work is done. The kinds: ``list`` (``GET /v1/jobs``, ``/v1/queue``,
  ``/v1/cluster``), ``accounting`` (``/v1/accounting``, ``/v1/usage``), ``what-if``. A user's
  tokens share one budget (the bucket is the user's, not the token's), so a user cannot multiply it.
  Admin tokens (the operator's) are not rate-limited.
- **One what-if at a time per user** (``WhatIfSlots``): a second while the first runs is a 429.
- **A refusal costs next to nothing**: once a token's user was refused, that token's next requests of
  the kind are refused by ``early_refusal`` before any routing, parsing or store look-up, for as long as
  the bucket stays empty, so a flooding user takes little from the others.

- **Admission limits** (``admit``): at most ``max_jobs_per_user`` active jobs (queued, preempted or
  running) per user (``--max-jobs-per-user``, Slurm's ``MaxSubmitJobs``) and at most
  ``max_queued_jobs`` waiting jobs on the server (``--max-queued-jobs``, after Slurm's
  ``MaxJobCount``); an array counts each task. A submission past either is a 429 naming the limit,
  checked in the transaction that stores the job (concurrent submissions cannot overshoot).
"""

# No ``from __future__ import annotations``: ``charged`` builds a dependency whose annotation FastAPI must
# see as an object, not a string.
import contextlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.security.utils import get_authorization_scheme_param

from tesserae.runtime.store import jobs
from tesserae.runtime.store.database import ACTIVE_STATES, RUNNABLE_STATES, Principal, Store, hash_token

#: The admission limits' defaults (``tesserae server --max-jobs-per-user/--max-queued-jobs``; 0 there: none).
DEFAULT_MAX_JOBS_PER_USER, DEFAULT_MAX_QUEUED_JOBS = 10_000, 100_000
#: Most buckets kept per kind (the least recently used go first): a client cannot grow memory.
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

    def peek(self, key: str, now: float | None = None) -> float:
        """What ``take`` would answer now, taking nothing: 0.0 when ``key`` has a token."""
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, at = self._buckets.get(key, (float(self.capacity), now))
        tokens = min(float(self.capacity), tokens + max(0.0, now - at) / self.every)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) * self.every


def retry_after(wait: float) -> str:
    """A ``Retry-After`` value (whole seconds, at least 1)."""
    return str(max(1, math.ceil(wait)))


#: Each kind of expensive route: (burst, seconds per request after it), per user. The dashboard's
#: pages poll every 2 s and ask one or two of these each: well inside.
RATES: dict[str, tuple[int, float]] = {
    "list": (40, 0.1),          # 40 at once, then 10 a second
    "accounting": (10, 0.5),    # 10 at once, then 2 a second
    "what-if": (3, 10.0),       # 3 at once, then one every 10 s
}


class WhatIfSlots:
    """At most one what-if per user at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: set[str] = set()

    @contextlib.contextmanager
    def slot(self, user: str) -> Iterator[None]:
        """Hold ``user``'s slot while the block runs; a 429 when it is taken."""
        with self._lock:
            if user in self._busy:
                raise HTTPException(429, f"a what-if of {user} is still running; one at a time per user",
                                    headers={"Retry-After": "2"})
            self._busy.add(user)
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(user)


@dataclass
class Budgets:
    """The server's per-user request budgets (``create_app`` keeps one in ``app.state.budgets``)."""

    rates: dict[str, tuple[int, float]] = field(default_factory=lambda: dict(RATES))
    what_ifs: WhatIfSlots = field(default_factory=WhatIfSlots)
    #: Most active jobs per user, most waiting jobs on the server (None: no limit).
    max_jobs_per_user: int | None = DEFAULT_MAX_JOBS_PER_USER
    max_queued_jobs: int | None = DEFAULT_MAX_QUEUED_JOBS
    _buckets: dict[str, Buckets] = field(default_factory=dict)
    #: Tokens (their SHA-256) whose user was refused, and that user: what ``early_refusal`` refuses by.
    _over: OrderedDict[str, str] = field(default_factory=OrderedDict)
    _over_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._buckets = {kind: Buckets(burst, every) for kind, (burst, every) in self.rates.items()}

    def charge(self, kind: str, user: str, token_digest: str | None = None) -> None:
        """Take one of ``user``'s requests of ``kind``; a 429 with ``Retry-After`` when none is left (and
        the token that asked, by its SHA-256 ``token_digest``, is remembered as ``user``'s: ``over_budget``)."""
        wait = self._buckets[kind].take(user)
        if wait > 0.0:
            if token_digest is not None:
                with self._over_lock:
                    self._over[token_digest] = user
                    self._over.move_to_end(token_digest)
                    while len(self._over) > MAX_KEYS:
                        self._over.popitem(last=False)
            raise HTTPException(429, self.refusal(kind, user, wait), headers={"Retry-After": retry_after(wait)})

    def refusal(self, kind: str, user: str, wait: float) -> str:
        """The 429's sentence for ``user``'s request of ``kind``, ``wait`` seconds before the next is allowed."""
        burst, every = self.rates[kind]
        return (f"too many '{kind}' requests from {user}: at most {burst} at once, then one every {every:g} s; "
                f"retry in {retry_after(wait)} s")

    def over_budget(self, kind: str, token_digest: str) -> tuple[str, float] | None:
        """(user, seconds to wait) when the token of SHA-256 ``token_digest`` was refused before and its
        user's bucket of ``kind`` is still empty (nothing is taken); None otherwise."""
        with self._over_lock:
            user = self._over.get(token_digest)
        if user is None:
            return None
        wait = self._buckets[kind].peek(user)
        return (user, wait) if wait > 0.0 else None

    def forget_tokens(self) -> None:
        """Forget which user each refused token was (a token was revoked: it must meet the 401 again)."""
        with self._over_lock:
            self._over.clear()


    def admit(self, store: Store, user: str, new: int) -> None:
        """Refuse (429 naming the limit) ``new`` more jobs of ``user`` past either admission limit. Call it
        inside the transaction that stores them."""
        if self.max_jobs_per_user is not None:
            have = jobs.count_in(store, ACTIVE_STATES, user)
            if have + new > self.max_jobs_per_user:
                raise HTTPException(429, f"{user} has {have} active jobs and this submission adds {new}: at most "
                                         f"{self.max_jobs_per_user} per user (the server's --max-jobs-per-user); "
                                         "wait for some to end or cancel some")
        if self.max_queued_jobs is not None:
            waiting = jobs.count_in(store, RUNNABLE_STATES)
            if waiting + new > self.max_queued_jobs:
                raise HTTPException(429, f"the server has {waiting} waiting jobs and this submission adds {new}: "
                                         f"at most {self.max_queued_jobs} (the server's --max-queued-jobs); "
                                         "retry later")


def charged(kind: str, who: Any) -> Any:
    """A route's principal (``who``: the ``auth`` dependency) that costs one of its user's ``kind`` requests."""

    def spend(principal: who, request: Request) -> Principal:  # type: ignore[valid-type]
        if not principal.admin:
            token = bearer_token(request.headers.get("authorization"))
            request.app.state.budgets.charge(kind, principal.user, None if token is None else hash_token(token))
        return principal  # type: ignore[no-any-return]

    spend.budget_kind = kind  # type: ignore[attr-defined]  # what ``early_refusal`` finds the route's kind by
    return Annotated[Principal, Depends(spend)]


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, read as ``HTTPBearer`` reads it (None: none)."""
    scheme, token = get_authorization_scheme_param(header)
    return token if scheme.lower() == "bearer" and token else None
