"""The Slurm executor's poller: a thread of its own that renews the lease and asks Slurm for the
partition's jobs and nodes, so that the controller thread reads the latest answers without waiting
on ``squeue`` or ``scontrol`` (which hang while ``slurmctld`` restarts)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tesserae.runtime.slurm import lease
from tesserae.runtime.slurm.commands import JobState, Slurm, SlurmError
from tesserae.runtime.slurm.runs import Part

#: Poll intervals (s): the partition's jobs while runs are live, otherwise; its nodes.
JOBS_EVERY, IDLE_EVERY, NODES_EVERY = 0.5, 2.0, 1.0


@dataclass
class Snapshot:
    """The latest polls (``time.monotonic()`` of each poll's start: a poll knows of jobs submitted before it)."""

    jobs_at: float = -1.0
    jobs: dict[int, JobState] = field(default_factory=dict)
    nodes_at: float = -1.0
    nodes: list[dict[str, str]] | None = None

    def running(self, parts: Iterable[Part]) -> list[int]:
        """Slurm ids of the ``parts`` this poll (taken after their submission) shows ``RUNNING``: the ones
        ``scancel --signal`` reaches (a pending or configuring job is refused, and scancel retries 5 s later)."""
        return [p.slurm_id for p in parts if p.slurm_id is not None and self.jobs_at > p.submitted
                and (st := self.jobs.get(p.slurm_id)) is not None and st.state == "RUNNING"]


class PartitionPoller:
    """Renews the lease every ``lease.RENEW_EVERY`` s (``renew``), polls the partition's jobs (faster
    while ``busy``) and nodes; ``snap`` is the latest of each, replaced whole (never half-written)."""

    def __init__(self, slurm: Slurm, partition: str, log: Callable[[str], None], *, renew: Callable[[], None],
                 busy: Callable[[], bool]) -> None:
        self.slurm, self.partition, self.log = slurm, partition, log
        self._renew, self._busy = renew, busy
        self.snap = Snapshot()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._poll_error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tesserae-slurm-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _loop(self) -> None:
        next_renew = next_jobs = next_nodes = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_renew:
                next_renew = now + lease.RENEW_EVERY
                self._renew()
            if now >= next_jobs:
                next_jobs = now + (JOBS_EVERY if self._busy() else IDLE_EVERY)
                self._poll(lambda: self.slurm.jobs(self.partition), "jobs")
            if now >= next_nodes:
                next_nodes = now + NODES_EVERY
                self._poll(lambda: self.slurm.records("node"), "nodes")
            self._stop.wait(0.05)

    def _poll(self, fetch: Callable[[], Any], what: str) -> None:
        started = time.monotonic()
        try:
            got = fetch()
        except SlurmError as e:
            if self._poll_error is None:
                self.log(f"slurm: cannot poll the partition's {what}: {e} (still trying)")
            self._poll_error = str(e)
            return
        if self._poll_error is not None:
            self.log("slurm: polls answered again")
            self._poll_error = None
        snap = self.snap
        if what == "jobs":
            self.snap = Snapshot(started, got, snap.nodes_at, snap.nodes)
        else:
            self.snap = Snapshot(snap.jobs_at, snap.jobs, started, got)
