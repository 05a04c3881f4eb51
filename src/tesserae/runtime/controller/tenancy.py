"""The server's tenant queues: where the config comes from, what a submission may name, the swap.

The queue config is given at start (``tesserae server --config FILE``) or replaced over the API
by an admin (``PUT /v1/queues``, ``tesserae queue set FILE``). Either way it is validated against
this cluster and every active job, then kept in the store (``meta.queue_config``), so a restarted
server without ``--config`` resumes with the queues it had; a ``--config`` given at start wins.
The new tree takes effect at the next decision (``rounds.Rounds.decide``, in the controller's thread, so a
decision never sees half a config). Without a config the server schedules one global queue and
submissions may not name a queue.

A submission names a leaf queue or none (then: the queue listing the user, a leaf named like the
user, or ``default_queue``). A user may submit to a queue when listed in its ``users`` or an
ancestor's, or when nobody is listed on its path; an admin to any. Mistakes are ``QueueRefused``
(the API answers 4xx naming the queue).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tesserae.config import RunSpec, queue_policy
from tesserae.core.errors import InputError
from tesserae.core.queues import PRIORITY_CLASSES, QueueConfig, QueueTree, build_tree, parse_config
from tesserae.queue_file import load_queue_tree, read_queue_config
from tesserae.runtime.store import jobs
from tesserae.scheduler import Scheduler
from tesserae.scheduler_queues import QueueStep
from tesserae.scheduling.base import SchedulingPolicy, queue_policy_names
from tesserae.scheduling.per_queue import check_queue_policy

META_KEY = "queue_config"


def check_config(path: Path, gpus_by_type: Mapping[str, int], policy: str) -> None:
    """Read and validate a ``--config`` file against the cluster (errors name file, line and key)."""
    check_queue_policy(policy)
    load_queue_tree(path, dict(gpus_by_type), policy_names=queue_policy_names())


def start_queues(store: Any, gpus_by_type: Mapping[str, int], run: RunSpec, config: Path | None
                 ) -> RuntimeQueues | None:
    """The server's tenant queues: from ``config`` (``--config``), else the store's copy, else none.

    Every active job must still have a queue under the config the server starts with.
    """
    if run.policy not in queue_policy_names():
        if config is not None:
            check_config(config, gpus_by_type, run.policy)  # names the policy that cannot
        return None
    tenancy = RuntimeQueues(store, gpus_by_type, run)
    tree = tenancy.load(config)
    if tree is not None:
        for job_id, queue, user in jobs.active_queues(store):
            try:
                tree.leaf_of(queue, user)
            except InputError as e:
                raise InputError(f"active job {job_id} (queue '{queue or '-'}', user '{user}') has no "
                                 f"queue under this config: {e.message}", path=str(config or "the store"),
                                 field="queues") from None
    return tenancy


class QueueRefused(Exception):
    """A submission or config the queues refuse; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status, self.field = status, field


class RuntimeQueues:
    """Holds the server's queue tree and installs it into the scheduler between decisions."""

    def __init__(self, store: Any, gpus_by_type: Mapping[str, int], run: RunSpec) -> None:
        self.store, self.policy, self.run = store, run.policy, run
        self.gpus_by_type = dict(gpus_by_type)
        self.tree: QueueTree | None = None
        self.config: QueueConfig | None = None
        self.source = ""
        self._pending: QueueTree | None = None
        self._base_policy: SchedulingPolicy | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ where the config comes from
    def load(self, path: Path | None) -> QueueTree | None:
        """At start: the ``--config`` file if given (and kept in the store), else the store's copy."""
        if path is not None:
            check_queue_policy(self.policy)
            config, lines = read_queue_config(path)
            tree = build_tree(config, gpus_by_type=self.gpus_by_type, path=str(path), locate=lines,
                              policy_names=queue_policy_names())
            self._keep(config, tree, f"{path}")
            return tree
        text = self.store.meta(META_KEY)
        if not text:
            return None
        check_queue_policy(self.policy)
        saved = json.loads(text)
        config = parse_config(saved.get("config"), path="the store's queue config (meta.queue_config)")
        tree = build_tree(config, gpus_by_type=self.gpus_by_type, path="the store's queue config",
                          policy_names=queue_policy_names())
        with self._lock:
            self.config, self.tree, self._pending, self.source = config, tree, tree, str(saved.get("source", "store"))
        return tree

    def replace(self, data: Any, by: str, active_jobs: list[tuple[int, str, str]]) -> QueueTree:
        """A new config from the API (admin): validated, checked against the active jobs, kept."""
        try:
            check_queue_policy(self.policy)
            config = parse_config(data, path="body")
            tree = build_tree(config, gpus_by_type=self.gpus_by_type, path="body", policy_names=queue_policy_names())
        except InputError as e:
            raise QueueRefused(422, e.field or "queues", str(e)) from None
        for job_id, queue, user in active_jobs:
            try:
                tree.leaf_of(queue, user)
            except InputError as e:
                raise QueueRefused(409, "queues", f"job {job_id} (queue '{queue or '-'}', user '{user}') would "
                                                  f"have no queue: {e.message}; keep its queue or cancel it "
                                                  "first") from None
        self._keep(config, tree, f"api ({by})")
        return tree

    def _keep(self, config: QueueConfig, tree: QueueTree, source: str) -> None:
        doc = {"source": source, "config": config.model_dump(mode="json", exclude_none=True)}
        self.store.set_meta(META_KEY, json.dumps(doc, sort_keys=True))
        with self._lock:
            self.config, self.tree, self._pending, self.source = config, tree, tree, source

    # ------------------------------------------------------------------ the swap (controller thread)
    def install(self, scheduler: Scheduler) -> None:
        """Put a new tree into the scheduler: its queue step, and per-queue policies where named."""
        with self._lock:
            tree, self._pending = self._pending, None
        if tree is None:
            return
        if self._base_policy is None:
            self._base_policy = scheduler.policy
        scheduler.policy = queue_policy(tree, self._base_policy, self.run)
        scheduler.queues = QueueStep(tree)

    # ------------------------------------------------------------------ submissions
    def resolve(self, user: str, admin: bool, queue: str | None, priority_class: str, gpus: int) -> str:
        """The leaf queue a submission goes to; QueueRefused (4xx naming the queue) otherwise."""
        if priority_class not in PRIORITY_CLASSES:
            raise QueueRefused(422, "priority_class", f"unknown priority class '{priority_class}'; choose one of: "
                                                      f"{', '.join(PRIORITY_CLASSES)}")
        tree = self.tree
        if tree is None:
            if queue:
                raise QueueRefused(422, "queue", f"this server has no queues, so the job cannot go to queue "
                                                 f"'{queue}'; submit without one")
            if priority_class != "normal":
                raise QueueRefused(422, "priority_class", "priority classes need tenant queues, and this server "
                                                          "has none")
            return ""
        try:
            pos = tree.leaf_of(queue or "", user)
        except InputError as e:
            status = 404 if queue and "unknown queue" in e.message else 422
            raise QueueRefused(status, "queue", e.message) from None
        node = tree.leaves[pos]
        name = tree.names[node]
        if not admin and not tree.may_use(user, pos):
            allowed = sorted(set().union(*(tree.users[a] for a in tree.ancestors[pos])))
            raise QueueRefused(403, "queue", f"user '{user}' may not submit to queue '{name}' (it is for: "
                                             f"{', '.join(allowed)})")
        cap = float(min(tree.limit[a] for a in tree.ancestors[pos]))
        if priority_class == "production":
            cap = float(tree.guarantee[node])
        if gpus > cap:
            why = "its guarantee (production jobs may not borrow)" if priority_class == "production" else \
                "what it may ever hold (guarantee + borrowing limit)"
            raise QueueRefused(422, "gpus", f"the job asks for {gpus} GPUs but queue '{name}' can never give it "
                                            f"more than {int(cap)}: {why}")
        return name

    # ------------------------------------------------------------------ views
    def describe(self, scheduler: Scheduler, counts: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
        """Every queue: its config, and at the latest decision its budget, GPUs used and borrowed."""
        tree = self.tree
        if tree is None:
            return []
        step = scheduler.queues
        rows = step.snapshot() if step is not None and step.tree is tree else tree.describe()
        for q in rows:
            mine = counts.get(q["name"], {})
            q["jobs_waiting"] = int(mine.get("waiting", 0))
            q["jobs_running"] = int(mine.get("running", 0))
        if rows:  # the counts of a leaf roll up to its ancestors
            by_name = {q["name"]: q for q in rows}
            for q in rows:
                if q["leaf"]:
                    for a in q["path"].split("/")[:-1]:
                        by_name[a]["jobs_waiting"] += q["jobs_waiting"]
                        by_name[a]["jobs_running"] += q["jobs_running"]
        return rows

    def pending_reason(self, scheduler: Scheduler, table: Any, job_id: int) -> str:
        """Why a waiting job did not start at the latest decision ('' when unknown)."""
        step = scheduler.queues
        if step is None or table is None or table.n == 0:
            return ""
        import numpy as np

        row = int(np.searchsorted(table.job_id, job_id))
        if row >= table.n or int(table.job_id[row]) != job_id:
            return ""
        return step.reason(row)
