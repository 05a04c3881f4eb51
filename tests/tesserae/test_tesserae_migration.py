"""Migration-minimizing placement (DESIGN §4.1): hand-built rounds and a layout property."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.specs import decide, nodes_of, spec
from tesserae.core.cluster import parse_cluster_spec
from tesserae.placement._layout import TypePlacer
from tesserae.placement._layout.anchored import anchored_layout
from tesserae.placement._layout.nodes import TypeNodes
from tesserae.placement._layout.regrouped import regrouped_layout
from tesserae.placement._shortcuts import Shortcuts


def test_allocation_that_fits_around_running_jobs_moves_nobody() -> None:
    # Two nodes of 4. A and B run in the middle of the GPU range; D and E arrive. Every job fits
    # around A and B, so Tesserae keeps both where they are; so does first-fit, which never moves a
    # running job (new jobs take the lowest free ids).
    jobs = [spec(0, 2), spec(1, 2), spec(2, 2), spec(3, 2)]
    previous = {0: (2, 3), 1: (4, 5)}
    plan, sched, _ = decide("2x4", jobs, previous)
    assert plan.migrated == []
    assert plan.assignments[0].gpus == (2, 3) and plan.assignments[1].gpus == (4, 5)
    assert sorted(plan.started) == [2, 3]
    for r in (2, 3):
        assert len(nodes_of(sched.cluster, plan.assignments[r].gpus)) == 1
    ff, _, _ = decide("2x4", jobs, previous, placement="first-fit")
    assert ff.migrated == []
    assert [ff.assignments[r].gpus for r in range(4)] == [(2, 3), (4, 5), (0, 1), (6, 7)]


def test_one_unavoidable_move_gives_exactly_one_migration() -> None:
    # node 0: A (1 GPU, id 1) and B (2 GPUs, ids 2-3); node 1: C (1 GPU, id 4). E (4 GPUs) arrives and
    # must get a whole node. Emptying node 1 moves only C; emptying node 0 would move two jobs.
    jobs = [spec(0, 1), spec(1, 2), spec(2, 1), spec(3, 4)]
    previous = {0: (1,), 1: (2, 3), 2: (4,)}
    plan, sched, _ = decide("2x4", jobs, previous)
    assert plan.migrated == [2]
    assert plan.assignments[0].gpus == (1,) and plan.assignments[1].gpus == (2, 3)
    assert plan.assignments[3].gpus == (4, 5, 6, 7)
    assert nodes_of(sched.cluster, plan.assignments[2].gpus) == {0}
    assert plan.stopped == []
    # First-fit moves nobody and spreads E over both nodes (the lowest free ids); Blox's consolidated
    # placement never moves either, and never spreads, so E cannot start.
    ff, _, _ = decide("2x4", jobs, previous, placement="first-fit")
    assert ff.migrated == [] and ff.assignments[3].gpus == (0, 5, 6, 7)
    blox, _, _ = decide("2x4", jobs, previous, placement="consolidated")
    assert 3 not in blox.assignments and blox.migrated == []
    assert decide("2x4", jobs, previous, placement="tesserae")[0].migrated == [2]  # deterministic


def test_multi_node_job_gets_whole_nodes_with_fewest_moves() -> None:
    # Four nodes of 4; one 1-GPU job on each of nodes 0, 1, 2 and two on node 3. An 8-GPU job arrives:
    # it needs two whole nodes; the cheapest is to empty two nodes that hold one job each.
    jobs = [spec(0, 1), spec(1, 1), spec(2, 1), spec(3, 1), spec(4, 1), spec(5, 8)]
    previous = {0: (0,), 1: (4,), 2: (8,), 3: (12,), 4: (13,)}
    plan, sched, _ = decide("4x4", jobs, previous)
    assert len(plan.migrated) == 2
    assert len(nodes_of(sched.cluster, plan.assignments[5].gpus)) == 2
    assert plan.assignments[3].gpus == (12,) and plan.assignments[4].gpus == (13,)


def test_regrouped_layout_matches_logical_to_physical_nodes() -> None:
    # The regrouped layout packs from scratch (logical nodes in an arbitrary order); the matching must
    # map every logical node back onto the physical node its jobs held.
    nodes = TypeNodes(parse_cluster_spec("3x4"), 0)
    prev = {0: (8, 9, 10, 11), 1: (4, 5), 2: (6,)}
    layout = regrouped_layout(nodes, [0, 1, 2], {0: 4, 1: 2, 2: 1}, prev)
    assert layout is not None and layout.moved == set()
    assert layout.gpus == {0: (8, 9, 10, 11), 1: (4, 5), 2: (6,)}


def test_index_reuse_inside_a_node() -> None:
    # A moves within no node; B's node is kept and B keeps its exact indices even though a new job
    # lands on the same node.
    jobs = [spec(0, 2), spec(1, 1), spec(2, 1)]
    plan, _, _ = decide("1x4", jobs, {0: (1, 3), 1: (0,)})
    assert plan.assignments[0].gpus == (1, 3)
    assert plan.assignments[1].gpus == (0,)
    assert plan.assignments[2].gpus == (2,)


@st.composite
def keepable_rounds(draw: st.DrawFn) -> tuple[str, list[int], dict[int, tuple[int, ...]]]:
    """A cluster, gang sizes, and previous GPUs of the continuing jobs, such that a layout exists that
    keeps every continuing job in place and consolidates every job (built by construction)."""
    per_node = draw(st.sampled_from([4, 8]))
    n_nodes = draw(st.integers(1, 4))
    free = {n: list(range(n * per_node, (n + 1) * per_node)) for n in range(n_nodes)}
    sizes: list[int] = []
    prev: dict[int, tuple[int, ...]] = {}
    for _ in range(draw(st.integers(1, 12))):
        k = draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
        if k > per_node:
            whole = [n for n, f in free.items() if len(f) == per_node]
            need = k // per_node
            if len(whole) < need:
                continue
            chosen = draw(st.permutations(whole))[:need]
            gpus = [g for n in chosen for g in free.pop(n)]
        else:
            fits = [n for n, f in free.items() if len(f) >= k]
            if not fits:
                continue
            n = draw(st.sampled_from(fits))
            picks = draw(st.permutations(free[n]))[:k]
            free[n] = [g for g in free[n] if g not in picks]
            gpus = picks
        row = len(sizes)
        sizes.append(k)
        if draw(st.booleans()):
            prev[row] = tuple(sorted(gpus))
    return f"{n_nodes}x{per_node}", sizes, prev


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keepable_rounds(), st.randoms(use_true_random=False))
def test_running_jobs_stay_when_a_layout_keeps_them(case, rnd) -> None:
    cluster, sizes, prev = case
    # Priority order is arbitrary: shuffle the submit order, keep rows.
    order = list(range(len(sizes)))
    rnd.shuffle(order)
    jobs = [spec(i, k, submit=float(order.index(i))) for i, k in enumerate(sizes)]
    plan, sched, _ = decide(cluster, jobs, prev)
    assert sorted(plan.assignments) == list(range(len(sizes)))
    assert plan.migrated == [], f"moved {plan.migrated}"
    node_size = int(sched.cluster.node_num_gpus[0])
    for a in plan.assignments.values():
        assert len(nodes_of(sched.cluster, a.gpus)) == -(-len(a.gpus) // node_size)


def test_migrations_reported_per_round() -> None:
    jobs = [spec(0, 1), spec(1, 2), spec(2, 1), spec(3, 4)]
    _, sched, _ = decide("2x4", jobs, {0: (1,), 1: (2, 3), 2: (4,)})
    s = sched.summary()
    assert s["migrations_per_round_max"] == 1 and s["placement_rounds"] == 1
    assert np.isclose(s["migrations_per_round_mean"], 1.0)


@st.composite
def crowded_rounds(draw: st.DrawFn) -> tuple[str, list[int], dict[int, int], dict[int, tuple[int, ...]]]:
    """A full-ish cluster: continuing jobs on arbitrary (even fragmented) GPUs and new jobs that often
    fit only if running jobs move. Returns (cluster, hosts in priority order, sizes, previous GPUs)."""
    spec_ = draw(st.sampled_from(["4x4", "3x8", "6x4", "2x4,2x8", "5x8"]))
    cl = parse_cluster_spec(spec_)
    free = draw(st.permutations(list(range(cl.num_gpus))))
    left = cl.num_gpus
    size: dict[int, int] = {}
    prev: dict[int, tuple[int, ...]] = {}
    for row in range(draw(st.integers(1, 24))):
        k = draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4, 6, 8, 16]))
        if k > left:
            continue
        left -= k
        size[row] = k
        if draw(st.integers(0, 2)):  # two in three continue
            if draw(st.booleans()):  # on GPUs next to each other (mostly one node) or scattered
                taken = sorted(free[:k])
            else:
                start = draw(st.integers(0, len(free) - k))
                taken = sorted(free[start:start + k])
            free = [g for g in free if g not in taken]
            prev[row] = tuple(taken)
        else:
            free = free[k:]
    hosts = draw(st.permutations(sorted(size)))
    return spec_, list(hosts), size, prev


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded_rounds())
def test_pruned_regrouped_layout_never_changes_the_choice(case) -> None:
    # The regrouped layout stops as soon as its lower bound of moves shows it cannot beat the
    # anchored one; the bound must be sound (the whole layout agrees) and the choice unchanged.
    spec_, hosts, size, prev = case
    cluster = parse_cluster_spec(spec_)
    nodes = TypeNodes(cluster, 0)
    anchored = anchored_layout(nodes, hosts, size, prev)
    whole = regrouped_layout(nodes, hosts, size, prev)
    assert whole is not None
    to_beat = (len(anchored.spread), len(anchored.moved))
    pruned = regrouped_layout(nodes, hosts, size, prev, to_beat=to_beat)
    if pruned is None:
        assert (len(whole.spread), len(whole.moved)) >= to_beat
    else:
        assert (pruned.gpus, pruned.moved, pruned.spread) == (whole.gpus, whole.moved, whole.spread)
    # Soundness: a bound above the whole layout's own moves would prune a layout that beats this target.
    beaten = regrouped_layout(nodes, hosts, size, prev, to_beat=(len(whole.spread), len(whole.moved) + 1))
    assert beaten is not None and (beaten.gpus, beaten.moved) == (whole.gpus, whole.moved)
    chosen = TypePlacer(cluster, 0).place(hosts, size, prev)
    reference = TypePlacer(cluster, 0, Shortcuts(prune_regrouped=False)).place(hosts, size, prev)
    assert (chosen.gpus, chosen.moved, chosen.spread, chosen.method) == \
        (reference.gpus, reference.moved, reference.spread, reference.method)
