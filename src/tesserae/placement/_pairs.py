"""Which waiting jobs share an admitted job's GPUs (DESIGN §4.2), between admission and layout.

- ``follow_policy_pairs``: a policy that names pairs (packed Gavel) has them run as units: each
  partner joins its host on the host's GPU type, where the two can share.
- Otherwise the *overflow* (``overflow``: the policy's next jobs in priority order that did not run
  alone, up to the cluster's capacity again) is paired with admitted jobs by a maximum-weight
  matching solved over job classes (``pair_overflow``, ``_packing.pack_classes``): gains depend on
  the host's class on its GPU type and the partner's class only, and are cached per class pair for
  as long as the rates are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from tesserae.core.plan import Assignment
from tesserae.placement import _packing
from tesserae.placement._admitted import AdmittedJobs
from tesserae.placement._classes import HostClass, JobClass, host_classes, job_classes


def follow_policy_pairs(jobs: AdmittedJobs, pairs: Iterable[tuple[int, int]], partner: dict[int, int]) -> int:
    """The policy's (host, partner) pairs that can share, added to ``partner`` both ways; how many."""
    host_set = set(jobs.hosts)
    n = 0
    for h, o in pairs:
        if h not in host_set or o in host_set or h in partner or o in partner:
            continue
        (a, ka), (b, kb) = jobs.job_class(h), jobs.job_class(o)
        if kb <= ka and jobs.book.pair(a, ka, b, kb, jobs.type_of[h])[0] > 0:
            partner[h], partner[o] = o, h
            n += 1
    return n


def overflow(jobs: AdmittedJobs, candidates: np.ndarray) -> list[int]:
    """The candidates (priority order) that were not admitted, up to the cluster's GPUs again."""
    hosts = np.asarray(jobs.hosts, dtype=np.int64)
    rest = candidates[~np.isin(candidates, hosts)]
    if rest.size == 0:
        return []
    cum = np.cumsum(jobs.table.num_gpus[rest])
    return rest[cum <= jobs.cluster.num_gpus].tolist()


def pair_overflow(jobs: AdmittedJobs, over: list[int], one_type: bool, gains: dict[tuple[HostClass, JobClass], float],
                  threshold: float, previous: Mapping[int, Assignment]) -> list[tuple[int, int]]:
    """(host, overflow job) pairs of the maximum-weight matching over classes (see module docstring).

    ``gains``: the cache of sharing gains by (host class, overflow class); ``one_type``: every host
    is on GPU type 0 (no lookup).
    """
    hosts = np.asarray(jobs.hosts, dtype=np.int64)
    gpu_type = np.zeros(hosts.size, dtype=np.int64) if one_type else \
        np.fromiter((jobs.type_of[r] for r in jobs.hosts), dtype=np.int64, count=hosts.size)
    host = host_classes(jobs.table, hosts, gpu_type, len(jobs.cluster.gpu_types))
    over_arr = np.asarray(over, dtype=np.int64)
    waiting = job_classes(jobs.table, over_arr)
    book = jobs.book

    def gain(hc: HostClass, oc: JobClass) -> float:
        key = (hc, oc)
        g = gains.get(key)
        if g is None:
            g = -np.inf
            if oc[1] <= hc[1] and book.can_pair_counts(hc[1], oc[1]):
                g = book.gain(hc[0], hc[1], oc[0], oc[1], hc[2])
            gains[key] = g
        return g

    prev_partner = {r: a.partner for r, a in previous.items() if a.partner is not None}
    host_class = dict(zip(jobs.hosts, [host.classes[c] for c in host.class_of], strict=True)) if prev_partner else {}
    return _packing.pack_classes(dict(zip(host.classes, host.rows, strict=True)), host_class,
                                 dict(zip(waiting.classes, waiting.rows, strict=True)), over, waiting.class_of,
                                 gain, threshold, prev_partner)
