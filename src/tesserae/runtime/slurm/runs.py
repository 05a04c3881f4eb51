"""Runs of the Slurm executor: each a gang of *parts*, one Slurm batch job per node it spans.

A part is its plan (``ray_layout.PartPlan``: node, GPUs, ranks), its folder ``RUN_DIR/part-K`` and
its Slurm job: named ``tsrHASH-rRUN-pK`` (``HASH`` from the state folder), so that a restarted
server finds what an earlier one submitted even if it died before recording the job's id. A
run's layout (parts, names, Slurm ids, revocations) is in the store (table ``slurm_runs``),
written before anything is submitted and updated as ids come back (write-ahead, as every change
to a run).

How a part ends (``Part.end``): its launcher's exit record (``PART_DIR/exit.json``: the code, or
``orphaned`` when it stopped on a revocation or its lease; looked for every 0.1 s); or, without one, Slurm's word that
its job ended while its node answers (its launcher was killed with it: no code, the run is lost);
or the end of its fence (revoked ``LEASE + MARGIN`` ago: whatever it was, it has stopped). A job
Slurm says ``COMPLETED`` ended with its launcher's exit 0 even if its record is not seen yet.
``NODE_FAIL``, the end of a job on a node that does not answer, a job Slurm does not list, or one
it shows pending again after it ran (a ``slurmctld`` restarted without its last state save forgot
it, and kills it when its node registers) is no proof: the part is revoked and waited for. The
gang rule is the Ray executor's: a part that fails or is lost stops the rest (SIGTERM, SIGKILL
after the grace period); a lost part makes the run lost.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from tesserae.runtime.launch.supervise import EXIT_FILE
from tesserae.runtime.ray.gangs import RunPart
from tesserae.runtime.ray.layout import PartPlan, aggregate_exit
from tesserae.runtime.slurm.commands import JobState
from tesserae.runtime.slurm.launcher import LAUNCHED_FILE
from tesserae.runtime.store.run_layouts import RunLayouts


def name_prefix(state_dir: str) -> str:
    """The prefix of this state folder's Slurm job names (``tsr`` and 8 hex digits of its real path)."""
    return "tsr" + hashlib.sha1(os.path.realpath(state_dir).encode()).hexdigest()[:8]


def read_exit(part_dir: str) -> tuple[int, float, bool, str] | None:
    """(code, time, orphaned, why) of a part's exit record, or None when it left none (or nonsense)."""
    try:
        with open(os.path.join(part_dir, EXIT_FILE), "rb") as f:
            doc = json.loads(f.read(4096))
        return int(doc["code"]), float(doc["time"]), bool(doc.get("orphaned")), str(doc.get("why", ""))[:200]
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class Part(RunPart):
    """One part of a run as it goes (see the module docstring): a Ray part's plan, folder and end, and its
    Slurm job."""

    name: str = ""
    slurm_id: int | None = None
    submitted: float = 0.0  # time.monotonic() of its sbatch (a poll older than that knows nothing of it)
    revoked_at: float | None = None  # time.monotonic() when its revocation was written
    pending_noted: bool = False
    ran: bool = False  # a poll showed its job running
    launched_at: float | None = None  # time.monotonic() when its launcher's LAUNCHED_FILE was first seen
    forgot: bool = False  # slurmctld forgot its job: nothing Slurm says of it is proof any more
    looked: float = 0.0  # time.monotonic() when its exit record was last looked for

    def forgotten_by(self, st: JobState | None, polled_at: float, now: float) -> bool:
        """Whether Slurm's word of the part's job (``st``, from a poll started at ``polled_at``, after its submission)
        shows that slurmctld forgot it: no such job, or pending although it ran (a poll showed it running, or its
        launcher's file was seen before this poll started). slurmctld saves its state at most every 5 s: one
        restarted after a SIGKILL comes back without what changed since, kills such a job when its node
        registers, and may start it again. Once forgotten, always: its cancellation, say, does not stop a launcher
        whose slurmd has not heard of it yet."""
        if self.forgot or st is None:
            self.forgot = True
            return True
        self.ran = self.ran or st.state == "RUNNING"
        if st.state != "PENDING":
            return False
        if self.launched_at is None and os.path.exists(os.path.join(self.part_dir, LAUNCHED_FILE)):
            self.launched_at = now
        self.forgot = self.ran or (self.launched_at is not None and polled_at > self.launched_at)
        return self.forgot

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "name": self.name, "slurm_id": self.slurm_id,
                "revoked": self.revoked_at is not None}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Part:
        return Part(PartPlan.from_json(d), str(d["part_dir"]), name=str(d["name"]),
                    slurm_id=None if d.get("slurm_id") is None else int(d["slurm_id"]))


@dataclass
class SlurmRun:
    """The controller's handle of a run (what ``Proc`` is for the local executor)."""

    marker: str
    parts: list[Part]
    world: int
    gpus: tuple[int, ...] = ()
    adopted: bool = False
    stopping: bool = False
    killed: bool = False
    #: Why the executor itself ended the run (its node left the view): it is lost whatever its parts' codes.
    lost_why: str | None = None
    teardown_deadline: float | None = None
    result: tuple[int | None, float | None] | None = None
    finished: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int | None:
        """The first part's Slurm job id (recorded as the run's pid)."""
        return self.parts[0].slurm_id if self.parts else None

    @property
    def ticks(self) -> int | None:
        return None

    def live_ids(self) -> list[int]:
        return [p.slurm_id for p in self.parts if not p.ended and p.slurm_id is not None]

    def conclude(self) -> tuple[int | None, float | None]:
        """The run's exit once every part ended: the gang's (``aggregate_exit``), lost if the executor ended it."""
        code, t = aggregate_exit([(p.code, p.time, p.lost) for p in self.parts])
        if self.lost_why is not None:
            code = None
        self.result = (code, t)
        return self.result


class Layouts:
    """The ``slurm_runs`` table (``store.run_layouts``): each run's parts, written before any is submitted."""

    def __init__(self, store: Any) -> None:
        self.table = RunLayouts(store, "slurm")

    def save(self, run: SlurmRun) -> None:
        self.table.save(run.marker, json.dumps({"world": run.world, "parts": [p.to_json() for p in run.parts]}))

    def load(self, marker: str) -> SlurmRun | None:
        layout = self.table.load(marker)
        return None if layout is None else self._run(marker, layout)

    def all(self) -> list[tuple[SlurmRun, list[bool]]]:
        """Every recorded run, with which of its parts were revoked."""
        out = []
        for marker, layout in self.table.all():
            doc = json.loads(layout)
            out.append((self._run(marker, layout), [bool(p.get("revoked")) for p in doc["parts"]]))
        return out

    def forget(self, marker: str) -> None:
        self.table.forget(marker)

    @staticmethod
    def _run(marker: str, layout: str) -> SlurmRun:
        doc = json.loads(layout)
        return SlurmRun(marker, [Part.from_json(p) for p in doc["parts"]], int(doc["world"]))
