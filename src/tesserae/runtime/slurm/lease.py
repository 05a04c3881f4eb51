"""The lease of the Slurm executor's runs: so that no run continues after the server declared it lost.

Slurm cannot stop a job on a node whose ``slurmd`` is dead or cut off: the job's ``slurmstepd``
and its processes go on, while ``slurmctld`` marks the job ``NODE_FAIL`` and forgets it. So every
part of a run holds a lease that only the server renews. The server writes one file on the shared
state folder, ``STATE/slurm-lease.json`` = ``{"sent": its time.time(), "seconds": LEASE, "revoked":
[part folders], "stop": [part folders]}``, at least every ``RENEW_EVERY`` seconds (and at once when it
revokes a part or asks one to stop).
Each part's launcher (``launcher``, root on its node) reads it every 0.25 s on a thread of its own
(a read that hangs, as on a cut-off NFS mount, renews nothing): its lease ends ``seconds`` after
the ``sent`` of the last file it read (``ray_lease.grant``: from the server's sending time, never
from the reading time). A part that finds itself revoked, or whose lease ran out, kills its
processes, records its end (``orphaned``) and exits.

On the server's side a part on a node Slurm cannot reach, or whose job Slurm ended without its
launcher's record, is revoked; it is written off, and its job started elsewhere, only on
evidence (its launcher's exit record) or once ``LEASE + MARGIN`` have passed since the
revocation was written: by then it has stopped, whether it read the revocation or nothing at all.
A restarted server counts from the last renewal its predecessor recorded in the store.

``stop`` carries the server's graceful stops (preemption, migration, cancellation) to the parts
Slurm cannot signal yet: ``scancel --signal`` reaches only a job Slurm runs; one still pending or
being configured is refused ("Job can not be altered now"), and ``scancel`` then sleeps 5 s and
retries. A launcher that finds its part in ``stop`` before it started the job's command starts
nothing and exits with the preemption code; after, it forwards SIGTERM to the command, as for
``scancel --signal``.

Standard library only: the launcher imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable

from tesserae.runtime.ray.lease import MARGIN, grant

__all__ = ["DEFAULT_LEASE", "LEASE_FILE", "MARGIN", "RENEW_EVERY", "Lease", "grant", "read", "write"]

LEASE_FILE = "slurm-lease.json"
#: How long a run goes on without word from the server (a restart of the server must be shorter).
DEFAULT_LEASE = 30.0
RENEW_EVERY = 0.5
_CAP = 1 << 22


def write(path: str, sent: float, seconds: float, revoked: Iterable[str], stop: Iterable[str] = ()) -> None:
    """Replace the lease file atomically (root's, 0600: only the server and the launchers read it)."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"sent": sent, "seconds": seconds, "revoked": sorted(revoked), "stop": sorted(stop)}, f)
    os.replace(tmp, path)


def read(path: str) -> tuple[float, float, frozenset[str], frozenset[str]] | None:
    """(sent, seconds, revoked part folders, part folders asked to stop) of the lease file, or None when it
    cannot be read."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        with open(path, "rb") as f:
            doc = json.loads(f.read(_CAP))
        return (float(doc["sent"]), float(doc["seconds"]), frozenset(str(p) for p in doc["revoked"]),
                frozenset(str(p) for p in doc.get("stop", ())))
    return None


class Lease:
    """A launcher's view of its part's lease: updated by each read, checked by the launcher's loop."""

    def __init__(self, path: str, part_dir: str) -> None:
        self.path, self.part_dir = path, part_dir
        self.until: float | None = None  # time.monotonic() at which the lease ends
        self.revoked = False
        #: The server asked this part to stop (gracefully: SIGTERM to the job, which checkpoints).
        self.stop_asked = False

    def refresh(self) -> bool:
        """Read the file once; False when it could not be read (the lease is then not extended)."""
        doc = read(self.path)
        if doc is None:
            return False
        sent, seconds, revoked, stop = doc
        if self.part_dir in revoked:
            self.revoked = True
        if self.part_dir in stop:
            self.stop_asked = True
        end = grant(sent, seconds)
        if end is not None and (self.until is None or end > self.until):
            self.until = end
        return True

    def why_stop(self, now: float) -> str | None:
        """Why the part must stop now (``now``: time.monotonic()), or None while it holds its lease."""
        if self.revoked:
            return "the server revoked this run (its node was written off, or the run was declared lost)"
        if self.until is None:
            return "this run holds no lease (the server's lease file is missing or stale)"
        if now > self.until:
            return "this run's lease ran out (no word from the server)"
        return None


def inherited(record: str | None, lease_seconds: float, record_every: float) -> tuple[float, float] | None:
    """What an earlier server of this state folder may have granted, from its last record of a renewal
    (``{"sent": time.time(), "seconds": its lease}``, kept at most ``record_every`` old): the longest
    lease a part may hold, and until when (``time.monotonic()``) those leases may last. None: no record."""
    try:
        data = json.loads(record) if record else None
        sent, seconds = float(data["sent"]), float(data["seconds"])  # type: ignore[index]
    except (ValueError, KeyError, TypeError):
        return None
    now_wall, now_mono = time.time(), time.monotonic()
    ends = min(now_wall, sent + record_every) + seconds
    return max(lease_seconds, seconds), now_mono + (ends - now_wall) + MARGIN
