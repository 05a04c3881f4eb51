"""``tiresias-las``: Discretized 2D-LAS (Tiresias, NSDI 2019; DESIGN §3).

K queues on attained GPU-seconds (default K=2, threshold 3600 GPU-s; ``--tiresias-thresholds 3250,7200`` gives
K=3, Tiresias' simulator's setting), served top-down; each queue a list whose order persists, as in
Tiresias' own simulator (new and demoted jobs at the tail, after every pass the jobs that got no
GPUs behind those that did), demotion at the first whole second at or after the crossing (the
peer's clock), and the PromoteKnob starvation guard. The mechanics live in :mod:`tesserae.scheduling._tiresias_queues`.
"""

from __future__ import annotations

from tesserae.scheduling._tiresias_queues import TiresiasQueues
from tesserae.scheduling.base import register


@register("tiresias-las")
class TiresiasLas(TiresiasQueues):
    """2D-LAS: each queue served in its list order."""
