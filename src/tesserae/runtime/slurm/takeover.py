"""A restarted Slurm executor takes over what the last server of its state folder left: each run it
recorded goes on only if every part of it still runs where this server can see it; the others are
revoked before this server renews any lease (``executor.SlurmExecutor.open``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from tesserae.runtime.slurm.commands import JobState, SlurmError
from tesserae.runtime.slurm.nodes import Roster
from tesserae.runtime.slurm.poller import Snapshot
from tesserae.runtime.slurm.runs import Part, SlurmRun, read_exit

#: Slurm job states in which a part may still run.
ACTIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING", "SIGNALING",
                     "STAGE_OUT", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "STOPPED"})


def still_running(run: SlurmRun, revoked: Sequence[bool], jobs: dict[int, JobState] | None,
                  by_name: dict[str, JobState], roster: Roster, gid: Any) -> bool:
    """Whether ``run`` can go on: every part has its Slurm job active (found by id, else by name),
    left no exit record, was not revoked (``revoked``: as the last server recorded), and runs on a
    usable node of the view on GPUs it still has (``gid``). Parts that left a record end with it; parts
    the last server revoked are revoked from now on (``revoked_at``)."""
    alive = True
    for p, was_revoked in zip(run.parts, revoked, strict=True):
        job = (jobs or {}).get(p.slurm_id) if p.slurm_id is not None else by_name.get(p.name)
        if job is not None and p.slurm_id is None:
            p.slurm_id = job.job_id
        rec = read_exit(p.part_dir)
        if rec is not None:
            code, t, orphaned, _why = rec
            p.end(None if orphaned else code, t, orphaned)
        if was_revoked:
            p.revoked_at = time.monotonic()
        node = roster.nodes.get(p.plan.node_id)
        alive = alive and rec is None and not was_revoked and job is not None and job.state in ACTIVE \
            and node is not None and node.usable and all(k in gid for k in p.plan.keys)
    return alive


def settle(run: SlurmRun, jobs: Callable[[], dict[int, JobState]],
           judge: Callable[[SlurmRun, Part, Snapshot, float], None], deadline: float,
           log: Callable[[str], None]) -> tuple[int | None, float | None]:
    """Wait until every part of ``run`` (not adopted) has ended on the evidence ``judge`` reads from fresh polls
    of ``jobs``, or until ``deadline`` (``time.monotonic()``: its fence); then the run's exit."""
    said = False
    while True:
        now = time.monotonic()
        try:
            snap = Snapshot(now, jobs(), now, None)
        except SlurmError:
            snap = Snapshot()
        for p in run.parts:
            if not p.ended:
                judge(run, p, snap, now)
        if all(p.ended for p in run.parts) or now >= deadline:
            break
        if not said:
            said = True
            log(f"slurm: waiting up to {deadline - now:.0f} s for {run.marker} to stop (its record, or its lease)")
        time.sleep(0.25)
    for p in run.parts:
        p.end(None, None, True)
    return run.conclude()
