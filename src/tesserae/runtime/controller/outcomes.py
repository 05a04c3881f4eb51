"""How a run's end is read: the job's new state, the run's outcome, and the reason a person sees.

A run ends with an exit code (its launcher's record), with none (lost: its launcher was killed,
its node or agent died), or with a failure to start. What that means for the job depends on why
it was stopping, if it was: an asked-for stop (preempt, migrate) requeues it, a cancellation
cancels it, a time limit (``lifecycle``) fails it, and an unasked exit with the preemption code
requeues it a few times before it counts as a failure.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import Any

from tesserae.job import PREEMPTED_EXIT_CODE

#: A job that exits with the preemption code without being asked is requeued at most this often.
MAX_UNASKED_REQUEUES = 3


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"killed by signal {name}"
    if code == 127:
        return "exit code 127: the command was not found (see the log)"
    if code == 126:
        return "exit code 126: the command is not executable (see the log)"
    return f"exited with code {code}"


def classify(job: Mapping[str, Any], stop_reason: str | None, code: int | None,
             failure: str | None) -> tuple[str, str, str]:
    """(new job state, run outcome, reason) for a run of ``job`` (its stored row) that ended with ``code``."""
    why = stop_reason
    if failure is not None:
        return "failed", "failed", failure
    if code == 0:
        return "completed", "completed", ""
    if why == "cancel" or job["cancel_requested"]:
        return "cancelled", "cancelled", job["reason"] or "cancelled on request"
    if why == "timeout":
        return "failed", "timed-out", f"reached its time limit ({float(job['time_limit']):g} s of run time)"
    if why in ("preempt", "migrate"):
        return "preempted", "preempted" if why == "preempt" else "migrated", ""
    if code is None:
        return "preempted", "lost", "its process was lost (controller restart or kill); requeued, it " \
                                    "resumes from its checkpoint"
    if code == PREEMPTED_EXIT_CODE:
        if int(job["requeues"]) < MAX_UNASKED_REQUEUES:
            return "preempted", "requeued", (f"exited with the preemption code {code} without being asked "
                                             "to stop; requeued")
        return "failed", "failed", (f"exited with the preemption code {code} without being asked to stop, "
                                    f"{MAX_UNASKED_REQUEUES + 1} times")
    return "failed", "failed", describe_exit(code)
