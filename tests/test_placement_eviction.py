"""Placements that must evict running jobs do so in the policy's rank order (DESIGN §4.4)."""

from __future__ import annotations

import numpy as np
import pytest

from support.specs import job
from tesserae.core.advice import Advice
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobTable
from tesserae.core.plan import Assignment
from tesserae.placement._evict import rank_aware_layout
from tesserae.placement.consolidated import Consolidated
from tesserae.placement.tiresias import TiresiasPlacement
from tesserae.profiles.default_model import DefaultModel

MODEL = DefaultModel()


def _placer(placement, cluster: str, jobs, previous: dict[int, tuple[int, ...]], order: list[int]):
    table = JobTable(jobs)
    prev = {r: Assignment(r, g) for r, g in previous.items()}
    return placement.begin(parse_cluster_spec(cluster), table, prev, MODEL, Advice(np.asarray(order)))


@pytest.mark.parametrize("placement", [Consolidated(), TiresiasPlacement()])
def test_node_chosen_spares_the_higher_ranked_job(placement) -> None:
    # Node 0 holds job 0 (4 GPUs), node 1 jobs 1 (2 GPUs) and 2 (1 GPU) and one free GPU. Job 3 (4
    # GPUs, vgg19: must be consolidated) ranks first, then 0, 1, 2. Both nodes fit it with evictions;
    # the layout must take node 1, evicting the two lowest-ranked jobs, not node 0's job 0.
    jobs = [job(0, 0, 4, 100), job(1, 0, 2, 100), job(2, 0, 1, 100), job(3, 0, 4, 100, "vgg19")]
    p = _placer(placement, "2x4", jobs, {0: (0, 1, 2, 3), 1: (4, 5), 2: (6,)}, [3, 0, 1, 2])
    assert p.try_admit(3)
    assert p.assigned[3].gpus == (4, 5, 6, 7)
    assert p.try_admit(0) and p.assigned[0].gpus == (0, 1, 2, 3)
    assert p.evicted == {1, 2}


@pytest.mark.parametrize("placement", [Consolidated(), TiresiasPlacement()])
def test_on_a_node_the_lowest_ranked_holder_leaves_first(placement) -> None:
    # One node: job 1 (rank 2) on GPUs 0-1, job 2 (rank 1) on GPUs 2-3; new job 0 (rank 0) needs 2.
    # Evicting the highest row id (the old rule) would take job 2, which the policy ranks above job 1.
    jobs = [job(0, 0, 2, 100, "vgg19"), job(1, 0, 2, 100), job(2, 0, 2, 100)]
    p = _placer(placement, "1x4", jobs, {1: (0, 1), 2: (2, 3)}, [0, 2, 1])
    assert p.try_admit(0)
    assert p.assigned[0].gpus == (0, 1)
    assert p.evicted == {1}
    assert p.try_admit(2) and p.assigned[2].gpus == (2, 3)


def test_unranked_holders_leave_before_ranked_ones() -> None:
    # A running job the policy did not rank at all (it will not run) leaves first.
    jobs = [job(0, 0, 2, 100), job(1, 0, 2, 100), job(2, 0, 2, 100)]
    p = _placer(Consolidated(), "1x4", jobs, {1: (0, 1), 2: (2, 3)}, [0, 2])
    assert p.try_admit(0) and p.evicted == {1}


def test_rank_aware_layout_multi_node_takes_the_nodes_of_the_lowest_ranked() -> None:
    free = np.array([0, 0, 1, 0])
    cap = np.full(4, 4)
    # Node 0: rank 1 (4 GPUs); node 1: rank 5 (4 GPUs); node 2: rank 7 (3 GPUs) + 1 free; node 3: rank 3.
    p_pos, p_cnt, p_rank = np.array([0, 1, 2, 3]), np.array([4, 4, 3, 4]), np.array([1, 5, 7, 3])
    assert rank_aware_layout(free, cap, p_pos, p_cnt, p_rank, 8) == [(2, 4), (1, 4)]
    assert rank_aware_layout(free, cap, p_pos, p_cnt, p_rank, 2) == [(2, 2)]
    assert rank_aware_layout(free, cap, p_pos, p_cnt, p_rank, 17) is None
    # A free fit needs no eviction at all.
    assert rank_aware_layout(np.array([0, 3, 0, 0]), cap, p_pos, p_cnt, p_rank, 2) == [(1, 2)]
