"""Property tests of tenant queues over random trees and workloads (first-fit: placement never the limit).

- never more GPUs than exist, gangs whole;
- a queue under its guarantee with a waiting job that fits the guarantee is never left short
  while another queue borrows (holds more than its guarantee);
- a production job only runs inside its queue's guarantee;
- deterministic: the same inputs give the same runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.plans import CheckingScheduler
from tesserae.config import RunSpec, build_scheduler
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobSpec, JobStatus, JobTable
from tesserae.core.plan import Assignment, Plan
from tesserae.core.queues import PRIORITY_CLASSES, build_tree, parse_config
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.engine import SimConfig, Simulator
from tesserae.sim.metrics import job_records


class Checked(CheckingScheduler):
    """The plan checker, and the queues' rules: guarantees, borrowing only when nobody who fits waits."""

    def decide(self, now: float, table: JobTable, active: np.ndarray, previous: Mapping[int, Assignment]) -> Plan:
        plan = super().decide(now, table, active, previous)
        step = self.queues
        tree = step.tree
        leaf, cls = step.rows(table)
        run = np.fromiter(plan.assignments, dtype=np.int64, count=len(plan.assignments))
        used_leaf = np.bincount(leaf[run], weights=table.num_gpus[run], minlength=tree.num_leaves)
        g_leaf = tree.guarantee[list(tree.leaves)]
        prod_leaf = np.bincount(leaf[run[cls[run] == 0]], weights=table.num_gpus[run[cls[run] == 0]],
                                minlength=tree.num_leaves)
        assert (prod_leaf <= g_leaf).all(), "a production job runs beyond its queue's guarantee"
        borrowing = used_leaf > g_leaf
        if borrowing.any():
            waiting = np.setdiff1d(np.asarray(active, dtype=np.int64), run)
            for r in waiting.tolist():
                q, k = int(leaf[r]), int(table.num_gpus[r])
                fits = used_leaf[q] + k <= g_leaf[q] and (cls[r] != 0 or prod_leaf[q] + k <= g_leaf[q])
                assert not fits or not (borrowing & (np.arange(tree.num_leaves) != q)).any(), (
                    f"queue {tree.names[tree.leaves[q]]} is short of its guarantee while another borrows")
        return plan


@st.composite
def setups(draw):
    nodes = draw(st.integers(1, 4))
    gpus = nodes * 4
    n_top = draw(st.integers(1, 3))
    queues, leaves = [], []
    left = gpus
    for i in range(n_top):
        g = draw(st.integers(0, left))
        left -= g
        kids = draw(st.integers(0, 2))
        entry = {"name": f"o{i}", "guarantee": g, "weight": draw(st.sampled_from([1.0, 2.0, 0.5]))}
        if draw(st.booleans()):
            entry["borrow_limit"] = draw(st.integers(0, gpus))
        queues.append(entry)
        kid_left = g
        for k in range(kids):
            kg = draw(st.integers(0, kid_left))
            kid_left -= kg
            queues.append({"name": f"o{i}t{k}", "parent": f"o{i}", "guarantee": kg,
                           "policy": draw(st.sampled_from([None, "las", "fifo"]))})
            leaves.append(f"o{i}t{k}")
        if kids == 0:
            leaves.append(f"o{i}")
    n_jobs = draw(st.integers(1, 25))
    jobs = []
    for j in range(n_jobs):
        jobs.append(JobSpec(j, float(draw(st.integers(0, 3000))), draw(st.sampled_from([1, 1, 2, 4, 8])),
                            "resnet50", float(draw(st.integers(100, 4000))), None,
                            queue=draw(st.sampled_from(leaves)),
                            priority_class=draw(st.sampled_from(PRIORITY_CLASSES))))
    return nodes, queues, jobs, draw(st.sampled_from(["fifo", "las", "tiresias-las"]))


def run(nodes: int, queues: list, jobs: list, policy: str):
    cluster = parse_cluster_spec(f"{nodes}x4")
    tree = build_tree(parse_config({"queues": queues}), gpus_by_type=cluster.gpus_by_type)
    inner = build_scheduler(cluster, DefaultModel(), RunSpec(policy=policy, placement="first-fit"), tree)
    sched = Checked(cluster, inner.policy, inner.placement, inner.model, inner.config, queues=inner.queues)
    sim = Simulator(jobs, cluster, sched, SimConfig(round_seconds=300.0, restart_overhead=10.0))
    sim.reject(sched.queues.never_runs(sim.table), "over_queue_limit")
    return sim.run(), sched


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups())
def test_guarantees_capacity_and_determinism(setup) -> None:
    nodes, queues, jobs, policy = setup
    result, sched = run(nodes, queues, jobs, policy)
    t = result.table
    never = (t.num_gpus > nodes * 4) | sched.queues.never_runs(t)
    assert (t.status[~never] == JobStatus.DONE).all(), "every job that can run finishes"
    again, _ = run(nodes, queues, jobs, policy)
    assert job_records(result) == job_records(again) or all(
        str(a) == str(b) for a, b in zip(job_records(result), job_records(again), strict=True))
