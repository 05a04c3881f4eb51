"""Each Tiresias queue is a list whose order persists (SymbioticLab/Tiresias, ``run_sim.py``).

The policy on its own: each test sets job statuses by hand to what a pass decided (RUNNING = got
GPUs) and checks the lists the next decision sees. Thresholds are GPU-seconds; the built-in model
runs 1 iteration per second.
"""

from __future__ import annotations

import numpy as np

from support.specs import job
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.scheduling.tiresias_gittins import TiresiasGittins
from tesserae.scheduling.tiresias_las import TiresiasLas

R, Q = JobStatus.RUNNING, JobStatus.QUEUED


def _set(t: JobTable, row: int, status: JobStatus, attained: float | None = None, stop: float | None = None) -> None:
    t.status[row] = status
    if attained is not None:
        t.attained[row] = attained
        t.executed[row] = attained / t.num_gpus[row]
    if stop is not None:
        t.last_stop[row] = stop


def test_jobs_that_got_no_gpus_move_behind_those_that_did() -> None:
    # Queue 0 is [A, B, C] by arrival. The pass gives GPUs to B and C only (A, 8 GPUs, did not fit):
    # at the next decision the list is [B, C, A].
    t = JobTable([job(0, 0, 8, 1000), job(1, 1, 1, 1000), job(2, 2, 1, 1000)])
    p = TiresiasLas(queues=(10_000.0,))
    rows = np.arange(3)
    assert p.order(t, rows, 2.0).tolist() == [0, 1, 2]
    _set(t, 1, R)
    _set(t, 2, R)
    assert p.order(t, rows, 10.0).tolist() == [1, 2, 0]
    assert p.queue_lists(rows) == [[1, 2, 0], []]


def test_a_started_job_stays_ahead_after_it_is_preempted() -> None:
    # P (4 GPUs) and S (1 GPU) start at 0; threshold 100. P crosses it at 25 and is preempted at 50,
    # waiting in queue 1. S crosses at 150 and joins queue 1 behind P, but keeps running while P
    # does not fit, so after that pass S is ahead of P. S is preempted at 200. At 250 both wait and
    # S is still ahead, although P entered queue 1 first (re-sorting by entry time would put P
    # first). Z, which arrived at 120 and crosses at 250, is a later entrant: it goes behind both.
    t = JobTable([job(0, 0, 4, 9000), job(1, 0, 1, 9000), job(2, 120, 1, 9000)])
    p = TiresiasLas(queues=(100.0,))
    p.order(t, np.array([0, 1]), 0.0)
    _set(t, 0, R, 200.0)
    _set(t, 1, R, 50.0)
    assert p.order(t, np.array([0, 1]), 50.0).tolist() == [1, 0]
    _set(t, 0, Q, stop=50.0)
    _set(t, 1, R, 150.0)
    rows = np.arange(3)
    assert p.order(t, rows, 150.0).tolist() == [2, 0, 1]  # S at the tail of queue 1
    _set(t, 2, R, 50.0)  # Z runs from 150
    assert p.order(t, rows, 200.0).tolist() == [2, 1, 0]  # S got GPUs, P did not: S ahead
    _set(t, 1, Q, 200.0, stop=200.0)
    _set(t, 2, R, 100.0)
    assert p.order(t, rows, 250.0).tolist() == [1, 0, 2]
    assert p.queue_lists(rows) == [[], [1, 0, 2]]


def test_a_demoted_job_goes_to_the_tail_of_the_next_queue() -> None:
    # W1 and W2 run from 0 and cross the threshold (100) together at 100: both join queue 1, in
    # arrival order. D arrives at 100 in queue 0. The pass runs D and W1; W2 waits. When the
    # running D crosses at 200 it joins queue 1 behind the waiting W2, so the next pass serves W1
    # and W2 before D.
    t = JobTable([job(0, 0, 1, 9000), job(1, 0, 1, 9000), job(2, 100, 1, 9000)])
    p = TiresiasLas(queues=(100.0,))
    p.order(t, np.array([0, 1]), 0.0)
    _set(t, 0, R, 100.0)
    _set(t, 1, R, 100.0)
    rows = np.arange(3)
    assert p.order(t, rows, 100.0).tolist() == [2, 0, 1]
    assert p.queue_lists(rows) == [[2], [0, 1]]
    _set(t, 1, Q, stop=100.0)
    _set(t, 2, R, 100.0)
    _set(t, 0, R, 200.0)
    assert p.order(t, rows, 200.0).tolist() == [0, 1, 2]
    assert p.queue_lists(rows) == [[], [0, 1, 2]]


def test_a_promoted_job_goes_to_the_tail_of_queue_0() -> None:
    # O ran 0..100 (demoted at 100) and waits from 100; P = 1, so it is promoted at 0 + 2 x 100 =
    # 200, its counter reset. A and B entered queue 0 before 200, C after: queue 0 is then
    # [A, B, O, C].
    t = JobTable([job(0, 0, 1, 9000), job(1, 50, 1, 9000), job(2, 150, 1, 9000), job(3, 250, 1, 9000)])
    p = TiresiasLas(queues=(100.0,), promote_knob=1.0)
    p.order(t, np.array([0]), 0.0)
    _set(t, 0, R, 100.0)
    p.order(t, np.array([0, 1]), 100.0)
    _set(t, 0, Q, stop=100.0)
    p.order(t, np.arange(3), 150.0)
    assert p.queue_lists(np.arange(3)) == [[1, 2], [0]]
    p.order(t, np.arange(3), 200.0)
    assert p.queue_lists(np.arange(3)) == [[1, 2, 0], []]
    assert p.service_since_reset(t, np.array([0])).tolist() == [0.0]
    assert p.order(t, np.arange(4), 250.0).tolist() == [1, 2, 0, 3]
    assert p.summary()["promotions"] == 1


def test_new_jobs_go_before_jobs_moved_at_the_same_instant() -> None:
    # Tiresias appends arrivals to queue 0, then walks its runnable list (arrival order) for
    # promotions. O (promoted at 200) and N (arrived at 200) land in queue 0 at the same instant:
    # N first.
    t = JobTable([job(0, 0, 1, 9000), job(1, 200, 1, 9000)])
    p = TiresiasLas(queues=(100.0,), promote_knob=1.0)
    p.order(t, np.array([0]), 0.0)
    _set(t, 0, R, 100.0)
    p.order(t, np.array([0]), 100.0)
    _set(t, 0, Q, stop=100.0)
    p.order(t, np.array([0]), 150.0)
    assert p.order(t, np.array([0, 1]), 200.0).tolist() == [1, 0]


def test_gittins_sorted_order_persists_on_later_ties() -> None:
    # Toy prior (100, 200, 1000 GPU-s), quantum 100, Tiresias' index: A and B (same submit time)
    # start tied at 0 GPU-s (list order: A, B). Once B has 100 GPU-s and A 50, B's index is higher
    # and the list becomes [B, A]. When both reach the same step again (A at 150, B at 199), the
    # tie keeps the sorted list: B stays first, as with Tiresias' in-place sort.
    t = JobTable([job(0, 0, 1, 9000), job(1, 0, 1, 9000)])
    p = TiresiasGittins(queues=(10_000.0,), prior=[100.0, 200.0, 1000.0], quantum=100.0)
    rows = np.arange(2)
    assert p.order(t, rows, 0.0).tolist() == [0, 1]
    _set(t, 0, R, 50.0)
    _set(t, 1, R, 100.0)
    assert p.order(t, rows, 100.0).tolist() == [1, 0]
    _set(t, 0, R, 150.0)
    _set(t, 1, R, 199.0)
    assert p.order(t, rows, 200.0).tolist() == [1, 0]
