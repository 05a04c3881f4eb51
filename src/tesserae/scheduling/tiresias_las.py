"""``tiresias-las``: Discretized 2D-LAS (Tiresias, NSDI 2019; DESIGN §3).

K queues on attained GPU-seconds (default K=2, threshold 3600 GPU-s; ``--queues 3250,7200`` gives
K=3), served top-down, FIFO by queue entry inside a queue with running jobs keeping their place,
demotion at the exact crossing instant, and the PromoteKnob starvation guard. The mechanics live
in :mod:`tesserae.scheduling._tiresias_queues`.
"""

from __future__ import annotations

from tesserae.scheduling._tiresias_queues import TiresiasQueues
from tesserae.scheduling.base import register


@register("tiresias-las")
class TiresiasLas(TiresiasQueues):
    """2D-LAS: FIFO by queue entry within each queue."""
