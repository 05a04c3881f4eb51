"""Leases of the ``ray`` executor's run parts: so that a job never runs twice when a node is cut off.

Every part of a run holds a lease that only the controller renews: each call the controller makes
to a node's agent (its polls, a start, the questions of a restarted controller) carries the
controller's clock at sending and the lease length, and extends the lease of the parts the
controller still holds on that node. The agent writes its parts' leases to a file on the node's
own disk (``LeaseFile``: ``/dev/shm`` where there is one, never the shared file system, which a
partition may hang), and each part's launcher reads it every 0.25 s: once its lease has run out
the launcher kills the part's processes, records the part as ended (``orphaned``) and exits. So a
node that cannot hear from the controller for longer than the lease (a partition, a stuck agent,
a controller gone for good) stops its parts by itself.

On the controller's side (``LeaseBook``) a part on a node it cannot reach is written off, and its
job started elsewhere, only once that lease is surely over: ``lease`` after the last renewal it
*sent* there, plus ``MARGIN``. A renewal is granted from the controller's sending time, not from its
arrival (``grant``): a call held up in a partition and delivered late cannot extend a lease beyond
what the controller counts on (up to the clock skew between the two machines, which ``MARGIN``
covers). A restarted controller counts from the last renewal its predecessor recorded.

Standard library only: the part launcher imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

#: The default lease (seconds): how long a node cut off from the controller keeps its parts running,
#: and so how long a controller may be away (a restart) before its jobs stop and resume from checkpoints.
DEFAULT_LEASE = 30.0
#: What the controller waits beyond a lease: clock skew between machines, a launcher's polling.
MARGIN = 2.0
#: How often an agent rewrites its lease file at most (a launcher reading it then sees a lease that
#: ends at most this much too early, never too late).
WRITE_EVERY = 0.5


def grant(sent_wall: float, lease: float, *, now_wall: float | None = None,
          now_mono: float | None = None) -> float | None:
    """The end (this machine's ``time.monotonic``) of a lease renewed by a call sent at ``sent_wall`` (the
    controller's ``time.time``); None when the call is older than a lease (no renewal)."""
    now_wall = time.time() if now_wall is None else now_wall
    now_mono = time.monotonic() if now_mono is None else now_mono
    age = max(0.0, now_wall - sent_wall)
    if age >= lease:
        return None
    return now_mono + lease - age


def lease_dir(node_id: str) -> Path:
    """The node-local folder of the lease files of one Ray node's agents."""
    base = Path("/dev/shm") if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else Path(
        tempfile.gettempdir())
    return base / f"tesserae-leases-{os.getuid()}" / node_id


class LeaseFile:
    """An agent's lease file: ``{part folder: end of its lease (time.monotonic)}``, replaced atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._written = 0.0

    def write(self, leases: dict[str, float], *, now: float | None = None, force: bool = False) -> None:
        now = time.monotonic() if now is None else now
        if not force and now - self._written < WRITE_EVERY:
            return
        self._written = now
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(leases, f)
        os.replace(tmp, self.path)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def held_until(path: str, part_dir: str) -> float | None:
    """The end of ``part_dir``'s lease in the lease file ``path``; None when it holds none (or no file)."""
    try:
        with open(path) as f:
            doc = json.load(f)
        return float(doc[part_dir])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class LeaseBook:
    """The controller's side: when it last sent each node a renewal, and when that lease is surely over."""

    def __init__(self, lease: float = DEFAULT_LEASE, margin: float = MARGIN) -> None:
        if lease <= 0:
            raise ValueError("a lease lasts more than 0 seconds")
        self.lease, self.margin = lease, margin
        self._sent: dict[str, float] = {}  # node id -> time.monotonic() of the last renewal sent there
        #: When every lease an earlier controller of the state folder granted is surely over (time.monotonic).
        self.inherited_end = 0.0
        #: The wall-clock time of the last renewal sent (what ``record`` keeps for the next controller).
        self.last_sent_wall = 0.0
        self._kept_at = self._kept_sent = 0.0

    def renewal(self, node_id: str) -> dict[str, float]:
        """A renewal to send to the agent of ``node_id`` now (recorded as sent)."""
        self._sent[node_id] = time.monotonic()
        self.last_sent_wall = time.time()
        return {"sent": self.last_sent_wall, "seconds": self.lease}

    def record(self) -> dict[str, float]:
        """What a restarted controller needs to know (``inherit``): the last renewal sent, and how long."""
        return {"sent": self.last_sent_wall, "seconds": self.lease}

    def due_record(self, now: float, every: float) -> dict[str, float] | None:
        """``record()`` when renewals were sent since the last one kept and that is ``every`` seconds old
        (``now``: ``time.monotonic``), else None."""
        if self.last_sent_wall <= self._kept_sent or now - self._kept_at < every:
            return None
        self._kept_at, self._kept_sent = now, self.last_sent_wall
        return self.record()

    def inherit(self, record: dict[str, float] | None, slack: float) -> None:
        """An earlier controller recorded ``record`` (None: nothing; count as if it renewed just now, with
        this lease); it may have sent renewals for up to ``slack`` seconds after recording it."""
        now_wall, now_mono = time.time(), time.monotonic()
        if record is None:
            ends = now_wall + self.lease
        else:
            ends = min(now_wall, float(record["sent"]) + slack) + float(record["seconds"])
        self.inherited_end = now_mono + (ends - now_wall) + self.margin

    def expiry(self, node_id: str) -> float:
        """When every lease held on ``node_id`` is surely over (``time.monotonic``)."""
        sent = self._sent.get(node_id)
        own = -1.0 if sent is None else sent + self.lease + self.margin
        return max(own, self.inherited_end)
