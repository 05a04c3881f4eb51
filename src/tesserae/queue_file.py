"""Reads tenant-queue configurations (YAML or JSON) with the line of every key, for clear errors.

A file looks like this (``tesserae server --config FILE``, ``tesserae simulate --queue-config FILE``)::

    default_queue: interns          # jobs that name no queue and whose user is listed nowhere
    queues:
      - name: research              # an organisation
        guarantee: 48               # GPUs it always gets when it has the demand
        borrow_limit: 16            # at most 16 GPUs above that (omit: no limit)
        weight: 2                   # share of idle quota lent out, against its siblings
      - name: vision
        parent: research
        guarantee: 32
        policy: tiresias-las        # the order inside this queue (omit: the scheduler's)
        users: [alice, bob]
      - name: nlp
        parent: research
        guarantee: {a100: 8, v100: 8}
      - name: interns
        guarantee: 0

Any mistake (an unknown key, a cycle of parents, an unknown parent, a guarantee above the
cluster) is an ``InputError`` naming the file, the line and the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tesserae.core.errors import InputError
from tesserae.core.queues import QueueConfig, QueueTree, build_tree, derived_config, parse_config

MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: Keys of a server config file besides the queues (none yet: the server takes its options on the
#: command line); anything else is an error naming the key.
QUEUE_KEYS = ("queues", "default_queue")

if TYPE_CHECKING:
    import yaml  # imported where a file is read: a run without a queue file does not load PyYAML


class _Lines:
    """Line (1-based) of every mapping key and sequence item of a YAML document, by path."""

    def __init__(self, node: yaml.Node | None) -> None:
        self.lines: dict[tuple[Any, ...], int] = {}
        if node is not None:
            self._walk(node, ())

    def _walk(self, node: yaml.Node, path: tuple[Any, ...]) -> None:
        import yaml

        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                k = key.value if isinstance(key, yaml.ScalarNode) else str(key)
                self.lines[(*path, k)] = key.start_mark.line + 1
                self._walk(value, (*path, k))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, (*path, i))

    def __call__(self, loc: tuple[Any, ...]) -> int | None:
        loc = tuple(loc)
        while loc:  # the deepest known location (a key pydantic names inside a union, say)
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return self.lines.get(())


def read_yaml(path: str | Path) -> tuple[Any, _Lines]:
    """Parse a YAML (or JSON) file; a syntax error names the file and line."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", path=str(p))
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise InputError(f"config file larger than {MAX_CONFIG_BYTES} bytes", path=str(p))
    text = p.read_text(encoding="utf-8", errors="replace")
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"not valid YAML: {problem}", path=str(p),
                         line=mark.line + 1 if mark is not None else None) from None
    return data, _Lines(node)


def read_queue_config(path: str | Path, *, allowed_extra: Sequence[str] = ()) -> tuple[QueueConfig, _Lines]:
    """The queue part of a config file; keys other than the queues' and ``allowed_extra`` are errors."""
    data, lines = read_yaml(path)
    if not isinstance(data, Mapping):
        raise InputError("expected a mapping with a 'queues' list at the top", path=str(path), line=lines(()))
    for key in data:
        if key not in QUEUE_KEYS and key not in allowed_extra:
            raise InputError(f"unknown key '{key}' (known: {', '.join((*QUEUE_KEYS, *allowed_extra))})",
                             path=str(path), line=lines((key,)), field=str(key))
    queue_part = {k: v for k, v in data.items() if k in QUEUE_KEYS}
    return parse_config(queue_part, path=str(path), locate=lines), lines


def load_queue_tree(path: str | Path, gpus_by_type: Mapping[str, int] | None,
                    policy_names: Sequence[str] | None = None) -> QueueTree:
    """Read and validate a queue file against a cluster (GPUs per type)."""
    config, lines = read_queue_config(path)
    return build_tree(config, gpus_by_type=gpus_by_type, path=str(path), locate=lines, policy_names=policy_names)


def derive_queue_tree(user_gpu_seconds: Mapping[str, float], gpus_by_type: Mapping[str, int],
                      borrow_limit: int | None = None) -> QueueTree:
    """One queue per user (Philly's VCs), guarantees from each one's share of GPU time (see derived_config)."""
    total = sum(gpus_by_type.values())
    return build_tree(derived_config(user_gpu_seconds, total, borrow_limit=borrow_limit), gpus_by_type=gpus_by_type,
                      path="derived from the workload")
