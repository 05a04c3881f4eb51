"""Job classes: what rates, pair gains and strategies depend on, found for many rows at once.

A job's rates depend on its class, (job type, GPU count), never on its identity; a host's pair gains
also on the GPU type it was given. The placement looks each figure up once per class, so it groups
rows by class in NumPy: each row's class columns (job type index, GPU count[, GPU type]) become one
integer code (``ClassCode``: mixed radix, so rows of one class share a code, codes sort as the
columns do, and a code decodes back to its columns), then one ``np.unique`` finds the classes.
``JobClass`` and ``HostClass`` are the decoded, typed keys the rest of the placement sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

import numpy as np

from tesserae.core.jobs import JobTable


class JobClass(NamedTuple):
    """A job's class: its rates depend on nothing else."""

    job_type: str
    num_gpus: int


class HostClass(NamedTuple):
    """An admitted job's class on the GPU type it was given: its pair gains depend on nothing else."""

    job_type: str
    num_gpus: int
    gpu_type: int


@dataclass(frozen=True)
class ClassCode:
    """Non-negative integer columns as one int64 code per row: with spans (s0, s1, s2) the code of
    (c0, c1, c2) is (c0 * s1 + c1) * s2 + c2, where each span exceeds its column's largest value."""

    spans: tuple[int, ...]

    @classmethod
    def fitting(cls, *cols: np.ndarray) -> ClassCode:
        """The code whose spans just hold these (non-empty) columns."""
        return cls(tuple(int(c.max()) + 1 for c in cols))

    def encode(self, *cols: np.ndarray) -> np.ndarray:
        code = np.zeros(cols[0].size, dtype=np.int64)
        for c, span in zip(cols, self.spans, strict=True):
            code = code * span + c
        return code

    def decode(self, codes: np.ndarray) -> list[tuple[int, ...]]:
        """The columns of each code, as tuples of Python ints."""
        parts = []
        for span in reversed(self.spans):
            codes, rem = np.divmod(codes, span)
            parts.append(rem.tolist())
        return list(zip(*reversed(parts), strict=True))


def distinct(*cols: np.ndarray) -> list[tuple[int, ...]]:
    """The distinct rows of equal-length non-negative integer columns, in column order."""
    if cols[0].size == 0:
        return []
    code = ClassCode.fitting(*cols)
    return code.decode(np.unique(code.encode(*cols)))


def group_rows(rows: np.ndarray, codes: np.ndarray) -> tuple[list[int], list[list[int]], list[int]]:
    """Rows grouped by code: the codes in the order of their first row, each code's rows in their
    order, and each row's group index (what grouping one row at a time into a dict gives)."""
    uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    rank = np.empty_like(by_first)
    rank[by_first] = np.arange(by_first.size)
    group = rank[inverse.ravel()]
    order = np.argsort(group, kind="stable")
    ends = np.flatnonzero(np.diff(group[order])).tolist()
    flat = rows[order].tolist()
    groups = [flat[a:b] for a, b in zip([0, *[e + 1 for e in ends]], [*[e + 1 for e in ends], len(flat)],
                                        strict=True)]
    return uniq[by_first].tolist(), groups, group.tolist()


K = TypeVar("K", JobClass, HostClass)


@dataclass
class Grouped(Generic[K]):
    """Rows grouped by class: the classes in the order of their first row, each one's rows in
    priority order, and each row's class index."""

    classes: list[K]
    rows: list[list[int]]
    class_of: list[int]


def host_classes(table: JobTable, hosts: np.ndarray, gpu_type: np.ndarray, num_types: int) -> Grouped[HostClass]:
    """The admitted ``hosts`` (priority order) grouped by class on the GPU type each was given."""
    code = ClassCode((len(table.types), int(table.num_gpus.max()) + 1, num_types))
    keys, groups, of_row = group_rows(hosts, code.encode(table.type_idx[hosts].astype(np.int64),
                                                         table.num_gpus[hosts], gpu_type))
    types = table.types
    classes = [HostClass(types[ti], k, t) for ti, k, t in code.decode(np.asarray(keys, dtype=np.int64))]
    return Grouped(classes, groups, of_row)


def job_classes(table: JobTable, rows: np.ndarray) -> Grouped[JobClass]:
    """``rows`` (priority order) grouped by class."""
    code = ClassCode((len(table.types), int(table.num_gpus.max()) + 1))
    keys, groups, of_row = group_rows(rows, code.encode(table.type_idx[rows].astype(np.int64), table.num_gpus[rows]))
    types = table.types
    classes = [JobClass(types[ti], k) for ti, k in code.decode(np.asarray(keys, dtype=np.int64))]
    return Grouped(classes, groups, of_row)


def class_index(table: JobTable, rows: np.ndarray) -> tuple[list[JobClass], np.ndarray]:
    """The distinct classes of ``rows`` (in code order) and each row's index among them."""
    if rows.size == 0:
        return [], np.empty(0, dtype=np.int64)
    code = ClassCode((len(table.types), int(table.num_gpus.max()) + 1))
    codes, of_row = np.unique(code.encode(table.type_idx[rows].astype(np.int64), table.num_gpus[rows]),
                              return_inverse=True)
    types = table.types
    return [JobClass(types[ti], k) for ti, k in code.decode(codes)], of_row.ravel()
