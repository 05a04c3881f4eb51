"""Why each waiting job waits, and where it stands in the queue: what ``jobs``, ``show``, ``cluster`` and
the API show for a queued or preempted job.

A waiting job's reason is the first rule of ``RULES`` that has one (a lifecycle control: held, a
dependency, a retry's backoff; then its tenant queue's quota at the latest decision, on a server
with queues: "queue at its borrowing limit"), else what the resources say: "waiting for 4 GPUs
(2 free)", "behind 3 jobs" (in queue 1 under Tiresias), or "next to start". Its position counts
only the jobs that may be scheduled (1 = first), in the policy's order at the latest decision;
jobs that arrived since come after, oldest first. A new kind of reason is a rule appended to
``RULES``: a function of the job's row and the ``Queue`` that returns a sentence or None. This is
the only source of a job view's ``pending_reason``.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tesserae.runtime.controller import lifecycle, node_fences
from tesserae.runtime.store import allocations, jobs
from tesserae.runtime.store import nodes as drained_nodes
from tesserae.scheduler_queues import REASONS, WAIT_GPUS
from tesserae.scheduling.base import QueueInspect

if TYPE_CHECKING:
    from tesserae.runtime.controller.loop import Controller


@dataclass
class Queue:
    """What the rules see: the time, every job's state, the free GPUs, the policy's order."""

    now: float
    states: dict[int, str]
    total_gpus: int
    free_gpus: int
    order: list[int] = field(default_factory=list)
    levels: dict[int, int] = field(default_factory=dict)
    #: Free GPUs of each type (for a job that asks for a type).
    free_by_type: dict[str, int] = field(default_factory=dict)
    #: Why the tenant queues held each waiting job back at the latest decision (``tenancy``), by id.
    tenant_reasons: dict[int, str] = field(default_factory=dict)
    #: Each node of the view, by name and by id (for a job pinned to one: ``--node``).
    nodes: dict[str, NodeRoom] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A node as a pinned job sees it: its name, free GPUs (open, not in use) and whether it is drained."""

    name: str
    free: int
    drained: bool


Rule = Callable[[Any, Queue], "str | None"]


def lifecycle_rule(row: Any, queue: Queue) -> str | None:
    return lifecycle.blocked(row, queue.states, queue.now)


def tenant_queue_rule(row: Any, queue: Queue) -> str | None:
    return queue.tenant_reasons.get(int(row["id"]))


def node_rule(row: Any, queue: Queue) -> str | None:
    """A job pinned to a node (``--node``) that is gone, drained or too full for it."""
    name = row["node"] if "node" in row.keys() else None  # noqa: SIM118 (a sqlite3.Row's `in`: values)
    if not name:
        return None
    room = queue.nodes.get(str(name))
    if room is None:
        return f"pinned to node {name}, which is not in the cluster now"
    if room.drained:
        return f"pinned to node {room.name}, which is drained"
    need = int(row["num_gpus"])
    if need > room.free:
        return f"pinned to node {room.name}: waiting for {need} GPU{'s' if need > 1 else ''} there ({room.free} free)"
    return None


#: Reasons that keep a job out of the decision, tried in order (the first sentence wins).
RULES: list[Rule] = [lifecycle_rule, tenant_queue_rule, node_rule]


def tenant_reasons(controller: Controller, waiting: list[Any]) -> dict[int, str]:
    """The tenant queues' reason for each waiting job at the latest decision, where it is about the
    queue (its share, its borrowing limit, a production job past the guarantee). Plain lack of free
    GPUs is left to the resource reason, which says how many."""
    tenancy = controller.tenancy
    if tenancy is None:
        return {}
    out = {}
    for row in waiting:
        job_id = int(row["id"])
        reason = tenancy.pending_reason(controller.scheduler, controller.table, job_id)
        if reason and reason != REASONS[WAIT_GPUS]:
            out[job_id] = reason
    return out


@dataclass(frozen=True, slots=True)
class Pending:
    position: int | None
    reason: str


def policy_order(controller: Controller) -> tuple[list[int], dict[int, int]]:
    """Job ids in the policy's order at the latest decision, and each one's queue level where the policy
    has queues (``QueueInspect``: Tiresias' levels).

    Table rows are stable (row i is the i-th job ever submitted), so rows of an older decision
    still name the same jobs while the controller thread moves on.
    """
    table, order = controller.table, controller.scheduler.last_order
    if table is None or len(order) == 0:
        return [], {}
    rows = np.asarray(order, dtype=np.int64)
    rows = rows[rows < table.n]
    ids = [int(x) for x in table.job_id[rows]]
    policy = controller.scheduler.policy
    if not isinstance(policy, QueueInspect):
        return ids, {}
    try:
        return ids, {j: int(q) for j, q in zip(ids, policy.queue_of(rows), strict=True)}
    except (IndexError, ValueError):  # the policy's state moved on meanwhile (a new table)
        return ids, {}


def snapshot(controller: Controller, now: float | None = None) -> tuple[Queue, list[Any]]:
    """The queue as the rules see it, and the waiting jobs' rows. Only the waiting jobs are read, and the
    states of the jobs they depend on: never the whole table (issue 27, point 6)."""
    store = controller.store
    waiting = jobs.waiting(store)
    states = jobs.states_of(store, [dep for row in waiting if row["after"] != "[]"
                                    for dep, _ in lifecycle.dependencies(row)])
    used = set(allocations.gpus_in_use(store))
    cluster = controller.cluster
    total = cluster.num_gpus
    closed = node_fences.closed_gpus(store, controller.executor, cluster)
    # a free GPU of a drained node, or an unhealthy one, is not free for a waiting job
    shut = {g for g in np.flatnonzero(closed).tolist() if g not in used}
    free_by_type = dict(cluster.gpus_by_type)
    gpus = controller.executor.gpus
    for g in used | shut:
        if 0 <= g < len(gpus) and gpus[g].gpu_type in free_by_type:
            free_by_type[gpus[g].gpu_type] -= 1
    drained = drained_nodes.drained(store)
    nodes: dict[str, NodeRoom] = {}
    for node in controller.executor.nodes():
        room = NodeRoom(node.name, sum(1 for g in node.gpus if g not in used and g not in shut),
                        node.name in drained or node.id in drained)
        nodes.setdefault(node.id, room)
        nodes[node.name] = room
    order, levels = policy_order(controller)
    return Queue(time.time() if now is None else now, states, total, max(0, total - len(used) - len(shut)), order,
                 levels, free_by_type, tenant_reasons(controller, waiting), nodes), waiting


def describe(controller: Controller, now: float | None = None) -> dict[int, Pending]:
    """Every waiting job's position (None when a rule holds it back) and reason, by job id."""
    return reasons(*snapshot(controller, now))


@dataclass(frozen=True)
class Board:
    """The waiting jobs as the API shows them, worked out once for many requests (``Cache``)."""

    #: Changes when the decision or the jobs changed: the ETag of what is derived from it.
    version: str
    now: float
    #: Each waiting job's place and reason, by id.
    places: dict[int, Pending]
    #: The waiting rows in the policy's order at the latest decision (jobs that arrived since last,
    #: oldest first), and the ids the policy ordered, and their queue levels (Tiresias).
    rows: list[Any]
    ordered: frozenset[int]
    levels: dict[int, int]

    @functools.cached_property
    def by_place(self) -> list[Any]:
        """The waiting rows by place: those that may start, first to last, then those a rule holds back
        (by id). Sorted once per board, however many requests page through it."""
        why = self.places
        return sorted(self.rows, key=lambda r: (why[int(r["id"])].position is None, why[int(r["id"])].position or 0,
                                               int(r["id"])))


class Cache:
    """The waiting jobs' places, shared by the requests that come close together (issue 27, point 6).

    Working out every waiting job's place reads all of them (30,000 rows take a second on a busy
    machine), and every job view of a waiting job needs it: before, each ``GET /v1/jobs/{id}`` paid
    it, and the queue page read every waiting job twice. Now one ``Board`` serves until the next
    decision, the next change the controller is told of (``Controller.wake``: a submission, a
    cancellation, a hold, a run's end), or ``max_age`` seconds (a retry's backoff counts down),
    whichever comes first; a job that is not on it (submitted since) makes a new one.

    A board that took longer than ``sync_cost`` seconds to make is not made again in a request: the
    requests keep the previous one (a job submitted since has no place on it yet) while one thread
    makes the next, at most every ``SLOW_SPACING`` times what it took, so no request waits for it and
    it takes a tenth of a core at most. A small queue's board is made in the request, as before: its
    answers are never stale.
    """

    def __init__(self, max_age: float = 1.0, sync_cost: float = 0.05) -> None:
        self.max_age, self.sync_cost = max_age, sync_cost
        self._lock = threading.Lock()
        self._key: tuple[int, int] | None = None
        self._at = -math.inf
        self._board: Board | None = None
        self._cost = 0.0
        self._refreshing = False

    def get(self, controller: Controller, need: int | None = None) -> Board:
        """The board as of at most ``max_age`` seconds ago; a fresh one when the job ``need`` is not on it
        (unless boards are slow to make: see the class docstring)."""
        key = (controller.stats.rounds, controller.changes)
        with self._lock:  # one request works it out; the others wait for its answer
            board = self._board
            age = time.monotonic() - self._at
            if (board is not None and key == self._key and age < self.max_age
                    and (need is None or need in board.places)):
                return board
            if board is None or self._cost < self.sync_cost:
                return self._make(controller, key)
            # A slow board is made again at most every SLOW_SPACING times what it costs (a tenth of a core).
            if age >= self._cost * SLOW_SPACING and not self._refreshing:
                self._refreshing = True
                threading.Thread(target=self._refresh, args=(controller, key), name="tesserae-queue-board",
                                 daemon=True).start()
            return board

    def _make(self, controller: Controller, key: tuple[int, int]) -> Board:
        t0 = time.perf_counter()
        board = _board(controller, f"{controller.store.store_id[:8]}.{key[0]}.{key[1]}")
        self._board, self._key, self._at = board, key, time.monotonic()
        self._cost = time.perf_counter() - t0
        return board

    def _refresh(self, controller: Controller, key: tuple[int, int]) -> None:
        try:
            t0 = time.perf_counter()
            board = _board(controller, f"{controller.store.store_id[:8]}.{key[0]}.{key[1]}")
            with self._lock:
                self._board, self._key, self._at = board, key, time.monotonic()
                self._cost = time.perf_counter() - t0
        finally:
            with self._lock:
                self._refreshing = False


#: A board that is slow to make is made again at most every this many times what it took.
SLOW_SPACING = 10.0

_caches: weakref.WeakKeyDictionary[Any, Cache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def board(controller: Controller, need: int | None = None) -> Board:
    """The controller's ``Board`` (``Cache.get``): one cache per controller."""
    with _caches_lock:
        cache = _caches.get(controller)
        if cache is None:
            cache = _caches[controller] = Cache()
    return cache.get(controller, need)


def _board(controller: Controller, version: str) -> Board:
    queue, waiting = snapshot(controller)
    order, levels = queue.order, queue.levels
    position = {j: i for i, j in enumerate(order)}
    rows = sorted(waiting, key=lambda r: (int(r["id"]) not in position, position.get(int(r["id"]), 0), int(r["id"])))
    return Board(version, queue.now, reasons(queue, waiting), rows, frozenset(position), levels)


def queue_view(controller: Controller, user: str | None, limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """The first ``limit`` waiting jobs (all when None) in queue order (those a rule holds back last), and
    how many wait: what ``/v1/cluster`` shows. With ``user`` set (not an admin), other users' jobs come
    without their name."""
    current = board(controller)
    why = current.places
    rows = current.by_place[:limit]
    return [{"id": int(r["id"]), "user": r["user"], "name": r["name"] if user in (None, r["user"]) else None,
             "state": r["state"], "gpus": int(r["num_gpus"]), "position": why[int(r["id"])].position,
             "reason": why[int(r["id"])].reason,
             "waited_seconds": max(0.0, current.now - float(r["submit_time"]) - float(r["executed"]))}
            for r in rows], len(current.rows)


def reasons(queue: Queue, waiting: list[Any]) -> dict[int, Pending]:
    """The position and reason of each of the ``waiting`` rows."""
    out: dict[int, Pending] = {}
    eligible = []
    for row in waiting:
        reason = next((text for rule in RULES if (text := rule(row, queue)) is not None), None)
        if reason is None:
            eligible.append(row)
        else:
            out[int(row["id"])] = Pending(None, reason)
    rank = {j: i for i, j in enumerate(queue.order)}
    eligible.sort(key=lambda r: (int(r["id"]) not in rank, rank.get(int(r["id"]), 0), int(r["id"])))
    for ahead, row in enumerate(eligible):
        job_id, need = int(row["id"]), int(row["num_gpus"])
        kind = row["gpu_type"] if "gpu_type" in row.keys() else None  # noqa: SIM118 (a sqlite3.Row's `in`: values)
        free = queue.free_gpus if kind is None else queue.free_by_type.get(kind, 0)
        if need > free:
            what = f"{need}{'' if kind is None else ' ' + kind} GPU{'s' if need > 1 else ''}"
            reason = f"waiting for {what} ({free} free)"
        elif ahead:
            level = queue.levels.get(job_id)
            reason = f"behind {ahead} job{'s' if ahead > 1 else ''}" + ("" if level is None else f" in queue {level}")
        else:
            reason = "next to start (at the next decision)"
        out[job_id] = Pending(ahead + 1, reason)
    return out
