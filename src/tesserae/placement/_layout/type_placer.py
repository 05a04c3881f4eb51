"""One GPU type's layout for one round: the anchored layout, and the regrouped one when it can win."""

from __future__ import annotations

from collections.abc import Mapping

from tesserae.core.cluster import Cluster
from tesserae.placement._layout.anchored import anchored_layout
from tesserae.placement._layout.held import continuing, held_parts
from tesserae.placement._layout.nodes import TypeLayout, TypeNodes
from tesserae.placement._layout.regrouped import regrouped_layout
from tesserae.placement._shortcuts import Shortcuts


class TypePlacer:
    """Lays out one GPU type's jobs each round (its node arrays are built once per cluster)."""

    def __init__(self, cluster: Cluster, type_index: int, shortcuts: Shortcuts | None = None) -> None:
        self.cluster = cluster
        self.nodes = TypeNodes(cluster, type_index)
        #: Stop the regrouped layout once its move bound shows it cannot win (``Shortcuts.prune_regrouped``).
        self.prune_regrouped = (shortcuts or Shortcuts()).prune_regrouped

    def place(self, hosts: list[int], size: Mapping[int, int], prev: Mapping[int, tuple[int, ...]]) -> TypeLayout:
        """``hosts`` in priority order; ``prev`` maps the continuing ones to the GPUs they keep if possible.

        The anchored layout is kept when it moves and spreads nobody; otherwise the regrouped layout
        is built too, and the one with fewer spread jobs, then fewer moves, is kept (the anchored one
        on ties).
        """
        held = held_parts(self.nodes, continuing(hosts, prev), prev)
        anchored = anchored_layout(self.nodes, hosts, size, prev, held)
        if not anchored.moved and not anchored.spread:
            return anchored
        to_beat = anchored.cost() if self.prune_regrouped else None
        regrouped = regrouped_layout(self.nodes, hosts, size, prev, held, to_beat)
        if regrouped is not None and regrouped.cost() < anchored.cost():
            return regrouped
        return anchored
