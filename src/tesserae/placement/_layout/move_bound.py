"""A lower bound of the regrouped layout's moves, grown as its bin packing places units.

A logical node maps to one physical node, so of the single-node continuing jobs packed onto one
logical node at most those that came from one previous node can keep their GPUs. Summed over the
logical nodes, (continuing jobs there - the most of them from one previous node) is a lower bound
of the moves the regrouped layout will make, whatever the matching and the GPU choice do later,
and it only grows as the packing goes on. The regrouped layout compares it with the anchored
layout's moves to stop as soon as it cannot win (``regrouped.regrouped_layout``).
"""

from __future__ import annotations


class MoveBound:
    """The lower bound (``moves``) and, per logical node, where its continuing jobs came from."""

    __slots__ = ("_came", "_jobs_on", "_most_from_one", "moves")

    def __init__(self, n_nodes: int) -> None:
        self.moves = 0
        self._jobs_on = [0] * n_nodes  # continuing single-node jobs on each logical node
        self._most_from_one = [0] * n_nodes  # the most of them that came from one previous node
        self._came: dict[int, dict[int, int]] = {}  # logical node -> previous node -> jobs

    def add(self, node: int, came_from: int, jobs: int) -> int:
        """``jobs`` continuing jobs that ran together on node ``came_from`` are packed onto logical
        node ``node``: the bound grows by what cannot stay there; returns the growth."""
        came = self._came.get(node)
        if came is None:  # the first on its logical node: they can all stay
            self._came[node] = {came_from: jobs}
            self._jobs_on[node] = self._most_from_one[node] = jobs
            return 0
        c = came[came_from] = came.get(came_from, 0) + jobs
        jobs_on, most = self._jobs_on, self._most_from_one
        before = jobs_on[node] - most[node]
        jobs_on[node] += jobs
        if c > most[node]:
            most[node] = c
        grew = jobs_on[node] - most[node] - before
        self.moves += grew
        return grew
