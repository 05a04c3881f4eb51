"""Issue 30's dashboard fixes, without a server: job labels readable on every colour, held jobs shown
as held, whole waits, run numbers per job, GPU cells with progress, and the cluster-over-time series."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tesserae.core.timeseries import busy_and_waiting, peak_sample
from tesserae.web.cluster_pages import grid, job_progress
from tesserae.web.job_pages import run_timeline
from tesserae.web.templating import contrast, environment, job_colour, job_ink, shown_state, without_cli_hint


def test_every_job_label_meets_wcag_aa_contrast() -> None:
    """Before: white labels on hsl(h, 62%, 58%) were 1.6-2.1:1 on the light hues."""
    assert min(contrast("#ffffff", job_colour(j)) for j in range(360)) < 2.2  # white would fail
    worst = min(contrast(job_ink(j), job_colour(j)) for j in [None, *range(5000)])
    assert worst >= 4.5


def test_a_held_job_shows_held_and_its_page_no_cli_hint_beside_the_button() -> None:
    assert shown_state({"state": "queued", "held": True}) == "held"
    assert shown_state({"state": "preempted", "held": True}) == "held"
    assert shown_state({"state": "running", "held": True}) == "running"
    assert shown_state({"state": "queued", "held": False}) == "queued"
    assert without_cli_hint("held (tesserae release 12)") == "held"
    assert without_cli_hint("waiting for 4 GPUs (2 free)") == "waiting for 4 GPUs (2 free)"
    page = _render_job({"state": "queued", "held": True, "pending_reason": "held (tesserae release 7)"},
                       actions={"cancel": True, "hold": False, "release": True})
    assert '>held</span>' in page and 'data-testid="release"' in page
    assert "tesserae release" not in page and ">queued</span>" not in page


def test_waited_counts_every_wait_and_says_so() -> None:
    """Before: the job page and list showed only the wait before the first start (a preempted job: 0 s)."""
    job = {"state": "running", "waited_seconds": 3700.0, "queueing_seconds": 0.0, "preemptions": 2}
    page = _render_job(job)
    assert "1 h 01 min" in page and "after each of 2 preemption(s)" in page
    listing = environment().get_template("_jobs.html").render(
        jobs=[_job(job)], matched=1, total=1, list_limit=10, max_rows=10, now=0.0,
        q={"user": "", "state": "", "since": "", "q": "", "sort": "id", "order": "desc"})
    assert "1 h 01 min" in listing and "waited (all)" in listing


def test_runs_are_numbered_per_job_not_by_the_servers_run_id() -> None:
    job = {"submit_time": 0.0, "finish_time": 100.0}
    runs = [{"run": 57, "gpus": [1], "start_time": 40.0, "end_time": 50.0, "outcome": "preempted"},
            {"run": 41, "gpus": [0], "start_time": 10.0, "end_time": 30.0, "outcome": "preempted"},
            {"run": 90, "gpus": [2], "start_time": 51.0, "end_time": 100.0, "outcome": "completed"}]
    bars = run_timeline(job, runs, 200.0)["bars"]
    assert [(b["number"], b["run"]) for b in bars] == [(1, 41), (2, 57), (3, 90)]
    page = _render_job({}, runs=[{**r, "partner": None, "strategy": None, "exit_code": 0} for r in runs])
    assert 'title="server-wide run id 41">1</td>' in page and ">57</td>" not in page


def test_gpu_cells_show_the_jobs_user_and_progress() -> None:
    cluster = {"gpus": [{"id": 0, "device": "0", "type": "a100",
                         "jobs": [{"job": 5, "user": "alice", "name": "a", "phase": "running"}]},
                        {"id": 1, "device": "1", "type": "a100",
                         "jobs": [{"job": 6, "user": "bob", "name": None, "phase": "running"}]}]}
    nodes = [{"id": "n", "name": "host", "ip": "127.0.0.1", "gpu_type": "a100", "gpus": [0, 1], "state": "alive"}]
    progress = job_progress([{"id": 5, "iterations_done": 250.0, "iterations_total": 1000},
                             {"id": 7, "iterations_done": 3.0, "iterations_total": None}])
    assert progress == {5: 0.25}
    rows = grid(cluster, nodes, progress)
    html = environment().get_template("_cluster.html").render(
        cluster={"gpus_in_use": 2, "gpus_total": 2, "jobs": {}, "policy": "fifo", "placement": "p", "packing": False,
                 "executor": "local", "gpu_source": "virtual", "rounds": 1, "last_decision_time": None},
        nodes=rows, running=[])
    assert "#5 · alice" in html and "#6 · bob" in html and "25%" in html
    assert html.count('data-testid="gpu-progress"') == 1  # bob's job: its progress is not the visitor's to see
    assert f"color: {job_ink(5)}" in html


def test_busy_gpus_and_waiting_jobs_over_time() -> None:
    runs = [(1, 10.0, 20.0, [0, 1]), (2, 15.0, 30.0, [1]), (1, 25.0, 40.0, [0])]  # GPU 1 packed 15-20
    jobs = [(1, 5.0, 40.0), (2, 12.0, math.inf), (3, 0.0, math.inf)]
    t, gpus, waiting = busy_and_waiting(runs, jobs, 0.0, 50.0)
    assert t.tolist() == [0, 5, 10, 12, 15, 20, 25, 30, 40, 50]
    assert gpus.tolist() == [0, 0, 2, 2, 2, 1, 2, 1, 0, 0]
    assert waiting.tolist() == [1, 2, 1, 2, 1, 2, 1, 2, 2, 2]  # job 1 waits again after its preemption at 20
    t, gpus, waiting = busy_and_waiting(runs, jobs, 16.0, 26.0)  # a window: open intervals clipped to it
    assert t.tolist() == [16, 20, 25, 26] and gpus.tolist() == [2, 1, 2, 2] and waiting.tolist() == [1, 2, 1, 1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 400), st.integers(0, 200),
                          st.lists(st.integers(0, 3), min_size=1, max_size=3)), max_size=12))
def test_busy_gpus_match_a_direct_count_at_every_step(raw: list[tuple[int, int, int, list[int]]]) -> None:
    # Quarter seconds: steps a midpoint can fall between (denormal floats cannot be split).
    runs = [(j, b / 4, (b + d) / 4, g) for j, b, d, g in raw]
    jobs = [(j, 0.0, math.inf) for j in range(6)]
    t, gpus, waiting = busy_and_waiting(runs, jobs, 0.0, 200.0)
    assert np.all(np.diff(t) > 0)
    for k in range(len(t) - 1):
        mid = (t[k] + t[k + 1]) / 2
        held = {g for _, b, e, gs in runs if b <= mid < e for g in gs}
        running = {j for j, b, e, _ in runs if b <= mid < e}
        assert gpus[k] == len(held) and waiting[k] == 6 - len(running)


def test_peak_sample_keeps_peaks() -> None:
    t = np.arange(10_000, dtype=float)
    v = np.zeros(10_000)
    v[4321] = 9
    t2, cols, sampled = peak_sample(t, {"v": v}, 100)
    assert sampled and len(t2) == 100 and cols["v"].max() == 9
    assert peak_sample(t[:50], {"v": v[:50]}, 100)[2] is False


def _job(over: dict[str, Any]) -> dict[str, Any]:
    base = {"id": 7, "name": "train", "user": "alice", "state": "queued", "held": False, "gpus": 1, "job_type": "toy",
            "iterations_done": 0.0, "iterations_total": None, "preemptions": 0, "migrations": 0, "submit_time": 0.0,
            "first_start_time": None, "finish_time": None, "queueing_seconds": None, "waited_seconds": 5.0,
            "executed_seconds": 0.0, "attained_gpu_seconds": 0.0, "cancel_requested": False, "reason": None,
            "command": ["python", "t.py"], "shell": False, "nproc": 1, "workdir": None, "events": []}
    return {**base, **over}


def _render_job(over: dict[str, Any], *, actions: dict[str, bool] | None = None,
                runs: list[dict[str, Any]] | None = None) -> str:
    job = _job(over)
    return environment().get_template("_job.html").render(
        job=job, timeline=run_timeline({**job, "finish_time": 300.0}, runs or [], 300.0), events=[], now=300.0,
        csrf="x", actions=actions or {"cancel": True, "hold": False, "release": False}, learned=None)
