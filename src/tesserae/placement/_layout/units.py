"""The units the regrouped layout packs: what must stay together, in packing order.

The single-node continuing jobs that shared a node last round form one unit (they can all keep
their GPUs only on one node again); each multi-node continuing job and each new job is a unit of
its own. Units are packed largest first; ties: groups and continuing jobs by their highest
priority, then new jobs by priority. Built in NumPy from the held parts, no loop over jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tesserae.placement._layout.held import HeldParts


@dataclass
class Units:
    """The regrouped layout's units in packing order: GPU count, number of jobs and the node its jobs
    ran on (-1: not one node) of each, and their rows (unit ``u``: ``rows[start[u]:start[u + 1]]``)."""

    total: list[int]
    count: list[int]
    node: list[int]
    rows: list[int]
    start: list[int]


def regrouped_units(hosts: list[int], size: Mapping[int, int], held: HeldParts) -> Units:
    """The regrouped layout's units in packing order (see ``Units``), vectorised.

    Units: the single-node continuing jobs of one previous node (in priority order; node: that
    node), each multi-node continuing job and each new job (node: -1). Largest first; ties:
    groups and continuing jobs by their highest priority, then new jobs by priority.
    """
    n_h = len(hosts)
    hosts_arr = np.asarray(hosts, dtype=np.int64)
    sizes = np.fromiter((size[r] for r in hosts), dtype=np.int64, count=n_h)
    by_row = np.argsort(hosts_arr, kind="stable")
    p_rank = by_row[np.searchsorted(hosts_arr[by_row], held.row)]  # each part's job's priority rank
    starts = np.flatnonzero(np.r_[True, held.row[1:] != held.row[:-1]]) if held.row.size else held.row
    n_parts = np.diff(np.r_[starts, held.row.size])
    single = np.repeat(n_parts == 1, n_parts)
    multi_rank = p_rank[starts[n_parts > 1]]
    s_rank, s_node = p_rank[single], held.node[single]
    o = np.lexsort((s_rank, s_node))
    s_rank, s_node = s_rank[o], s_node[o]
    g_start = np.flatnonzero(np.r_[True, s_node[1:] != s_node[:-1]]) if s_node.size else s_node
    g_total = np.add.reduceat(sizes[s_rank], g_start) if s_node.size else s_node
    new_rank = np.flatnonzero(~np.isin(hosts_arr, held.row))
    total = np.concatenate([sizes[multi_rank], g_total, sizes[new_rank]])
    tie = np.concatenate([multi_rank, s_rank[g_start], n_h + new_rank])
    node = np.concatenate([np.full(multi_rank.size, -1), s_node[g_start], np.full(new_rank.size, -1)])
    # Each unit's rows as a range of one array (multi-node jobs, groups, new jobs), then gathered
    # into packing order.
    every = hosts_arr[np.concatenate([multi_rank, s_rank, new_rank])]
    count = np.concatenate([np.ones(multi_rank.size, dtype=np.int64), np.diff(np.r_[g_start, s_node.size]),
                            np.ones(new_rank.size, dtype=np.int64)])
    first = np.cumsum(count) - count
    order = np.lexsort((tie, -total))
    count, first = count[order], first[order]
    ends = np.cumsum(count)
    flat = every[np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(first - (ends - count), count)]
    return Units(total[order].tolist(), count.tolist(), node[order].tolist(), flat.tolist(),
                 [0, *ends.tolist()])
