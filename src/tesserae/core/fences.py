"""Fences: where a decision may not start new runs, and which jobs may run only on some nodes.

One constraint serves two operator needs (issue 30): a *closed* GPU (its node drained by an admin,
or the GPU found unhealthy) takes no new run while the runs already on it go on until they end; a
*pinned* job (``tesserae submit --node NAME``) runs only on the nodes it names. The scheduler
honours both around any placement (``tesserae.fencing``); a decision without fences is the
unfenced one, exactly.

Plain data in node indices and global GPU ids of the scheduler's cluster: the runtime turns node
names into them every decision, so a view that changes (nodes joining or leaving) is followed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Fences:
    """``closed``: a flag per global GPU id, True where no new run may start (None: none closed).
    ``pinned``: row -> the node indices the job may run on (empty: none of its nodes is in the
    cluster, so it waits)."""

    closed: np.ndarray | None = None
    pinned: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def applies(self, active: np.ndarray) -> bool:
        """Whether this decision has anything fenced: a closed GPU, or an active pinned row."""
        if self.closed is not None and bool(self.closed.any()):
            return True
        return bool(self.pinned) and bool(np.isin(active, np.fromiter(self.pinned, dtype=np.int64)).any())
