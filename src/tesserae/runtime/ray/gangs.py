"""Runs of the ``ray`` executor: each a gang of *parts*, one per node it spans.

A part is its plan (``ray.layout.PartPlan``: node, GPUs, ranks) and how it goes (pid, end); a run's
layout (its parts' plans and folders, its world size) is recorded in the store (table
``ray_runs``) before any part starts, so a restarted controller knows what to look for.

Starting (``start_gang``): the rank-0 node's agent finds a free port; each node's agent starts its
part through ``ray.launcher`` with ``CUDA_VISIBLE_DEVICES`` for that node's GPUs of the run,
``MASTER_ADDR`` (the rank-0 node's Ray IP), ``MASTER_PORT`` (from ``master_ports`` if set),
``NODE_RANK``/``NNODES`` (the launcher sets ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/
``LOCAL_WORLD_SIZE`` per process). Processes: ``--nproc`` split over the nodes in proportion to
the run's GPUs there (``ray.layout.split_processes``).

The gang rule (``GangBook.evaluate``): when one part fails or is lost, the rest get SIGTERM, then
SIGKILL after the grace period; a lost part makes the whole run lost (the job is requeued and
resumes from its checkpoint), otherwise the first failing part's code is the run's.

Fencing (``GangBook.sweep``): a part on a node that is gone or unreachable ends only on evidence
that nothing of it runs any more: its launcher's exit record on the shared state folder (written
after its processes were killed; read as soon as a poll of the node is late, so a crash is seen
in about a second), or else the end of its lease (``ray.lease``: by then its launcher has killed
it, or the agent has). Until then the run holds its GPUs and its job is not
started elsewhere, so a job never runs twice at once, partition or not. Logs are not
streamed: rank 0's part appends to the job's ``output.log``, the others write
``runs/RUN/part-K/output.log``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tesserae.runtime.executor.protocol import Launch
from tesserae.runtime.job import env as job_env
from tesserae.runtime.job import files as job_files
from tesserae.runtime.launch import procs
from tesserae.runtime.ray import launcher as ray_launcher
from tesserae.runtime.ray.agent import PART_VAR
from tesserae.runtime.ray.connect import first_line
from tesserae.runtime.ray.layout import PartPlan, View, aggregate_exit, plan_parts
from tesserae.runtime.ray.lease import LeaseBook
from tesserae.runtime.ray.nodes import CALL_TIMEOUT, NodeRoster
from tesserae.runtime.store.run_layouts import RunLayouts


@dataclass
class RunPart:
    """One part of a run as it goes: its plan (node, GPUs, ranks), its folder, and how it ended."""

    plan: PartPlan
    part_dir: str
    pid: int | None = None
    ticks: int | None = None
    ended: bool = False
    code: int | None = None
    time: float | None = None
    lost: bool = False

    def end(self, code: int | None, t: float | None, lost: bool) -> None:
        if not self.ended:
            self.ended, self.code, self.time, self.lost = True, code, t, lost

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "part_dir": self.part_dir}

    @staticmethod
    def from_json(d: dict[str, Any]) -> RunPart:
        return RunPart(PartPlan.from_json(d), str(d["part_dir"]))


@dataclass
class RayRun:
    """The controller's handle of a run (what ``Proc`` is for the local executor)."""

    marker: str
    parts: list[RunPart]
    world: int
    gpus: tuple[int, ...] = ()
    adopted: bool = False
    stopping: bool = False
    teardown_deadline: float | None = None
    killed: bool = False
    result: tuple[int | None, float | None] | None = None
    finished_at: float | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.parts[0].pid if self.parts else None

    @property
    def ticks(self) -> int | None:
        return self.parts[0].ticks if self.parts else None


def fence_local(part_dir: str) -> None:
    """Kill what is left of a part on this machine (all of it, when every 'node' shares one machine)."""
    procs.kill_pids(procs.pids_with_marker(part_dir, PART_VAR))


class GangBook:
    """The runs this executor holds (by marker, and by part folder), their recorded layouts, the gang rule."""

    def __init__(self, ray: Any, roster: NodeRoster, grace: float, log: Callable[[str], None],
                 leases: LeaseBook) -> None:
        self.ray, self.roster, self.grace, self.log, self.leases = ray, roster, grace, log, leases
        #: Where MASTER_PORT is taken from (``--master-ports``; None: any free port).
        self.master_ports: tuple[int, int] | None = None
        self.store: Any = None
        self.layouts: RunLayouts | None = None
        self.runs: dict[str, RayRun] = {}
        self._by_part: dict[str, tuple[RayRun, RunPart]] = {}

    def open(self, store: Any) -> None:
        self.store = store
        self.layouts = RunLayouts(store, "ray")

    # ------------------------------------------------------------------ records
    def record(self, run: RayRun) -> None:
        """Write the run's layout (before any part of it starts)."""
        assert self.layouts is not None  # runs start once the executor is open
        self.layouts.save(run.marker, json.dumps({"world": run.world, "parts": [p.to_json() for p in run.parts]}))

    def layout(self, marker: str) -> tuple[list[RunPart], int] | None:
        """The recorded parts and world size of the run ``marker`` (fresh: nothing started)."""
        text = None if self.layouts is None else self.layouts.load(marker)
        if text is None:
            return None
        doc = json.loads(text)
        return [RunPart.from_json(p) for p in doc["parts"]], int(doc["world"])

    def register(self, run: RayRun) -> None:
        self.runs[run.marker] = run
        for p in run.parts:
            self._by_part[p.part_dir] = (run, p)

    def finish(self, run: RayRun) -> None:
        """The run's end is read: forget it here and on its agents."""
        self.runs.pop(run.marker, None)
        by_node: dict[str, list[str]] = {}
        for p in run.parts:
            self._by_part.pop(p.part_dir, None)
            by_node.setdefault(p.plan.node_id, []).append(p.part_dir)
        for node_id, dirs in by_node.items():
            agent = self.roster.agents.get(node_id)
            if agent is not None:
                agent.forget.remote(dirs)

    # ------------------------------------------------------------------ what the agents said
    def busy_nodes(self) -> set[str]:
        """The nodes with a live part of a run not yet ended."""
        return {p.plan.node_id for run in self.runs.values() if run.result is None for p in run.parts if not p.ended}

    def held(self, node_id: str) -> list[str]:
        """The folders of the parts on ``node_id`` that have not ended: those whose leases this controller renews."""
        return [d for d, (_run, p) in self._by_part.items() if p.plan.node_id == node_id and not p.ended]

    def note(self, part_dir: str, st: dict[str, Any]) -> None:
        """An agent's word on a part (``NodeAgent.poll``)."""
        entry = self._by_part.get(part_dir)
        if entry is not None and not st["alive"]:
            entry[1].end(st.get("code"), st.get("time"), bool(st.get("orphaned")))

    def lose_node(self, node_id: str) -> int:
        """The node is gone: how many of its parts have not ended (``sweep`` ends them, on evidence)."""
        return sum(1 for _run, p in self._by_part.values() if p.plan.node_id == node_id and not p.ended)

    def sweep(self, now: float, late: Collection[str] = ()) -> set[str]:
        """End the parts on nodes that are gone or unreachable, on evidence (see the module docstring).
        On ``late`` nodes (a poll unanswered for longer than usual) an exit record already ends a part: a
        crashed node's launchers record theirs long before the node counts as unreachable. Returns the
        late nodes where a part was found stopped on its node (its launcher saw the agent go, or its lease
        end): nothing new should start there."""
        out_of_reach = self.roster.unreachable
        suspects: set[str] = set()
        for run, part in list(self._by_part.values()):
            node_id = part.plan.node_id
            if part.ended:
                continue
            suspect = node_id not in self.roster.agents or node_id in out_of_reach
            if not suspect and node_id not in late:
                continue
            rec = ray_launcher.read_exit(part.part_dir)
            if rec is not None:
                orphaned = bool(rec["orphaned"])
                part.end(None if orphaned else int(rec["code"]), float(rec["time"]), orphaned)  # type: ignore[arg-type]
                if orphaned and rec.get("why"):
                    self.log(f"ray: part {part.plan.index} of {run.marker} on node {node_id[:12]} was stopped on its "
                             f"node: {rec['why']}")
                if orphaned and not suspect:
                    suspects.add(node_id)
            elif suspect and now >= self.leases.expiry(node_id):
                part.end(None, None, True)
                self.log(f"ray: part {part.plan.index} of {run.marker} on node {node_id[:12]}: its lease is over "
                         "and its node has not answered; written off")
                fence_local(part.part_dir)
        return suspects

    def regid(self, view: View) -> None:
        """A new view is committed: the runs' global GPU ids in it."""
        gid = view.gid_of()
        for run in self.runs.values():
            if all(k in gid for p in run.parts for k in p.plan.keys):
                run.gpus = tuple(gid[k] for p in run.parts for k in p.plan.keys)

    # ------------------------------------------------------------------ the gang rule
    def evaluate(self, run: RayRun, now: float) -> bool:
        """True once every part has ended (``run.result`` is then the run's exit); tears the gang down
        when a part failed or was lost."""
        if run.result is not None:
            return True
        if all(p.ended for p in run.parts):
            run.result = aggregate_exit([(p.code, p.time, p.lost) for p in run.parts])
            run.finished_at = now
            return True
        bad = [p for p in run.parts if p.ended and (p.lost or p.code != 0)]
        if bad and run.teardown_deadline is None:
            run.teardown_deadline = now + self.grace
            p = bad[0]
            what = "was lost (its node or agent is gone)" if p.lost else f"ended with code {p.code}"
            self.log(f"ray: part {p.plan.index} of {run.marker} (node {p.plan.node_id[:12]}) {what}; stopping the rest "
                     "of the gang")
            if not run.stopping:
                self.signal(run, signal.SIGTERM)
        elif run.teardown_deadline is not None and now >= run.teardown_deadline and not run.killed:
            self.kill(run)
        return False

    def _by_node(self, run: RayRun) -> dict[str, list[str]]:
        """The parts of ``run`` not ended, by node, on the nodes that answer (calling others would only wait)."""
        out: dict[str, list[str]] = {}
        for p in run.parts:
            if not p.ended and p.plan.node_id not in self.roster.unreachable:
                out.setdefault(p.plan.node_id, []).append(p.part_dir)
        return out

    def signal(self, run: RayRun, signum: int) -> None:
        agents = self.roster.agents
        refs = [agents[n].signal.remote(dirs, int(signum)) for n, dirs in self._by_node(run).items() if n in agents]
        if refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=5.0)

    def kill(self, run: RayRun) -> None:
        """SIGKILL every part (its launcher's process group and every process with its part marker)."""
        run.killed = True
        agents = self.roster.agents
        refs = [agents[n].kill.remote(dirs) for n, dirs in self._by_node(run).items() if n in agents]
        if refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=5.0)
        for p in run.parts:
            fence_local(p.part_dir)


def start_gang(book: GangBook, launch: Launch, pass_env: tuple[str, ...]) -> RayRun:
    """Start ``launch`` as a gang of one part per node (see the module docstring).

    Raises OSError when a part cannot start at all (the job fails, as with the local executor); a
    part whose node or agent vanished meanwhile is lost instead (the job is requeued).
    """
    ray, agents, log = book.ray, book.roster.agents, book.log
    plans, world = plan_parts(book.roster.view, list(launch.gpus), launch.nproc)
    marker = str(launch.run_dir)
    parts = [RunPart(p, str(launch.run_dir / f"part-{p.index}")) for p in plans]
    run = RayRun(marker, parts, world, tuple(launch.gpus))
    book.record(run)
    book.register(run)
    launch.run_dir.mkdir(parents=True, exist_ok=True)
    rank0 = agents.get(parts[0].plan.node_id)
    port = None
    if rank0 is not None:
        try:
            port = ray.get(rank0.free_port.remote(book.master_ports), timeout=CALL_TIMEOUT)
        except Exception as e:
            log(f"ray: the agent on node {parts[0].plan.node_id[:12]} did not answer: {first_line(e)}")
        else:
            if port is None:
                lo, hi = book.master_ports or (0, 0)
                log(f"ray: no free port in {lo}-{hi} (--master-ports) on node {parts[0].plan.ip}; the run is "
                    "requeued")
    if port is None:
        for p in parts:
            p.end(None, None, True)
        return run
    master = parts[0].plan.ip  # the rank-0 node's Ray address, also for a one-node run
    refs: dict[int, Any] = {}
    for p in parts:
        agent = agents.get(p.plan.node_id)
        if agent is None:
            p.end(None, None, True)
            continue
        q = p.plan
        env = {**launch.env, **job_env.device_env(q.devices, master, port), "NODE_RANK": str(q.index),
               "NNODES": str(len(parts)), "TESSERAE_NODE_ID": q.node_id, "TESSERAE_NODE_IP": q.ip}
        out = str(launch.log_path) if q.index == 0 else str(Path(p.part_dir) / "output.log")
        refs[q.index] = agent.spawn.remote({"part_dir": p.part_dir, "log": out, "cwd": str(launch.cwd),
                                            "argv": launch.argv, "env": env, "pass_env": list(pass_env),
                                            "marker": marker, "nproc": q.nproc, "first_rank": q.first_rank,
                                            "world": world, "node_ip": q.ip,
                                            "renewal": book.leases.renewal(q.node_id)})
    if refs:
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=CALL_TIMEOUT)
    errors = []
    for index, ref in refs.items():
        p = parts[index]
        try:
            res = ray.get(ref, timeout=0)
        except Exception as e:  # the agent died, or did not answer in time: the part is written off
            log(f"ray: starting part {index} of {marker} on node {p.plan.node_id[:12]} failed: {first_line(e)}")
            p.end(None, None, True)
            with contextlib.suppress(Exception):
                agents[p.plan.node_id].kill.remote([p.part_dir])
            continue
        if "error" in res:
            errors.append(f"on node {p.plan.ip}: {res['error']}")
            p.end(127, time.time(), False)
        else:
            p.pid, p.ticks = res["pid"], res["ticks"]
    if errors:
        book.kill(run)
        book.finish(run)
        raise OSError(errors[0])
    if len(parts) > 1:
        spans = "; ".join(f"ranks {q.first_rank}-{q.first_rank + q.nproc - 1} on {q.ip} (node {q.node_id[:12]}, "
                          f"GPUs {','.join(q.devices)})" + ("" if q.index == 0 else f", log {p.part_dir}/output.log")
                          for p in parts for q in [p.plan])
        with contextlib.suppress(OSError):
            job_files.append_server_line(launch.log_path, f"run spans {len(parts)} nodes, world size {world}, "
                                                          f"master {master}:{port}: {spans}")
    return run
