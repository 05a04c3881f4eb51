"""The ``ray`` executor after a controller restart: what became of the runs an earlier controller started.

Agents are detached, so the runs they hold outlive the controller. From a run's recorded layout
(``GangBook.layout``) each part's state is asked of its node's agent (``NodeAgent.status``: also
parts it does not know, by their ``exit.json``; the question renews the leases of those it
holds); a part whose agent is gone or does not answer is read from its exit record alone. A run
is adopted only whole: every part alive and known to its agent, every GPU of it in the current
view. A run only partly alive (its node died, or the controller died between starting two parts)
cannot go on: the rest is killed, and it is closed and requeued.

A part that neither answers nor left an exit record may still run on a node cut off from here:
its run is closed only once the leases the earlier controller granted are surely over. That
controller recorded its renewals in the store (``record_renewals``, at most a second apart);
``inherit_renewals`` takes them over, and ``recorded_exit`` waits (reading the exit records
meanwhile) until they are over.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tesserae.runtime.executor.protocol import Adopted
from tesserae.runtime.ray import launcher as ray_launcher
from tesserae.runtime.ray.connect import first_line
from tesserae.runtime.ray.gangs import GangBook, RayRun, RunPart
from tesserae.runtime.ray.layout import aggregate_exit
from tesserae.runtime.ray.nodes import CALL_TIMEOUT

#: The store's record of the renewals this controller sent (``LeaseBook.record``), and how often it is written.
LEASE_META = "ray_lease"
RECORD_EVERY = 1.0


def record_renewals(book: GangBook, now: float) -> None:
    """Keep the store's record of the last renewal sent (at most ``RECORD_EVERY`` old) for the next controller."""
    record = book.leases.due_record(now, RECORD_EVERY) if book.store is not None else None
    if record is not None:
        book.store.set_meta(LEASE_META, json.dumps(record))


def inherit_renewals(book: GangBook) -> None:
    """Take over the record of the renewals an earlier controller of this state folder sent."""
    text = book.store.meta(LEASE_META)
    try:
        record = json.loads(text) if text else None
        if record is not None:
            record = {"sent": float(record["sent"]), "seconds": float(record["seconds"])}
    except (ValueError, KeyError, TypeError):
        record = None
    book.leases.inherit(record, RECORD_EVERY)


def statuses(book: GangBook, parts: list[RunPart]) -> list[dict[str, Any]]:
    """Each part's state from its node's agent (or from its exit record when the agent is gone, or does
    not answer: ``{"unknown": True}`` when it left none)."""
    by_node: dict[str, list[str]] = {}
    for p in parts:
        by_node.setdefault(p.plan.node_id, []).append(p.part_dir)
    answers: dict[str, dict[str, Any]] = {}
    for node_id, dirs in by_node.items():
        agent = book.roster.agents.get(node_id)
        if agent is None or node_id in book.roster.unreachable:
            continue
        try:
            answers.update(book.ray.get(agent.status.remote(dirs, book.leases.renewal(node_id)),
                                        timeout=min(CALL_TIMEOUT, book.leases.lease / 2)))
        except Exception as e:
            book.log(f"ray: the agent on node {node_id[:12]} did not answer: {first_line(e)}")
    out = []
    for p in parts:
        st = answers.get(p.part_dir)
        if st is None:
            rec = ray_launcher.read_exit(p.part_dir)
            st = ({"known": False, "alive": False, **rec} if rec is not None
                  else {"known": False, "alive": False, "unknown": True, "code": None, "time": None, "orphaned": True})
        out.append(st)
    return out


def recorded_exit(book: GangBook, marker: str) -> tuple[int | None, float | None]:
    """(code, time) of a run no one holds, from its parts' states; ``(None, None)``: alive, or lost.
    A part that neither answers nor left a record is waited for until its lease is surely over."""
    layout = book.layout(marker)
    if layout is None:
        return None, None
    parts = layout[0]
    states = statuses(book, parts)
    _await_fence(book, marker, parts, states)
    ends = []
    for st in states:
        if st.get("alive"):
            return None, None
        ends.append((st.get("code"), st.get("time"), bool(st.get("orphaned")) or st.get("code") is None))
    return aggregate_exit(ends)


def _await_fence(book: GangBook, marker: str, parts: list[RunPart], states: list[dict[str, Any]]) -> None:
    """Wait until every part with an unknown end has left an exit record or its lease is surely over
    (``states`` is updated with the records that show up)."""
    unknown = [i for i, st in enumerate(states) if st.get("unknown")]
    if not unknown:
        return
    until = max(book.leases.expiry(parts[i].plan.node_id) for i in unknown)
    if until > time.monotonic():
        book.log(f"ray: run {marker} has part(s) on node(s) that do not answer; it is closed once they stop by "
                 f"themselves (their exit records) or their lease is over (in {until - time.monotonic():.0f} s)")
    while unknown and time.monotonic() < until:
        for i in list(unknown):
            rec = ray_launcher.read_exit(parts[i].part_dir)
            if rec is not None:
                states[i] = {"known": False, "alive": False, **rec}
                unknown.remove(i)
        time.sleep(0.25)


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
