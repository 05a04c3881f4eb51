"""The ``ray`` executor after a controller restart: what became of the runs an earlier controller started.

Agents are detached, so the runs they hold outlive the controller. From a run's recorded layout
(``GangBook.layout``) each part's state is asked of its node's agent (``NodeAgent.status``: also
parts it does not know, by their ``exit.json``); a part whose agent is gone is read from its exit
record alone (none: orphaned). A run is adopted only whole: every part alive and known to its
agent, every GPU of it in the current view. A run only partly alive (its node died, or the
controller died between starting two parts) cannot go on: the rest is killed, and it is closed and
requeued.
"""

from __future__ import annotations

from typing import Any

from tesserae.runtime import ray_launcher
from tesserae.runtime.executor import Adopted
from tesserae.runtime.ray_connect import first_line
from tesserae.runtime.ray_gangs import GangBook, RayRun, RunPart
from tesserae.runtime.ray_layout import aggregate_exit
from tesserae.runtime.ray_nodes import CALL_TIMEOUT


def statuses(book: GangBook, parts: list[RunPart]) -> list[dict[str, Any]]:
    """Each part's state from its node's agent (or from its exit record when the agent is gone)."""
    by_node: dict[str, list[str]] = {}
    for p in parts:
        by_node.setdefault(p.plan.node_id, []).append(p.part_dir)
    answers: dict[str, dict[str, Any]] = {}
    for node_id, dirs in by_node.items():
        agent = book.roster.agents.get(node_id)
        if agent is None:
            continue
        try:
            answers.update(book.ray.get(agent.status.remote(dirs), timeout=CALL_TIMEOUT))
        except Exception as e:
            book.log(f"ray: the agent on node {node_id[:12]} did not answer: {first_line(e)}")
    out = []
    for p in parts:
        st = answers.get(p.part_dir)
        if st is None:
            rec = ray_launcher.read_exit(p.part_dir)
            st = {"known": False, "alive": False, **(rec or {"code": None, "time": None, "orphaned": True})}
        out.append(st)
    return out


def recorded_exit(book: GangBook, marker: str) -> tuple[int | None, float | None]:
    """(code, time) of a run no one holds, from its parts' states; ``(None, None)``: alive, or lost."""
    layout = book.layout(marker)
    if layout is None:
        return None, None
    ends = []
    for st in statuses(book, layout[0]):
        if st.get("alive"):
            return None, None
        ends.append((st.get("code"), st.get("time"), bool(st.get("orphaned")) or st.get("code") is None))
    return aggregate_exit(ends)


def adopt(book: GangBook, pid: int | None, ticks: int | None, marker: str) -> Adopted[RayRun] | None:
    """The run of ``marker`` if every part of it is alive on its node, with its GPU ids in the current view
    (not the recorded ones: the view may have changed); None after killing what is left of a partial one."""
    layout = book.layout(marker)
    if layout is None:
        return None  # the layout is written before any part starts: nothing of it ever ran
    parts, world = layout
    states = statuses(book, parts)
    if all(st.get("alive") and st.get("known") for st in states):
        gid = book.roster.view.gid_of()
        gpus = tuple(gid[k] for p in parts for k in p.plan.keys if k in gid)
        run = RayRun(marker, parts, world, gpus, adopted=True)
        if len(run.gpus) == sum(len(p.plan.keys) for p in parts):
            parts[0].pid, parts[0].ticks = pid, ticks
            book.register(run)
            return Adopted(run, run.gpus)
    alive = [p for p, st in zip(parts, states, strict=True) if st.get("alive")]
    if alive:
        book.log(f"ray: run {marker} is only partly alive ({len(alive)} of {len(parts)} parts); killing the rest")
        book.kill(RayRun(marker, alive, 0))
    return None
