"""Discretized 2D-LAS: queues, demotion instants (on Tiresias' whole-second clock), running jobs keeping
their place, PromoteKnob.

Every expected figure is worked out by hand in the comments. The built-in model runs 1 iteration
per second, so a job's duration is its isolated run time; restart overheads are 0 unless stated.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from support.specs import job
from tesserae.config import RunSpec
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.core.jobs import JobStatus, JobTable
from tesserae.profiles.default_model import DefaultModel
from tesserae.scheduling.base import make_policy, policy_names
from tesserae.scheduling.tiresias_las import TiresiasLas
from tesserae.sim.metrics import job_records
from tesserae.sim.runner import simulate


def _run(jobs, cluster: str, **kw):
    base = dict(policy="tiresias-las", placement="tiresias", round_seconds=300, restart_overhead=0)
    base.update(kw)
    result, summary = simulate(jobs, parse_cluster_spec(cluster), DefaultModel(), RunSpec.flat(**base))
    return {r["job_id"]: r for r in job_records(result)}, summary, result


def test_registered_and_built_from_its_options() -> None:
    assert {"tiresias-las", "tiresias-gittins"} <= set(policy_names())
    p = make_policy("tiresias-las", {"queues": "3250,7200", "promote_knob": "2"})
    assert isinstance(p, TiresiasLas)
    assert p.num_queues == 3 and p.promote_knob == 2.0
    assert make_policy("tiresias-las", {"queues": (3250.0, 7200.0)}).num_queues == 3
    for bad, match in (({"skew_threshold": 0.5}, "policy 'tiresias-las' has no option 'skew_threshold'"),
                       ({"queues": "7200,3250"}, "option 'queues'.*increasing"),
                       ({"promote_knob": "-1"}, "option 'promote_knob'")):
        with pytest.raises(InputError, match=match):
            make_policy("tiresias-las", bad)
    default = make_policy("tiresias-las")
    assert default.thresholds.tolist() == [3600.0] and default.promote_knob == 0.0


@pytest.mark.parametrize("queues", [(0.0,), (-5.0,), (100.0, 100.0), (200.0, 100.0), (math.inf,)])
def test_bad_thresholds_are_input_errors(queues) -> None:
    with pytest.raises(InputError, match="queues"):
        TiresiasLas(queues=queues)


def test_bad_knob_is_input_error() -> None:
    with pytest.raises(InputError, match="promote"):
        TiresiasLas(promote_knob=-1)


def test_multi_gpu_demotion_is_an_event_at_the_exact_crossing() -> None:
    # One node of 2 GPUs, threshold 200 GPU-s. J0 (2 GPUs, 1000 s) starts at 0 and attains 2 GPU-s
    # per second, so it crosses 200 at t=100 (not 200). J1 (2 GPUs, 30 s) arrives at 50 and waits
    # behind the running J0 in queue 0. At 100 J0 drops to queue 1 and J1 preempts it: J1 runs
    # 100..130 (JCT 80); J0 resumes at 130 with 900 s left and ends at 1030.
    jobs = [job(0, 0, 2, 1000), job(1, 50, 2, 30)]
    recs, summary, result = _run(jobs, "1x2", queues=(200.0,), event_driven=True)
    assert recs[1]["jct"] == pytest.approx(80.0)
    assert recs[0]["jct"] == pytest.approx(1030.0)
    assert recs[0]["preemptions"] == 1
    assert summary["demotions"] == 1
    assert 100.0 in result.timeline["time"].tolist()  # a decision at the demotion instant


def test_demotion_waits_for_the_next_whole_second_as_tiresias_clock() -> None:
    # Threshold 200 GPU-s on 3 GPUs: the crossing is at 66.67 s. Tiresias' simulator wakes at
    # ceil(200 / 3) = 67 s (its clock counts whole seconds), and so do we by default; with tick=0
    # the decision is at the exact crossing.
    t = JobTable([job(0, 0, 3, 5000)])
    t.status[:] = JobStatus.RUNNING
    rows = np.array([0])
    for tick, expected in ((1.0, 67.0), (0.0, 200.0 / 3.0)):
        p = TiresiasLas(queues=(200.0,), tick=tick)
        p.order(t, rows, 0.0)
        assert p.next_event(t, rows, rows, 0.0) == pytest.approx(expected)
    with pytest.raises(ValueError, match="tick"):
        TiresiasLas(tick=-1.0)
    assert make_policy("tiresias-las").tick == 1.0 and make_policy("tiresias-las", {"tick": "0"}).tick == 0.0
    assert make_policy("tiresias-gittins", {"tick": "0.5"}).tick == 0.5
    with pytest.raises(InputError, match="option 'tick'"):
        make_policy("tiresias-las", {"tick": "-1"})


def test_jobs_crossing_within_one_tick_join_the_tail_in_arrival_order() -> None:
    # Round mode, threshold 600: job 0 (4 GPUs) crossed at 150.5 and job 1 (8 GPUs, arrived later)
    # at 150.25. Both take effect at the 151 s tick, a tie that arrival order breaks (Tiresias
    # walks its runnable list, in arrival order); with tick=0 job 1 crossed first and leads.
    for tick, expected in ((1.0, [0, 1]), (0.0, [1, 0])):
        t = JobTable([job(0, 0, 4, 5000), job(1, 0, 8, 5000)])
        t.status[:] = JobStatus.RUNNING
        p = TiresiasLas(queues=(600.0,), tick=tick)
        rows = np.arange(2)
        p.order(t, rows, 0.0)
        t.attained[:], t.executed[:] = [600.0 + 4 * 99.5, 600.0 + 8 * 99.75], 250.0
        assert p.order(t, rows, 250.0).tolist() == expected


def test_demotion_in_the_middle_of_a_round_takes_the_crossing_instant() -> None:
    # One node of 3 GPUs, threshold 200 GPU-s, 300 s rounds (round mode). B (id 0, 1 GPU) and A
    # (id 1, 2 GPUs) both start at 0. A crosses 200 at t=100, B at t=200: both are demoted in the
    # middle of the first round, and queue 1 holds A (entered at 100) ahead of B (entered at 200).
    # C (1 GPU) arrives at 250 in queue 0. At the 300 s decision: C takes 1 GPU, A keeps its 2 and
    # B, at the tail of queue 1, is preempted. Demoting at the round boundary instead would tie A
    # and B at 300 and the job-id tie-break would keep B and preempt A.
    jobs = [job(0, 0, 1, 2000), job(1, 0, 2, 2000), job(2, 250, 1, 100)]
    recs, summary, _ = _run(jobs, "1x3", queues=(200.0,))
    assert recs[0]["preemptions"] == 1
    assert recs[1]["preemptions"] == 0
    assert summary["demotions"] == 2
    # C runs 300..400; B resumes at the 600 s round.
    assert recs[2]["jct"] == pytest.approx(150.0)


def test_jobs_demoted_between_decisions_join_the_tail_in_crossing_order() -> None:
    # The policy on its own, round mode: job 0 (4 GPUs) and job 1 (8 GPUs) run from 0. At t=250
    # job 0 has 1000 GPU-s (it crossed 600 at 250 - 400 / 4 = 150) and job 1 has 2000 (crossed at
    # 250 - 1400 / 8 = 75): job 1 joined queue 1 first, so it is ahead although it arrived later.
    t = JobTable([job(0, 0, 4, 5000), job(1, 0, 8, 5000)])
    t.status[:] = JobStatus.RUNNING
    p = TiresiasLas(queues=(600.0,))
    rows = np.arange(2)
    p.order(t, rows, 0.0)
    t.attained[:], t.executed[:] = [1000.0, 2000.0], 250.0
    assert p.order(t, rows, 250.0).tolist() == [1, 0]
    assert p.queue_lists(rows) == [[], [1, 0]]


def test_next_event_is_the_earliest_demotion_or_promotion() -> None:
    t = JobTable([job(0, 0, 4, 5000), job(1, 0, 1, 5000), job(2, 0, 8, 5000)])
    p = TiresiasLas(queues=(600.0,), promote_knob=2.0)
    rows = np.arange(3)
    t.status[:] = JobStatus.RUNNING
    p.order(t, rows, 0.0)
    # At t=100: job 0 (4 GPUs) has 400 GPU-s, so it will cross 600 at 150; job 1 (1 GPU) has 100,
    # so at 600. Job 2 (8 GPUs) ran 0..100 (800 GPU-s: it crossed 600 at 75) and now waits in queue 1.
    t.attained[:] = [400.0, 100.0, 800.0]
    t.executed[:] = 100.0
    t.status[2] = JobStatus.QUEUED
    t.last_stop[2] = 100.0
    order = p.order(t, rows, 100.0)
    assert p.queue_of(rows).tolist() == [0, 0, 1]
    assert order.tolist() == [0, 1, 2]
    # Promotion of job 2 once its waiting time reaches P x executed: first run at 0, so at
    # 0 + (1 + 2) x 100 = 300; demotion of job 0 at 150.
    assert p.next_event(t, rows, np.array([0, 1]), 100.0) == pytest.approx(150.0)
    assert p.next_event(t, rows, np.array([1]), 100.0) == pytest.approx(300.0)
    t.status[:2] = JobStatus.QUEUED
    assert p.next_event(t, rows, np.array([], dtype=np.int64), 100.0) == pytest.approx(300.0)
    assert TiresiasLas(queues=(600.0,)).next_event(t, rows, np.array([], dtype=np.int64), 100.0) == math.inf


def test_running_jobs_keep_their_place_within_a_queue() -> None:
    # Two equal jobs on one GPU in queue 0: the running one stays first even though the waiting
    # one arrived earlier (after the pass, who got no GPUs moves behind who did); job 2 stays at
    # the tail.
    t = JobTable([job(0, 0, 1, 1000), job(1, 5, 1, 1000), job(2, 10, 1, 1000)])
    p = TiresiasLas(queues=(3600.0,))
    rows = np.arange(3)
    p.order(t, rows, 10.0)
    t.status[1] = JobStatus.RUNNING  # job 1 won the GPU at t=10 (say job 0 was not yet submitted)
    t.attained[1] = t.executed[1] = 100.0
    assert p.order(t, rows, 110.0).tolist() == [1, 0, 2]
    assert p.order(t, rows, 400.0).tolist() == [1, 0, 2]


def test_three_queues_and_skipping_a_queue_within_one_interval() -> None:
    # Thresholds 3250 and 7200 (Tiresias' simulator). An 8-GPU job running 0..1000 attains 8000
    # GPU-s: it crossed 3250 at 406.25 and 7200 at 900, so it is in queue 2 (two demotions).
    t = JobTable([job(0, 0, 8, 5000)])
    p = TiresiasLas(queues=(3250.0, 7200.0))
    p.order(t, np.array([0]), 0.0)
    t.status[0] = JobStatus.RUNNING
    t.attained[0], t.executed[0] = 8000.0, 1000.0
    p.order(t, np.array([0]), 1000.0)
    assert p.queue_of(np.array([0])).tolist() == [2]
    assert p.summary()["demotions"] == 2


def _starvation_jobs():
    # One GPU, threshold 1000 GPU-s, event-driven. J0 (3000 s) runs 0..1000 and is demoted at 1000;
    # J1 (900 s, arrived at 10) runs 1000..1900. J2 (400 s) arrives at 1600.
    return [job(0, 0, 1, 3000), job(1, 10, 1, 900), job(2, 1600, 1, 400)]


def test_promotion_after_p_times_executed_time() -> None:
    # P = 0.5: J0 waits from last_stop=1000 having executed 1000 s, so it is promoted to queue 0
    # (counter reset) at 1000 + 0.5 x 1000 = 1500 -- a decision is taken then. It queues behind the
    # running J1 (which keeps its place) but AHEAD of J2, which enters queue 0 at 1600. At 1900 J0
    # runs again; its reset counter reaches 1000 GPU-s at 2900, where it is demoted and J2 runs
    # 2900..3300 (JCT 1700). J0 resumes at 3300 with 1000 s left and ends at 4300.
    recs, summary, result = _run(_starvation_jobs(), "1x1", queues=(1000.0,), promote_knob=0.5,
                                 event_driven=True)
    assert 1500.0 in result.timeline["time"].tolist()
    assert summary["promotions"] == 1
    assert summary["demotions"] == 2
    assert recs[1]["jct"] == pytest.approx(1890.0)
    assert recs[2]["jct"] == pytest.approx(1700.0)
    assert recs[0]["jct"] == pytest.approx(4300.0)


def test_promote_knob_zero_disables_the_guard() -> None:
    # Without the guard J2 (queue 0) overtakes the demoted J0 at 1900: J2 runs 1900..2300.
    recs, summary, _ = _run(_starvation_jobs(), "1x1", queues=(1000.0,), promote_knob=0.0, event_driven=True)
    assert summary["promotions"] == 0
    assert recs[2]["jct"] == pytest.approx(700.0)
    assert recs[0]["jct"] == pytest.approx(4300.0)


def test_promotion_resets_the_counter_and_executed_time() -> None:
    t = JobTable([job(0, 0, 2, 9000)])
    p = TiresiasLas(queues=(100.0,), promote_knob=1.0)
    rows = np.array([0])
    p.order(t, rows, 0.0)  # it starts at 0
    t.status[0] = JobStatus.RUNNING
    t.attained[0], t.executed[0] = 400.0, 200.0  # ran 0..200 on 2 GPUs: crossed 100 at 50
    p.order(t, rows, 200.0)  # and is preempted at 200
    assert p.queue_of(rows).tolist() == [1]
    t.status[0] = JobStatus.QUEUED
    t.last_stop[0] = 200.0
    p.order(t, rows, 250.0)
    # Promoted once its waiting time (from 200) reaches 1 x 200 s executed: at 400.
    assert p.next_event(t, rows, np.array([], dtype=np.int64), 250.0) == pytest.approx(400.0)
    p.order(t, rows, 400.0)
    assert p.queue_of(rows).tolist() == [0]
    assert p.service_since_reset(t, rows).tolist() == [0.0]
    # Runs again 400..420 on 2 GPUs: 40 GPU-s since the reset, still queue 0; demoted at 450.
    t.status[0] = JobStatus.RUNNING
    t.attained[0], t.executed[0] = 440.0, 220.0
    p.order(t, rows, 420.0)
    assert p.queue_of(rows).tolist() == [0]
    assert p.next_event(t, rows, rows, 420.0) == pytest.approx(450.0)
    # Preempted at 450 right after its demotion: 50 s executed since the reset, first run since
    # the reset at 400, so promoted again at 400 + (1 + 1) x 50 = 500.
    t.status[0] = JobStatus.QUEUED
    t.attained[0], t.executed[0], t.last_stop[0] = 500.0, 250.0, 450.0
    p.order(t, rows, 450.0)
    assert p.queue_of(rows).tolist() == [1]
    assert p.next_event(t, rows, np.array([], dtype=np.int64), 450.0) == pytest.approx(500.0)
    assert p.summary()["promotions"] == 1


def test_promotion_adds_up_every_wait_since_the_first_run_after_the_reset() -> None:
    # Tiresias' last_pending_time is zeroed only by a promotion. One GPU, threshold 100, P = 1: the
    # job runs 0..100 (demoted at 100), waits 100..150, runs 150..250 and waits from 250. It has
    # executed 200 s and already waited 50, so it is promoted after 150 more: at 400 (not at
    # 250 + 200 = 450, as counting only the current wait would give).
    t = JobTable([job(0, 0, 1, 9000)])
    p = TiresiasLas(queues=(100.0,), promote_knob=1.0)
    rows = np.array([0])
    p.order(t, rows, 0.0)
    for now, status, executed in [(100.0, JobStatus.RUNNING, 100.0), (150.0, JobStatus.QUEUED, 100.0),
                                  (250.0, JobStatus.RUNNING, 200.0), (260.0, JobStatus.QUEUED, 200.0)]:
        t.status[0], t.attained[0], t.executed[0] = status, executed, executed
        t.last_stop[0] = {150.0: 100.0, 260.0: 250.0}.get(now, t.last_stop[0])
        p.order(t, rows, now)
    assert p.queue_of(rows).tolist() == [1]
    assert p.next_event(t, rows, np.array([], dtype=np.int64), 260.0) == pytest.approx(400.0)
    p.order(t, rows, 399.0)
    assert p.queue_of(rows).tolist() == [1]
    p.order(t, rows, 400.0)
    assert p.queue_of(rows).tolist() == [0]


def test_state_is_per_table_and_grows_lazily() -> None:
    p = TiresiasLas(queues=(10.0,))
    t1 = JobTable([job(0, 0, 1, 100)])
    t1.status[0] = JobStatus.RUNNING
    p.order(t1, np.array([0]), 0.0)
    t1.attained[0] = 50.0
    p.order(t1, np.array([0]), 50.0)
    assert p.summary()["demotions"] == 1
    t2 = JobTable([job(0, 0, 1, 100), job(1, 0, 1, 100)])
    assert p.order(t2, np.array([0, 1]), 0.0).tolist() == [0, 1]
    assert p.summary()["demotions"] == 0
    assert p.queue_of(np.array([0, 1])).tolist() == [0, 0]


def test_single_queue_is_fifo_with_running_jobs_first() -> None:
    t = JobTable([job(0, 0, 1, 100), job(1, 5, 1, 100)])
    p = TiresiasLas(queues=())
    assert p.num_queues == 1
    p.order(t, np.array([0, 1]), 5.0)  # job 1 won the GPU at this decision
    t.status[1] = JobStatus.RUNNING
    assert p.order(t, np.array([0, 1]), 10.0).tolist() == [1, 0]
    assert p.next_event(t, np.array([0, 1]), np.array([1]), 10.0) == math.inf
