"""``worst-fit``: each job on the nodes with the most free GPUs (fewest nodes, emptiest first), which
spreads load and leaves room next to every job; ``max_nodes`` caps how many nodes one gang may span
(a gang that would need more waits). Running jobs are laid out again every decision, as
``first-fit`` does: a baseline, not a migration-minimizing placement.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from tesserae.core.advice import Advice
from tesserae.core.cluster import Cluster
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.core.plugins import PluginOptions
from tesserae.core.throughput import ThroughputModel
from tesserae.placement.base import PlacementPolicy, PooledPlacer, RoundPlacer
from tesserae.placement.tiresias import fewest_nodes_layout


class WorstFitOptions(PluginOptions):
    max_nodes: int | None = Field(None, ge=1, description="most nodes one gang may span (default: any)")


class WorstFitPlacer(PooledPlacer):
    def __init__(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
                 model: ThroughputModel, advice: Advice | None, max_nodes: int | None) -> None:
        super().__init__(cluster, table, previous, model, advice)
        self.max_nodes = max_nodes

    def try_admit(self, row: int) -> bool:
        k = int(self.table.num_gpus[row])
        for t in self.type_order(row):  # the GPU types it can run on, most free first
            nodes = (self.cluster.node_type == t).nonzero()[0]
            layout = fewest_nodes_layout(nodes, self.pool.node_free[nodes], k)
            if layout is not None and (self.max_nodes is None or len(layout) <= self.max_nodes):
                self.assigned[row] = Assignment(row, self.pool.take_nodes(layout))
                return True
        return False


class WorstFit(PlacementPolicy):
    """Emptiest nodes first (see module docstring)."""

    Options = WorstFitOptions

    def __init__(self, max_nodes: int | None = None) -> None:
        self.max_nodes = max_nodes

    def begin(self, cluster: Cluster, table: JobTable, previous: Mapping[int, Assignment],
              model: ThroughputModel, advice: Advice | None = None) -> RoundPlacer:
        return WorstFitPlacer(cluster, table, previous, model, advice, self.max_nodes)
