"""Tenant queues (DESIGN §8): a validated tree of queues with guarantees, borrowing limits and weights.

A shared cluster is divided among queues that form a tree (organisation -> team -> user, or
Philly's virtual clusters). Every queue has

- ``guarantee``: GPUs it gets whenever it has the demand (an int: GPUs of any type; or a mapping
  GPU type -> GPUs on a mixed cluster). An inner queue without one guarantees the sum of its
  children's; an inner queue with one must cover its children's.
- ``borrow_limit``: at most this many GPUs above its guarantee (None: no limit but the cluster).
- ``weight``: its share of idle quota lent out, relative to its siblings (weighted max-min).
- ``policy``: the ordering policy inside the queue (None: the scheduler's policy).
- ``users``: who may submit to it (listed here or on an ancestor; a path with no list is open).

Jobs belong to leaf queues. Jobs also carry a priority class: ``production`` (runs only inside
its queue's guarantee, and once running is never preempted), ``normal``, or ``preemptible``
(ranked after normal jobs, so the first to lose borrowed GPUs). This module is data and
validation only: the budgets are computed in :mod:`tesserae.scheduling.quota`, files are read in
:mod:`tesserae.queue_file`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tesserae.core.errors import InputError
from tesserae.core.jobs import JobStatus

#: Priority classes, most important first; a job's class rank is its index here.
PRIORITY_CLASSES: tuple[str, ...] = ("production", "normal", "preemptible")
DEFAULT_PRIORITY_CLASS = "normal"
QUEUE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
MAX_QUEUES = 10_000
MAX_DEPTH = 16

QueueName = Annotated[str, Field(pattern=QUEUE_NAME_PATTERN)]
Gpus = Annotated[int, Field(ge=0, le=10_000_000)]


class QueueEntry(BaseModel):
    """One queue as a config file gives it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: QueueName
    parent: QueueName | None = None
    guarantee: Gpus | dict[Annotated[str, Field(min_length=1, max_length=64)], Gpus] | None = None
    borrow_limit: Gpus | None = None
    weight: float = Field(1.0, gt=0, le=1e6, allow_inf_nan=False)
    policy: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    users: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(default_factory=list, max_length=10_000)

    @field_validator("guarantee", "borrow_limit", "weight", mode="before")
    @classmethod
    def _not_a_bool(cls, value: Any) -> Any:
        """JSON and YAML ``true``/``false`` are not numbers (pydantic would take them as 1 and 0)."""
        for v in value.values() if isinstance(value, dict) else (value,):
            if isinstance(v, bool):
                raise ValueError(f"expected a number, got {str(v).lower()}")
        return value


class QueueConfig(BaseModel):
    """A whole tenancy configuration: the queues and the queue of jobs that name none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queues: list[QueueEntry] = Field(min_length=1, max_length=MAX_QUEUES)
    default_queue: QueueName | None = None


#: Maps a config location (``("queues", 3, "parent")``) to its line in the file, when known.
Locator = Callable[[tuple[Any, ...]], int | None]


def _no_lines(_loc: tuple[Any, ...]) -> int | None:
    return None


def parse_config(data: Any, *, path: str | None = None, locate: Locator = _no_lines) -> QueueConfig:
    """Validate raw data (from YAML, JSON or an API body) into a QueueConfig; errors name line and field."""
    try:
        return QueueConfig.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = tuple(first["loc"])
        field = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
        msg = f"unknown key '{loc[-1]}'" if first["type"] == "extra_forbidden" else first["msg"].removeprefix(
            "Value error, ")
        raise InputError(msg, path=path, line=locate(loc), field=field or None) from None


def class_rank(name: str) -> int:
    """Rank of a priority class name (0 = production); unknown names are an InputError."""
    try:
        return PRIORITY_CLASSES.index(name)
    except ValueError:
        raise InputError(f"unknown priority class '{name}'; choose one of: {', '.join(PRIORITY_CLASSES)}",
                         field="priority_class") from None


@dataclass(frozen=True)
class QueueTree:
    """A validated queue tree with flat arrays for the allocator.

    Node ``i`` is the i-th queue of the config. ``order`` lists nodes parents first; ``leaves``
    are the nodes jobs may belong to; ``leaf_index[node]`` is a node's position among the leaves
    (-1 for inner nodes); ``ancestors[leaf]`` lists the leaf's node and every ancestor above it.
    """

    names: tuple[str, ...]
    parent: np.ndarray  # node -> parent node, -1 at the top level
    children: tuple[tuple[int, ...], ...]
    top: tuple[int, ...]  # top-level nodes
    guarantee: np.ndarray  # node -> guaranteed GPUs (all types together)
    guarantee_by_type: tuple[Mapping[str, int], ...]  # node -> per-type guarantees given (may be empty)
    limit: np.ndarray  # node -> most GPUs it may hold (guarantee + borrow limit; inf = no limit)
    weight: np.ndarray
    policy: tuple[str | None, ...]
    users: tuple[frozenset[str], ...]
    order: tuple[int, ...]
    leaves: tuple[int, ...]
    leaf_index: np.ndarray
    ancestors: tuple[tuple[int, ...], ...]  # per leaf position: node, parent, ... top
    default_queue: str | None = None
    source: str | None = None

    # ------------------------------------------------------------------ lookups
    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_leaves(self) -> int:
        return len(self.leaves)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise InputError(f"unknown queue '{name}'; queues: {', '.join(self.names[:20])}"
                             f"{' ...' if len(self.names) > 20 else ''}", field="queue") from None

    def path(self, node: int) -> list[str]:
        """Names from the top-level queue down to ``node``."""
        out = []
        while node >= 0:
            out.append(self.names[node])
            node = int(self.parent[node])
        return out[::-1]

    def leaf_of(self, queue: str = "", user: str = "") -> int:
        """Leaf position of a job: its named queue, else the user's queue, else the default queue.

        A user's queue is the first leaf listing the user in ``users``, else a leaf named like the
        user. Raises InputError when nothing applies or a named queue is not a leaf.
        """
        if queue:
            node = self.index(queue)
            pos = int(self.leaf_index[node])
            if pos < 0:
                raise InputError(f"queue '{queue}' has sub-queues; jobs go to a leaf queue "
                                 f"({', '.join(self.names[c] for c in self.children[node])})", field="queue")
            return pos
        pos = self._user_leaf.get(user, -1)
        if pos >= 0:
            return pos
        if self.default_queue is not None:
            return int(self.leaf_index[self.index(self.default_queue)])
        raise InputError(f"no queue for user '{user}': name a queue, list the user in a queue's users, "
                         "or set default_queue", field="queue")

    def may_use(self, user: str, leaf: int) -> bool:
        """Whether ``user`` may submit to the leaf: listed on its path, or the path lists nobody."""
        path = self.ancestors[leaf]
        listed = [self.users[n] for n in path if self.users[n]]
        return not listed or any(user in u for u in listed)

    @property
    def _user_leaf(self) -> dict[str, int]:
        cache = self.__dict__.get("_user_leaf_cache")
        if cache is None:
            cache = {}
            for pos, node in enumerate(self.leaves):
                for u in sorted(self.users[node]):
                    cache.setdefault(u, pos)
            for pos, node in enumerate(self.leaves):
                cache.setdefault(self.names[node], pos)
            object.__setattr__(self, "_user_leaf_cache", cache)
        return cache

    def with_borrow_limit(self, borrow: int | None) -> QueueTree:
        """The same tree with every queue's borrowing limit replaced (0: strict quotas)."""
        limit = np.full(self.num_nodes, math.inf) if borrow is None else self.guarantee + float(borrow)
        return _replace(self, limit=limit)

    def describe(self) -> list[dict[str, Any]]:
        """One dict per queue (parents first): what ``tesserae queue list`` and the API show."""
        out = []
        for n in self.order:
            out.append({
                "name": self.names[n],
                "parent": None if self.parent[n] < 0 else self.names[int(self.parent[n])],
                "path": "/".join(self.path(n)),
                "leaf": bool(self.leaf_index[n] >= 0),
                "guarantee": int(self.guarantee[n]),
                "guarantee_by_type": dict(self.guarantee_by_type[n]),
                "borrow_limit": None if math.isinf(self.limit[n]) else int(self.limit[n] - self.guarantee[n]),
                "weight": float(self.weight[n]),
                "policy": self.policy[n],
                "users": sorted(self.users[n]),
            })
        return out


def _replace(tree: QueueTree, **changes: Any) -> QueueTree:
    fields = {k: getattr(tree, k) for k in tree.__dataclass_fields__}
    fields.update(changes)
    return QueueTree(**fields)


def build_tree(config: QueueConfig, *, gpus_by_type: Mapping[str, int] | None = None,
               path: str | None = None, locate: Locator = _no_lines,
               policy_names: Sequence[str] | None = None) -> QueueTree:
    """Validate a config into a tree: unknown parents, cycles, duplicate names, guarantees.

    ``gpus_by_type`` (the cluster) bounds the guarantees: the top level may not promise more GPUs
    (of a type, or in all) than exist. ``policy_names`` bounds the per-queue policies.
    """
    entries = config.queues

    def fail(msg: str, i: int | None, field: str) -> InputError:
        loc: tuple[Any, ...] = ("queues", i, field) if i is not None else (field,)
        line = locate(loc) or (locate(("queues", i)) if i is not None else None)
        name = f"queues[{i}].{field}" if i is not None else field
        return InputError(msg, path=path, line=line, field=name)

    names: list[str] = []
    seen: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e.name in seen:
            raise fail(f"queue '{e.name}' is defined twice (first as queues[{seen[e.name]}])", i, "name")
        seen[e.name] = i
        names.append(e.name)
    n = len(entries)
    parent = np.full(n, -1, dtype=np.int64)
    for i, e in enumerate(entries):
        if e.parent is not None:
            if e.parent not in seen:
                raise fail(f"queue '{e.name}' names an unknown parent '{e.parent}'", i, "parent")
            parent[i] = seen[e.parent]
    state = [0] * n  # 0 unseen, 1 on the current walk up, 2 known to reach the top level
    for i in range(n):  # a cycle never reaches the top level; each node is walked once (O(n))
        walk, node = [], i
        while node >= 0 and state[node] == 0:
            state[node] = 1
            walk.append(node)
            node = int(parent[node])
        if node >= 0 and state[node] == 1:
            cycle = walk[walk.index(node):]
            first = min(cycle)
            k = cycle.index(first)
            cycle = cycle[k:] + cycle[:k]
            raise fail(f"queue '{names[first]}' is in a cycle of parents "
                       f"({' -> '.join(names[c] for c in [*cycle, first])})", first, "parent")
        for x in walk:
            state[x] = 2
    depth = [0] * n
    for i in range(n):  # parents first is not yet known: memoised walk up (no cycles left)
        chain, node = [], i
        while node >= 0 and depth[node] == 0:
            chain.append(node)
            node = int(parent[node])
        base = depth[node] if node >= 0 else 0
        for k, x in enumerate(reversed(chain), 1):
            depth[x] = base + k
            if depth[x] > MAX_DEPTH:
                raise fail(f"queue '{names[x]}' is {depth[x]} levels deep; at most {MAX_DEPTH} are allowed", x,
                           "parent")
    children: list[list[int]] = [[] for _ in range(n)]
    top: list[int] = []
    for i in range(n):
        (children[int(parent[i])] if parent[i] >= 0 else top).append(i)
    order: list[int] = []
    stack = list(reversed(top))
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children[node]))

    cluster_types = dict(gpus_by_type) if gpus_by_type is not None else None
    by_type: list[dict[str, int]] = []
    given: list[int | None] = []
    for i, e in enumerate(entries):
        g = e.guarantee
        if isinstance(g, dict):
            if cluster_types is not None:
                for t in g:
                    if t.lower() not in cluster_types:
                        raise fail(f"GPU type '{t}' is not in the cluster ({', '.join(cluster_types)})", i,
                                   "guarantee")
            by_type.append({t.lower(): int(v) for t, v in g.items()})
            given.append(sum(g.values()))
        else:
            by_type.append({})
            given.append(g)
        if e.policy is not None and policy_names is not None and e.policy not in policy_names:
            raise fail(f"unknown policy '{e.policy}' for queue '{e.name}'; choose one of: "
                       f"{', '.join(policy_names)}", i, "policy")
    guarantee = np.zeros(n, dtype=np.int64)
    for node in reversed(order):  # children before parents
        kids = children[node]
        kid_sum = int(guarantee[kids].sum()) if kids else 0
        g = given[node]
        if g is None:
            guarantee[node] = kid_sum
            if by_type[node] == {} and kids:
                merged: dict[str, int] = {}
                for k in kids:
                    for t, v in by_type[k].items():
                        merged[t] = merged.get(t, 0) + v
                by_type[node] = merged if all(by_type[k] for k in kids) else {}
        else:
            if g < kid_sum:
                raise fail(f"queue '{names[node]}' guarantees {g} GPUs but its sub-queues guarantee {kid_sum}",
                           node, "guarantee")
            guarantee[node] = g
        for t in {t for k in kids for t in by_type[k]}:
            if by_type[node] and sum(by_type[k].get(t, 0) for k in kids) > by_type[node].get(t, 0):
                raise fail(f"queue '{names[node]}' guarantees {by_type[node].get(t, 0)} {t} GPUs but its "
                           f"sub-queues guarantee {sum(by_type[k].get(t, 0) for k in kids)}", node, "guarantee")
    if cluster_types is not None:
        total = sum(cluster_types.values())
        top_sum = int(guarantee[top].sum())
        if top_sum > total:
            worst = max(top, key=lambda k: int(guarantee[k]))
            raise fail(f"the top-level queues guarantee {top_sum} GPUs but the cluster has {total}", worst,
                       "guarantee")
        for t, have in cluster_types.items():
            want = sum(by_type[k].get(t, 0) for k in top)
            if want > have:
                worst = max(top, key=lambda k: by_type[k].get(t, 0))
                raise fail(f"the top-level queues guarantee {want} {t} GPUs but the cluster has {have}", worst,
                           "guarantee")
    limit = np.array([math.inf if e.borrow_limit is None else float(guarantee[i] + e.borrow_limit)
                      for i, e in enumerate(entries)])
    leaves = tuple(i for i in order if not children[i])
    leaf_index = np.full(n, -1, dtype=np.int64)
    for pos, node in enumerate(leaves):
        leaf_index[node] = pos
    ancestors = []
    for node in leaves:
        chain, x = [], node
        while x >= 0:
            chain.append(x)
            x = int(parent[x])
        ancestors.append(tuple(chain))
    if config.default_queue is not None:
        if config.default_queue not in seen:
            raise fail(f"default_queue '{config.default_queue}' is not a queue", None, "default_queue")
        if children[seen[config.default_queue]]:
            raise fail(f"default_queue '{config.default_queue}' has sub-queues; name a leaf queue", None,
                       "default_queue")
    return QueueTree(
        names=tuple(names), parent=parent, children=tuple(tuple(c) for c in children), top=tuple(top),
        guarantee=guarantee, guarantee_by_type=tuple(by_type), limit=limit,
        weight=np.array([e.weight for e in entries], dtype=np.float64),
        policy=tuple(e.policy for e in entries), users=tuple(frozenset(e.users) for e in entries),
        order=tuple(order), leaves=leaves, leaf_index=leaf_index, ancestors=tuple(ancestors),
        default_queue=config.default_queue, source=path)


def derived_config(gpu_seconds: Mapping[str, float], num_gpus: int, *, borrow_limit: int | None = None
                   ) -> QueueConfig:
    """One leaf queue per user with guarantees in proportion to their GPU time (Philly's VCs).

    Guarantee of user u = floor(num_gpus x gpu_seconds[u] / total), then the GPUs floors leave go
    one each to the largest remainders (ties: name order), so the guarantees sum to the cluster.
    Weights are 1; users with no GPU time get guarantee 0. Names that are not valid queue names
    are refused by the queue validation.
    """
    users = sorted(gpu_seconds)
    if not users:
        raise InputError("no jobs to derive queues from", field="queue-config")
    share = np.array([max(float(gpu_seconds[u]), 0.0) for u in users])
    total = share.sum()
    exact = share / total * num_gpus if total > 0 else np.zeros(len(users))
    g = np.floor(exact).astype(np.int64)
    left = int(num_gpus - g.sum()) if total > 0 else 0
    if left > 0:
        frac = exact - g
        pick = np.lexsort((np.arange(len(users)), -frac))[:left]
        g[pick] += 1
    entries = [{"name": u or "default", "guarantee": int(x), **({"borrow_limit": borrow_limit}
                                                               if borrow_limit is not None else {})}
               for u, x in zip(users, g.tolist(), strict=True)]
    return parse_config({"queues": entries, **({"default_queue": "default"} if "" in gpu_seconds else {})})


_ENDED = (JobStatus.DONE, JobStatus.REJECTED)


class RowQueues:
    """Leaf position and priority-class rank of every row of a job table.

    Cached while the same table grows (the simulator's, the runtime's); a new table is mapped
    afresh, which costs one dictionary lookup per distinct (queue, user). A finished job whose
    queue is gone (the runtime's config changed since) maps to -1; an active one is an error.
    """

    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        self._table: Any = None
        self._leaf = np.empty(0, dtype=np.int64)
        self._cls = np.empty(0, dtype=np.int64)

    def __call__(self, table: Any) -> tuple[np.ndarray, np.ndarray]:
        if table is not self._table:
            self._table = table
            self._leaf = np.empty(0, dtype=np.int64)
            self._cls = np.empty(0, dtype=np.int64)
        done = self._leaf.size
        if table.n > done:
            memo: dict[tuple[str, str], int] = {}
            ranks = {c: i for i, c in enumerate(PRIORITY_CLASSES)}
            leaf = np.empty(table.n - done, dtype=np.int64)
            cls = np.empty(table.n - done, dtype=np.int64)
            for k, spec in enumerate(table.specs[done:]):
                key = (spec.queue, spec.user)
                pos = memo.get(key)
                if pos is None:
                    try:
                        pos = memo[key] = self.tree.leaf_of(spec.queue, spec.user)
                    except InputError as e:
                        if int(table.status[done + k]) in _ENDED:
                            pos = -1
                        else:
                            raise InputError(f"job {spec.job_id}: {e.message}", field="queue") from None
                leaf[k] = pos
                c = ranks.get(spec.priority_class)
                cls[k] = class_rank(spec.priority_class) if c is None else c
            self._leaf = np.concatenate([self._leaf, leaf])
            self._cls = np.concatenate([self._cls, cls])
        return self._leaf, self._cls
