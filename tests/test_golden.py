"""Pinned results on a fixed workload: optimizations of the engine and the placements must not
change what a simulation computes (the same seed gives the same summary, before and after).

The values were recorded from the first, unoptimized implementation of the simulator. If a change
of *semantics* (not speed) moves them, say so in the commit and re-record them deliberately.
"""

from __future__ import annotations

import pytest

from tesserae.core.cluster import parse_cluster_spec
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.runner import RunSpec, parse_run_label, simulate
from tesserae.traces import generate_workload

GOLDEN = {
    ("fifo:consolidated", False): (210985.3497952066, 1853338.152498594, 39, 0),
    ("fifo:consolidated", True): (637246.4997952066, 2570308.1524985936, 0, 0),
    ("fifo:first-fit", False): (254573.7054639367, 1984588.1524985936, 54, 356),
    ("las:first-fit", False): (136961.06897074752, 1752778.1524985936, 10773, 4719),
    ("las:consolidated", False): (121522.04979520665, 1657348.1524985936, 7247, 0),
    ("srtf:consolidated", False): (82535.24979520668, 1683178.152498594, 285, 0),
    # Re-recorded when tiresias-las and tiresias-gittins took Tiresias' own semantics (issue 11):
    # queues as lists whose order persists, and 2D-Gittins with the index of Tiresias' simulator
    # taken on the service since the last reset.
    ("tiresias-las:consolidated", False): (134608.04979520667, 1822690.2641566915, 207, 0),
    ("tiresias-las:tiresias", False): (137102.40066943958, 1661305.949646173, 229, 24),
    ("tiresias-gittins:tiresias", False): (98890.69641197096, 1579935.6753551885, 848, 47),
    ("tiresias-las:tesserae", False): (126503.54979520668, 1734790.2641566915, 258, 49),
    ("tiresias-las:tesserae+packing", False): (110399.5917155032, 1607846.1160395208, 163, 377),
    ("las:tesserae+packing", False): (102967.88400757058, 1620342.0516225074, 1409, 751),
    # Re-recorded when gavel-maxmin took Gavel's own mechanism (issue 11): per-type queues, priorities
    # since the last reset, the 1920 s re-solve interval, pairs as units, Gavel's rounds.
    ("gavel-maxmin:gavel+packing", False): (102242.55253309083, 1601074.9542055058, 9800, 6024),
}


@pytest.mark.parametrize(("label", "no_backfill"), list(GOLDEN))
def test_fixed_workload_results_are_pinned(label: str, no_backfill: bool) -> None:
    cluster = parse_cluster_spec("4x4")
    model = DefaultModel()
    specs = generate_workload(200, 1.3, cluster, model, seed=11)
    run = parse_run_label(label, RunSpec(no_backfill=no_backfill))
    _, s = simulate(specs, cluster, model, run)
    avg_jct, makespan, preemptions, migrations = GOLDEN[(label, no_backfill)]
    assert s["completed"] == 200
    assert s["avg_jct"] == pytest.approx(avg_jct, rel=1e-9)
    assert s["makespan"] == pytest.approx(makespan, rel=1e-9)
    assert (s["preemptions"], s["migrations"]) == (preemptions, migrations)
