"""The ``slurm`` executor: Tesserae's decisions carried out by a Slurm partition (an ``Executor``).

- **The view.** The partition's nodes from ``scontrol show node``, polled every second on a thread
  of the executor's own (``nodes``): a node Slurm drains, marks down, failed or not responding
  leaves the view, and its runs are stopped (SIGTERM, SIGKILL after the grace period; on a node
  that does not answer, revoked at once) and end *lost*: their jobs are requeued and resume from
  their checkpoints.
- **Runs.** A run is one Slurm batch job per node it spans (``runs``), submitted by ``sbatch`` to
  the partition, pinned to its node (``--nodelist``) and to exactly the GPUs the placement chose
  (``--gres=gpu:a100_2:1,gpu:a100_5:1``: one GRES type per GPU), named after the state folder and
  the run (a restarted server finds it), ``--no-requeue`` (Slurm restarts nothing on its own),
  ``--time=UNLIMITED``. Its batch script is the part's launcher (``launcher``), root under
  Slurm, which starts the job's processes as the job's account with the job's environment.
  The environment ``sbatch`` itself runs with is fixed (``commands``): the job's never reaches a
  privileged process.
- **Stopping.** Preemption, migration and cancellation are ``scancel --batch --signal=TERM`` (the
  launcher forwards it to the job, which checkpoints), then, after the grace period,
  ``scancel --full --signal=KILL`` and ``scancel``. A job Slurm has not started yet cannot be
  signalled, so every stop also goes through the lease file (``lease``), and ``scancel --signal``
  only to parts the latest poll shows ``RUNNING``.
- **Ends.** A part ends on its launcher's exit record (looked for every 0.1 s), on Slurm's word
  that its job ended where ``slurmd`` answers (``squeue``, polled every 0.5 s while runs are live),
  or at the end of its fence (``lease``). The gang rule is the Ray executor's.
- **Fencing.** Every part holds a lease the server renews (``lease``): a part Slurm cannot stop
  (its ``slurmd`` died or was cut off) is revoked, and its job started elsewhere only once its
  launcher recorded that it stopped, or its lease is surely over. So no run continues after it
  was declared lost, whatever happens to ``slurmd``, ``slurmctld`` or the server.
- **Restarts.** The server records its renewals in the store; a restarted server takes over
  every run whose parts all still run (``adopt``), revokes the others before it renews anything,
  and closes them once they have surely stopped. Slurm's own restarts (``slurmctld``) change
  nothing for the jobs whose start it saved: they and their launchers go on; the polls and
  ``sbatch`` just fail meanwhile (a run that cannot be submitted is requeued). A job a crashed
  ``slurmctld`` forgot (it saves at most every 5 s) it kills on its node: that run is revoked and
  lost (``runs``), and its launcher never starts it again.
- **Checks at start** (``settings``): the ``slurm.conf`` settings that let Slurm start exactly what
  Tesserae decided, nothing else, and stop nothing on its own.

Beside it: ``submission`` (a part's files), ``poller``, ``takeover`` (a restarted server), ``lease``.
The state folder (and the job root) must be on a file system every node mounts at the same path,
and the server's Python with Tesserae installed at the same path on every node (docs/slurm.md).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tesserae.core.cluster import Cluster
from tesserae.core.errors import InputError
from tesserae.runtime.executor.gpus import Gpu
from tesserae.runtime.executor.protocol import Adopted, Launch, NodeState, ViewChange
from tesserae.runtime.job import env as job_env
from tesserae.runtime.ray.layout import View, plan_parts, view_change
from tesserae.runtime.slurm import lease, settings, submission, takeover
from tesserae.runtime.slurm.commands import FINAL, Slurm, SlurmError
from tesserae.runtime.slurm.nodes import Roster, SlurmNode
from tesserae.runtime.slurm.poller import PartitionPoller, Snapshot
from tesserae.runtime.slurm.runs import Layouts, Part, SlurmRun, name_prefix, read_exit

#: The store's record of the last renewal written (for a restarted server), and how often it is kept.
LEASE_META, RECORD_EVERY = "slurm_lease", 1.0
#: How often a live part's exit record is looked for (s): a run's end is seen this fast.
RECORD_LOOK = 0.1
#: A part still pending in Slurm this long is reported (once) with Slurm's reason.
PENDING_NOTE = 10.0

class SlurmExecutor:
    """See the module docstring. The controller thread is its only caller, but for ``gpus``, ``nodes``, ``info``."""

    name = "slurm"

    def __init__(self, partition: str, *, grace_seconds: float = 30.0, lease_seconds: float = lease.DEFAULT_LEASE,
                 log: Callable[[str], None] | None = None, pass_env: tuple[str, ...] = (),
                 master_ports: tuple[int, int] | None = None, python: str = sys.executable,
                 slurm: Slurm | None = None) -> None:
        if lease_seconds <= 0:
            raise ValueError("a lease lasts more than 0 seconds")
        self.partition, self.grace, self.lease_seconds = partition, grace_seconds, lease_seconds
        self.log = log or (lambda msg: None)
        self.pass_env, self.master_ports, self.python = pass_env, master_ports, python
        self.slurm = slurm or Slurm()
        self.roster = Roster(partition)
        self.runs: dict[str, SlurmRun] = {}
        self.layouts: Layouts | None = None
        self.store: Any = None
        self.prefix = ""
        self.lease_path = ""
        self.cluster_name = ""
        #: part folder -> time.monotonic() when its revocation was written.
        self.revoked: dict[str, float] = {}
        #: Part folders asked to stop (gracefully), in the lease file until their run's end is recorded.
        self.stopping: set[str] = set()
        #: The longest lease a part may hold (an earlier server's may have been longer), and until when
        #: (time.monotonic()) the leases an earlier server granted may last.
        self.lease_max, self.inherited_end = lease_seconds, 0.0
        self._found: dict[str, tuple[SlurmRun, bool]] = {}  # run folder -> (run, adoptable): at open
        self._settled: dict[str, tuple[SlurmRun, bool]] = {}  # those of them closed at reconciliation
        self._poller = PartitionPoller(self.slurm, partition, self.log, renew=self._renew,
                                       busy=lambda: bool(self.runs))
        self._nodes_seen = -1.0
        self._lock = threading.Lock()
        self._last_sent = 0.0  # time.time() of the last renewal written
        self._recorded = 0.0

    # ------------------------------------------------------------------ the view
    @property
    def cluster(self) -> Cluster | None:
        return self.roster.view.cluster

    @property
    def gpus(self) -> list[Gpu]:
        return list(self.roster.view.gpus)

    def nodes(self) -> list[NodeState]:
        return self.roster.states()

    def watch(self, now: float) -> bool:
        """Every tick: take the latest node poll (nodes that left stop their runs); True when the view changed."""
        self._record_renewal()
        snap = self._poller.snap
        if snap.nodes is not None and snap.nodes_at > self._nodes_seen:
            self._nodes_seen = snap.nodes_at
            for node in self.roster.update(snap.nodes):
                self._node_left(node)
        changed, self.roster.changed = self.roster.changed, False
        return changed

    def view_change(self) -> ViewChange | None:
        return view_change(self.roster.view, self.roster.view_change())

    def commit_view(self, change: ViewChange) -> None:
        assert isinstance(change.detail, View)
        self.roster.view = change.detail
        gid = change.detail.gid_of()
        for run in self.runs.values():
            keys = [k for p in run.parts for k in p.plan.keys]
            if all(k in gid for k in keys):
                run.gpus = tuple(gid[k] for k in keys)

    # ------------------------------------------------------------------ runs
    def spawn(self, launch: Launch) -> SlurmRun:
        """Submit the run as one batch job per node (see the module docstring). A Slurm that does not answer
        makes the run lost (its job is requeued); one that refuses the job raises (the job fails)."""
        assert self.layouts is not None
        plans, world = plan_parts(self.roster.view, list(launch.gpus), launch.nproc)
        marker = str(launch.run_dir)
        name = f"{self.prefix}-r{launch.run_dir.name}-p"
        parts = [Part(p, str(launch.run_dir / f"part-{p.index}"), name=f"{name}{p.index}") for p in plans]
        run = SlurmRun(marker, parts, world, tuple(launch.gpus))
        self.layouts.save(run)  # write-ahead: a restarted server looks for these names
        self.runs[marker] = run
        account_env = None if launch.account is None else launch.account.env()
        base = job_env.base_env(pass_env=self.pass_env, account=account_env)
        total = len(launch.gpus)
        for part in parts:
            options = submission.write_part(launch, run, part, base, total, python=self.python,
                                            partition=self.partition, lease_path=self.lease_path,
                                            master_ports=self.master_ports, roster=self.roster)
            try:
                part.slurm_id = self.slurm.submit(options, str(Path(part.part_dir) / "batch.sh"))
            except SlurmError as e:
                self._not_submitted(run, part, str(e))
                break
            part.submitted = time.monotonic()
            self.layouts.save(run)
        return run

    def _not_submitted(self, run: SlurmRun, part: Part, why: str) -> None:
        """sbatch failed for ``part``: the parts already submitted are cancelled; lost (requeued) when Slurm did
        not answer, else a failure of the job (Slurm refused it)."""
        with contextlib.suppress(SlurmError):
            self.slurm.cancel(run.live_ids(), signal="KILL", full=True)
        self._revoke([p for p in run.parts if p.slurm_id is not None])
        if any(t in why for t in submission.TRANSIENT):
            self.log(f"slurm: cannot submit part {part.plan.index} of {run.marker} ({why}); the run is requeued")
            run.lost_why = why
            for p in run.parts:
                if p.slurm_id is None:
                    p.end(None, time.time(), True)
            return
        self.runs.pop(run.marker, None)
        raise ValueError(f"Slurm refused the run: {why}")

    def exited(self, run: SlurmRun) -> bool:
        return self._evaluate(run, time.monotonic())

    def exit_code(self, run: SlurmRun | None, run_dir: Path) -> tuple[int | None, float | None]:
        """(code, time) of an ended run; at reconciliation (``run`` None) once every part surely stopped."""
        if run is not None and run.result is not None:
            return run.result
        found = self._found.pop(str(run_dir), None)
        if found is None:
            return None, None
        self._settled[str(run_dir)] = found
        return self._settle(found[0])

    def terminate(self, run: SlurmRun) -> None:
        """SIGTERM to every part's launcher, which forwards it to the job: through the lease file (at once, and
        read by a launcher Slurm has not started yet), and ``scancel --batch`` to the parts Slurm runs."""
        run.stopping = True
        live = [p for p in run.parts if not p.ended]
        with self._lock:
            self.stopping.update(p.part_dir for p in live)
            self._write_lease()
        try:
            self.slurm.cancel(self._poller.snap.running(live), signal="TERM", batch=True)
        except SlurmError as e:
            self.log(f"slurm: cannot signal {run.marker}: {e} (its lease file carries the stop; SIGKILL follows "
                     "after the grace period)")

    def kill(self, run: SlurmRun) -> None:
        """SIGKILL every part through Slurm and revoke them (a part Slurm cannot reach stops on its own)."""
        run.killed = True
        self._revoke([p for p in run.parts if not p.ended])

    def adopt(self, pid: int | None, ticks: int | None, marker: str, gpus: tuple[int, ...]) -> Adopted[SlurmRun] | None:
        """The run of ``marker`` if all of it still runs, on nodes of the view (judged at ``open``: those that
        cannot go on were revoked there, before this server renewed any lease)."""
        found = self._found.get(marker)
        if found is None or not found[1]:
            return None
        run = found[0]
        del self._found[marker]
        gid = self.roster.view.gid_of()
        run.gpus = tuple(gid[k] for p in run.parts for k in p.plan.keys)
        run.adopted = True
        self.runs[marker] = run
        return Adopted(run, run.gpus)

    # ------------------------------------------------------------------ liveness evidence
    def leftovers(self, marker: str, *, exit_recorded: bool) -> list[int]:
        """Slurm jobs of the run still running where Slurm can stop them (a part on a node that does not answer
        is fenced by its lease instead). None for a run whose every part ended on evidence."""
        run = self.runs.get(marker) or self._known(marker)
        if run is None or run.result is not None or all(p.ended for p in run.parts):
            return []  # every part ended on evidence: nothing of it runs (Slurm may still be cleaning up)
        try:
            jobs = self.slurm.jobs(self.partition)
        except SlurmError:
            return []
        names = {p.name for p in run.parts}
        return sorted(j.job_id for j in jobs.values() if j.name in names and j.state in takeover.ACTIVE
                      and not self._silent(j.nodes))

    def kill_marker(self, marker: str) -> None:
        ids = self.leftovers(marker, exit_recorded=False)
        with contextlib.suppress(SlurmError):
            self.slurm.cancel(ids, signal="KILL", full=True)
            self.slurm.cancel(ids)

    def release(self, marker: str) -> None:
        """The run's end is recorded: forget its layout and its revocations (its parts have stopped)."""
        run = self.runs.pop(marker, None) or self._known(marker)
        self._settled.pop(marker, None)
        if self.layouts is not None:
            self.layouts.forget(marker)
        if run is not None:
            with self._lock:
                for p in run.parts:
                    self.revoked.pop(p.part_dir, None)
                    self.stopping.discard(p.part_dir)

    # ------------------------------------------------------------------ the server's life
    def prepare(self) -> None:
        """Check slurm.conf (``settings``) and take the partition's nodes: before anything is written."""
        if not self.slurm.installed():
            raise InputError("Slurm's client commands are not installed here (Debian: apt-get install slurm-client)",
                             field="executor")
        try:
            config = self.slurm.config()
            partitions = self.slurm.records("partition")
            records = self.slurm.records("node")
        except SlurmError as e:
            raise InputError(f"cannot reach Slurm: {e}", field="executor") from None
        self.cluster_name = config.get("ClusterName", "")
        self.roster.update(records)
        for warning in settings.check(config, partitions, list(self.roster.nodes.values()), self.partition):
            self.log(f"slurm: warning: {warning}")
        view = self.roster.view_change()
        if view is None or view.cluster is None:
            states = ", ".join(f"{n.name} {'+'.join(sorted(n.states))}" for n in self.roster.nodes.values())
            raise InputError(f"no node of partition {self.partition} can run jobs now ({states}); resume one "
                             "(scontrol update NodeName=... State=RESUME)", field="executor")
        self.roster.view, self.roster.changed = view, False

    def open(self, state_dir: Path, store: Any) -> None:
        """Take over what an earlier server of this state folder left (see ``adopt``), then start renewing."""
        self.store = store
        self.layouts = Layouts(store)
        self.prefix = name_prefix(str(state_dir))
        self.lease_path = str(state_dir / lease.LEASE_FILE)
        inherited = lease.inherited(store.meta(LEASE_META), self.lease_seconds, RECORD_EVERY)
        if inherited is not None:
            self.lease_max, self.inherited_end = inherited
        self._take_over()
        self._renew()
        self._poller.start()

    def close(self) -> str:
        self._poller.stop()
        live = sum(1 for r in self.runs.values() if r.result is None)
        if live:
            return (f"stopped ({live} run(s) keep running under Slurm for their lease, {self.lease_seconds:g} s; a "
                    "server started again within it adopts them, otherwise they stop and resume from their "
                    "checkpoints)")
        return "stopped"

    def info(self) -> dict[str, Any]:
        return {"gpu_source": "slurm", "slurm_partition": self.partition, "slurm_lease_seconds": self.lease_seconds}

    def describe_location(self) -> str:
        return f"Slurm partition {self.partition}" + (f" of cluster {self.cluster_name}" if self.cluster_name else "")

    def describe_tracking(self) -> str | None:
        return f"runs are Slurm jobs; leases of {self.lease_seconds:g} s"

    @property
    def fence_seconds(self) -> float:
        """How long a part that shows no end after SIGKILL may still run somewhere: its lease, then MARGIN."""
        return self.lease_max + lease.MARGIN

    # ------------------------------------------------------------------ evaluation (controller thread)
    def _evaluate(self, run: SlurmRun, now: float) -> bool:
        """Advance the run's parts on the evidence there is (see ``runs``); True once all of it has ended."""
        if run.result is not None:
            return True
        snap = self._poller.snap
        for p in run.parts:
            if not p.ended:
                self._judge(run, p, snap, now)
        if all(p.ended for p in run.parts):
            run.conclude()
            return True
        bad = [p for p in run.parts if p.ended and (p.lost or p.code != 0)]
        if (bad or run.lost_why) and run.teardown_deadline is None:
            run.teardown_deadline = now + self.grace
            if bad:
                p = bad[0]
                what = "was lost" if p.lost else f"ended with code {p.code}"
                self.log(f"slurm: part {p.plan.index} of {run.marker} (node {p.plan.node_id}) {what}; stopping the "
                         "rest of the run")
            if not run.stopping:
                self.terminate(run)
        elif run.teardown_deadline is not None and now >= run.teardown_deadline and not run.killed:
            self.kill(run)
        return False

    def _judge(self, run: SlurmRun, p: Part, snap: Snapshot, now: float) -> None:
        fresh = p.slurm_id is not None and snap.jobs_at > p.submitted
        st = snap.jobs.get(p.slurm_id) if fresh and p.slurm_id is not None else None
        forgotten = fresh and p.forgotten_by(st, snap.jobs_at, now)
        inactive = forgotten or (st is not None and st.state in FINAL)
        # The exit record comes before Slurm's word (the launcher writes it, then exits): look for it at most
        # every RECORD_LOOK seconds, at once when Slurm says the job ended.
        if inactive or now - p.looked >= RECORD_LOOK:
            p.looked = now
            rec = read_exit(p.part_dir)
            if rec is not None:
                code, t, orphaned, why = rec
                if orphaned and why:
                    self.log(f"slurm: part {p.plan.index} of {run.marker} on {p.plan.node_id} stopped itself: {why}")
                p.end(None if orphaned else code, t, orphaned)
                return
        if p.revoked_at is not None and now >= self._fence_end(p):
            self.log(f"slurm: part {p.plan.index} of {run.marker} on {p.plan.node_id}: revoked "
                     f"{self.fence_seconds:g} s ago, its lease is surely over; written off")
            p.end(None, None, True)
            return
        if not inactive:
            if st is not None and st.state == "PENDING" and not p.pending_noted and now - p.submitted > PENDING_NOTE:
                p.pending_noted = True
                self.log(f"slurm: part {p.plan.index} of {run.marker} still waits in Slurm ({st.reason}); another job "
                         "may hold its GPUs (the partition must be Tesserae's alone)")
            return
        node = self.roster.nodes.get(p.plan.node_id)
        if st is not None and not forgotten and st.state != "NODE_FAIL" and node is not None and not node.silent:
            # Slurm ended it where slurmd answers: COMPLETED is the launcher's exit 0, whose record this
            # server does not see yet (a shared file system's cache); otherwise the launcher was killed.
            completed = st.state == "COMPLETED"
            p.end(0 if completed else None, time.time(), not completed)
        elif p.revoked_at is None:
            why = (f"Slurm {'shows it pending again' if st else 'has no such job'}: a restarted slurmctld forgot "
                   "it" if forgotten else f"Slurm says {st.state if st else 'nothing'} on {p.plan.node_id}, which "
                   "does not answer")
            self.log(f"slurm: part {p.plan.index} of {run.marker} (job {p.slurm_id}): {why}; revoked, it ends on its "
                     "record or its lease")
            self._revoke([p])

    def _node_left(self, node: SlurmNode) -> None:
        """``node`` cannot run jobs any more: its runs end lost (stopped, or revoked where slurmd does not answer)."""
        for run in list(self.runs.values()):
            mine = [p for p in run.parts if p.plan.node_id == node.name and not p.ended]
            if not mine or run.result is not None:
                continue
            how = "+".join(sorted(node.states)) or "gone"
            run.lost_why = f"node {node.name} left the partition's view ({how})"
            self.log(f"slurm: {run.marker}: {run.lost_why}; the run is stopped and its job requeued")
            if node.silent or node.name not in self.roster.nodes:
                self._revoke(mine)
            if not run.stopping:
                self.terminate(run)
            if run.teardown_deadline is None:
                run.teardown_deadline = time.monotonic() + self.grace

    def _revoke(self, parts: Iterable[Part]) -> None:
        """Revoke ``parts`` in the lease file (at once) and SIGKILL their Slurm jobs where Slurm can."""
        parts = [p for p in parts if p.revoked_at is None]
        if not parts:
            return
        with self._lock:
            for p in parts:
                self.revoked[p.part_dir] = 0.0
            self._write_lease()
            at = time.monotonic()
            for p in parts:
                self.revoked[p.part_dir] = p.revoked_at = at
        for marker in {r.marker for r in self.runs.values() for p in r.parts if p in parts}:
            if self.layouts is not None:
                self.layouts.save(self.runs[marker])
        ids = [p.slurm_id for p in parts if p.slurm_id is not None]
        # SIGKILL to the jobs Slurm runs (a pending one it refuses: scancel retries 5 s later); all are cancelled.
        for which, signal in ((self._poller.snap.running(parts), "KILL"), (ids, None)):
            try:
                self.slurm.cancel(which, signal=signal, full=signal is not None)
            except SlurmError as e:
                self.log(f"slurm: cannot cancel {', '.join(map(str, which))}: {e} (their leases stop them)")

    def _fence_end(self, p: Part) -> float:
        assert p.revoked_at is not None
        return max(p.revoked_at + self.lease_max + lease.MARGIN, self.inherited_end)

    def _silent(self, nodes: str) -> bool:
        node = self.roster.nodes.get(nodes)
        return node is not None and node.silent

    def _known(self, marker: str) -> SlurmRun | None:
        """A run this server does not hold: one an earlier server left (judged at ``open``), or its record."""
        found = self._found.get(marker) or self._settled.get(marker)
        return found[0] if found else (self.layouts.load(marker) if self.layouts is not None else None)

    # ------------------------------------------------------------------ leases
    def _write_lease(self) -> None:
        """Write the lease file now (caller holds the lock): a renewal of every part not revoked."""
        sent = time.time()
        try:
            lease.write(self.lease_path, sent, self.lease_seconds, self.revoked, self.stopping)
        except OSError as e:
            self.log(f"slurm: cannot write the lease file {self.lease_path}: {e.strerror}; runs stop when their "
                     "leases run out")
            return
        self._last_sent = sent

    def _renew(self) -> None:
        with self._lock:
            self._write_lease()

    def _record_renewal(self) -> None:
        """Keep the store's record of the last renewal (at most ``RECORD_EVERY`` old) for the next server."""
        now = time.monotonic()
        if self.store is not None and now - self._recorded >= RECORD_EVERY and self._last_sent:
            self._recorded = now
            self.store.set_meta(LEASE_META, json.dumps({"sent": self._last_sent, "seconds": self.lease_seconds}))

    def _take_over(self) -> None:
        """Judge every run an earlier server recorded: adoptable when all its parts run on nodes of the view
        (and left no record); the others are revoked now, before this server renews any lease."""
        assert self.layouts is not None
        recorded = self.layouts.all()
        if not recorded:
            return
        try:
            jobs = self.slurm.jobs(self.partition)
        except SlurmError as e:
            jobs = None
            self.log(f"slurm: cannot list the partition's jobs ({e}); the runs of the last server are revoked")
        by_name = {j.name: j for j in (jobs or {}).values()}
        gid = self.roster.view.gid_of()
        for run, revoked in recorded:
            alive = takeover.still_running(run, revoked, jobs, by_name, self.roster, gid)
            self.revoked.update({p.part_dir: p.revoked_at for p in run.parts if p.revoked_at is not None})
            if not alive:
                self._revoke([p for p in run.parts if not p.ended])
                self.layouts.save(run)
            self._found[run.marker] = (run, alive)
        self.log(f"slurm: {sum(a for _, a in self._found.values())} run(s) of the last server still run; "
                 f"{sum(not a for _, a in self._found.values())} cannot go on and are stopped")

    def _settle(self, run: SlurmRun) -> tuple[int | None, float | None]:
        """At reconciliation: wait until every part of a run that is not adopted has surely stopped (its record,
        Slurm's word where slurmd answers, or its fence), then its exit (``takeover.settle``)."""
        deadline = max(self.inherited_end, max((self._fence_end(p) for p in run.parts if p.revoked_at is not None),
                                               default=0.0))
        return takeover.settle(run, lambda: self.slurm.jobs(self.partition), self._judge, deadline, self.log)
