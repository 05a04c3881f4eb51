"""Lifecycle controls in the simulator (issue 14): time limits, failures with retries and backoff,
dependencies, from the trace's columns; every time worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tesserae.config import RunSpec
from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.errors import InputError
from tesserae.core.jobs import Controls, JobSpec, JobStatus, Outcome
from tesserae.profiles.default_model import DefaultModel
from tesserae.sim.metrics import job_records
from tesserae.sim.runner import simulate
from tesserae.traces.canonical import read_canonical, write_canonical


def job(job_id: int, seconds: float, submit: float = 0.0, **controls: object) -> JobSpec:
    """A 1-GPU resnet50 job of ``seconds`` (1 iteration = 1 s on the built-in model)."""
    return JobSpec(job_id, submit, 1, "resnet50", seconds, seconds,
                   controls=Controls(**controls) if controls else None)  # type: ignore[arg-type]


# One node of 4 GPUs, FIFO, event-driven, no restart cost:
# J0 (100 s, limit 40) is stopped at 40: timed out.
# J1 (50 s) fails twice, 10 s into each run; backoff 5 s, then 10 s: runs 0-10, 15-25, 35-65 (progress kept).
# J2 (20 s) fails 5 s in, no retry: failed at 5. J3 (after-ok J2) and J5 (after-ok J3) are cancelled at 5.
# J4 (after J2, 10 s) runs 5-15. J6 (after-ok J1, 10 s) runs 65-75. J7 (no controls) runs 0-30.
JOBS = [job(0, 100, time_limit=40.0), job(1, 50, failures=2, fail_after=10.0, retries=3, retry_backoff=5.0),
        job(2, 20, failures=1, fail_after=5.0), job(3, 10, after_ok=(2,)), job(4, 10, after=(2,)),
        job(5, 10, after_ok=(3,)), job(6, 10, after_ok=(1,)), job(7, 30)]


def _run(jobs: list[JobSpec], **kw: object) -> tuple[dict[int, dict], dict]:
    run = RunSpec.flat(policy="fifo", round_seconds=1000, restart_overhead=0, event_driven=True, **kw)  # type: ignore
    result, summary = simulate(jobs, parse_cluster_spec("1x4"), DefaultModel(), run)
    return {r["job_id"]: r for r in job_records(result)}, summary


def test_time_limits_retries_and_dependencies() -> None:
    rows, summary = _run(JOBS)
    got = {j: (r["outcome"], r["first_start"], r["finish_time"], r["retries"]) for j, r in rows.items()}
    assert got[0] == ("timed_out", 0.0, pytest.approx(40.0), 0)
    assert got[1] == ("completed", 0.0, pytest.approx(65.0), 2)
    assert got[2] == ("failed", 0.0, pytest.approx(5.0), 0)
    assert got[3][0] == "cancelled" and got[3][2] == pytest.approx(5.0)
    assert got[4] == ("completed", pytest.approx(5.0), pytest.approx(15.0), 0)
    assert got[5][0] == "cancelled" and got[5][2] == pytest.approx(5.0)
    assert got[6] == ("completed", pytest.approx(65.0), pytest.approx(75.0), 0)
    assert got[7] == ("completed", 0.0, pytest.approx(30.0), 0)
    assert rows[1]["gpu_seconds"] == pytest.approx(50.0)  # 10 + 10 + 30: progress kept across retries
    assert summary["completed"] == 4 and summary["lifecycle"] == {
        "completed": 4, "failed": 1, "timed_out": 1, "cancelled": 2, "retries": 2}
    assert summary["avg_jct"] == pytest.approx((65 + 15 + 75 + 30) / 4)  # only completed jobs have a JCT


def test_queueing_counts_every_wait_and_jobs_that_did_not_complete_have_no_jct(tmp_path: Path) -> None:
    """Queueing is every wait (issue 30): J1 waits 0 s before its first start but 5 + 10 s of retry
    backoff after it; J6 waits 65 s for J1. The timed-out J0 has no JCT and no slowdown in jobs.csv
    (as in summary.json), though it ended (its waits still count: none)."""
    rows, summary = _run(JOBS)
    assert rows[1]["first_start_delay"] == 0.0 and rows[1]["queueing_delay"] == pytest.approx(15.0)
    assert rows[6]["first_start_delay"] == pytest.approx(65.0) and rows[6]["queueing_delay"] == pytest.approx(65.0)
    assert rows[0]["outcome"] == "timed_out" and rows[0]["queueing_delay"] == pytest.approx(0.0)
    assert math.isnan(rows[0]["jct"]) and math.isnan(rows[0]["slowdown"])
    assert math.isnan(rows[2]["jct"]) and math.isnan(rows[3]["jct"])  # failed, cancelled
    # Over the completed jobs J1, J4, J6, J7: every wait (15 + 5 + 65 + 0) and first-start waits (0 + 5 + 65 + 0).
    assert summary["avg_queueing_delay"] == pytest.approx(85 / 4)
    assert summary["avg_first_start_delay"] == pytest.approx(70 / 4)

    from tesserae.sim.report import write_run
    from tesserae.web.results import read_jobs

    result, summary = simulate(JOBS, parse_cluster_spec("1x4"), DefaultModel(),
                               RunSpec.flat(policy="fifo", round_seconds=1000, restart_overhead=0, event_driven=True))
    write_run(tmp_path, result, summary)
    lines = (tmp_path / "jobs.csv").read_text().splitlines()
    header = lines[0].split(",")
    j0 = dict(zip(header, lines[1].split(","), strict=True))
    assert j0["job_id"] == "0" and j0["jct"] == "" and j0["slowdown"] == "" and j0["finish_time"] == "40.0"
    jobs, _ = read_jobs(tmp_path / "jobs.csv")  # the report and the viewer read the blanks back as no value
    assert math.isnan(jobs["jct"][0]) and jobs["queueing_delay"][1] == pytest.approx(15.0)


def test_a_preempted_job_counts_its_wait_after_the_first_start() -> None:
    """LAS on one GPU, 100 s rounds: J0 (1000 s) starts at 0; J1 (100 s) arrives at 50 and, with less
    attained service, preempts J0 at the 100 s round; J0 stands stopped 100-200. Its first-start
    wait is 0 but its queueing is 100 s; J1's is 50 s either way."""
    run = RunSpec(policy="las", round_seconds=100, restart_overhead=0)
    result, summary = simulate([job(0, 1000), job(1, 100, submit=50.0)], parse_cluster_spec("1x1"),
                               DefaultModel(), run)
    rows = {r["job_id"]: r for r in job_records(result)}
    assert rows[0]["preemptions"] >= 1 and rows[0]["first_start_delay"] == 0.0
    assert rows[0]["queueing_delay"] == pytest.approx(100.0)
    assert rows[1]["first_start_delay"] == pytest.approx(50.0) and rows[1]["queueing_delay"] == pytest.approx(50.0)
    assert summary["avg_queueing_delay"] == pytest.approx(75.0)
    assert summary["avg_first_start_delay"] == pytest.approx(25.0)


def test_out_of_retries_fails_and_rounds_admit_a_retry_at_the_next_round() -> None:
    rows, _ = _run([job(0, 50, failures=5, fail_after=10.0, retries=1, retry_backoff=1.0)])
    assert (rows[0]["outcome"], rows[0]["finish_time"], rows[0]["retries"]) == ("failed", pytest.approx(21.0), 1)
    run = RunSpec(policy="fifo", round_seconds=30, restart_overhead=0)
    result, _ = simulate([job(0, 50, failures=1, fail_after=10.0, retries=1, retry_backoff=1.0)],
                         parse_cluster_spec("1x4"), DefaultModel(), run)
    (rec,) = job_records(result)
    assert rec["finish_time"] == pytest.approx(30 + 40)  # fails at 10, back at the 30 s round, 40 s left


def test_no_controls_no_new_columns() -> None:
    rows, summary = _run([job(0, 10)])
    assert "outcome" not in rows[0] and "lifecycle" not in summary


def test_gavel_rounds_refuse_controls() -> None:
    run = RunSpec(policy="fifo", round_seconds=100, restart_overhead=0, gavel_rounds=True)
    with pytest.raises(InputError, match="Gavel's rounds do not model"):
        simulate([job(0, 10, time_limit=5.0)], parse_cluster_spec("1x4"), DefaultModel(), run)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_trace_columns_round_trip(tmp_path: Path, suffix: str) -> None:
    path = write_canonical(JOBS, tmp_path / f"t{suffix}")
    assert read_canonical(path) == JOBS
    plain = write_canonical([job(0, 10)], tmp_path / f"plain{suffix}")
    if suffix == ".csv":
        assert plain.read_text().splitlines()[0] == "job_id,submit_time,num_gpus,job_type,work,duration,user," \
                                                    "priority_weight,name,queue,priority_class"


HEADER = ("job_id,submit_time,num_gpus,job_type,work,time_limit,retries,retry_backoff,after,after_ok,failures,"
          "fail_after\n")


@pytest.mark.parametrize(("rows", "line", "field", "needle"), [
    ("1,0,1,resnet50,10,,,,7,,,\n", 2, "after", "job 7 is not in the trace"),
    ("1,0,1,resnet50,10,,,,2,,,\n2,5,1,resnet50,10,,,,,,,\n", 2, "after", "not submitted before job 1"),
    ("1,0,1,resnet50,10,,,,,x,,\n", 2, "after_ok", "'x' is not a job id"),
    ("1,0,1,resnet50,10,,101,,,,,\n", 2, "retries", "at most 100"),
    ("1,0,1,resnet50,10,,,,,,2,\n", 2, "fail_after", "needs fail_after"),
    ("1,0,1,resnet50,10,0,,,,,,\n", 2, "time_limit", "must be positive"),
    ("1,0,1,resnet50,10,,,7200,,,,\n", 2, "retry_backoff", "at most 3600"),
])
def test_bad_trace_controls_name_line_and_field(tmp_path: Path, rows: str, line: int, field: str,
                                                needle: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + rows)
    with pytest.raises(InputError) as e:
        read_canonical(path)
    assert needle in str(e.value) and e.value.line == line and e.value.field == field, str(e.value)


def test_dependencies_separated_by_semicolons_or_spaces(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "1,0,1,resnet50,10,,,,,,,\n2,0,1,resnet50,10,,,,,,,\n"
                             "3,1,1,resnet50,10,,,,1;2,,,\n4,1,1,resnet50,10,,,,,1 2,,\n")
    jobs = {j.job_id: j for j in read_canonical(path)}
    assert jobs[3].controls == Controls(after=(1, 2)) and jobs[4].controls == Controls(after_ok=(1, 2))
    assert jobs[1].controls is None


def test_simulate_reports_outcomes_on_the_command_line(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    trace = write_canonical(JOBS, tmp_path / "t.csv")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "tesserae.cli", "simulate", "--trace", str(trace), "--cluster", "1x4",
                        "--event-driven", "--round-seconds", "1000", "--restart-overhead", "0", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "failed / timed out / cancelled / retries" in p.stdout and "1 / 1 / 2 / 2" in p.stdout
    assert json.loads((out / "summary.json").read_text())["lifecycle"]["timed_out"] == 1
    header = (out / "jobs.csv").read_text().splitlines()[0]
    assert header.endswith(",outcome,retries")


@pytest.mark.parametrize("placement", ["consolidated", "first-fit", "tiresias", "yarn"])
def test_a_job_asking_for_a_gpu_type_runs_on_that_type_only(placement: str) -> None:
    """Two 4-GPU jobs that ask for k80 on a v100 node and a k80 node: one after the other on the k80s
    (0.3x speed: 100 s of work take 333 s), while the v100s stay free; a third job asking for nothing
    takes the v100s at once."""
    jobs = [JobSpec(i, 0.0, 4, "resnet50", 100.0, 100.0, gpu_type="k80") for i in (0, 1)]
    jobs.append(JobSpec(2, 0.0, 4, "resnet50", 100.0, 100.0))
    run = RunSpec(policy="fifo", placement=placement, round_seconds=1000, restart_overhead=0, event_driven=True)
    result, _ = simulate(jobs, parse_cluster_spec("1x4:v100,1x4:k80"), DefaultModel(), run)
    rows = {r["job_id"]: r for r in job_records(result)}
    assert rows[0]["finish_time"] == pytest.approx(100 / 0.3)
    assert rows[1]["first_start"] == pytest.approx(100 / 0.3) and rows[1]["finish_time"] == pytest.approx(200 / 0.3)
    assert rows[2]["first_start"] == 0.0 and rows[2]["finish_time"] == pytest.approx(100.0)


def test_a_placement_that_chooses_types_refuses_a_gpu_type() -> None:
    run = RunSpec(policy="fifo", placement="tesserae", round_seconds=100, restart_overhead=0)
    with pytest.raises(InputError, match="does not honour a job's GPU type"):
        simulate([JobSpec(0, 0.0, 1, "resnet50", 10.0, gpu_type="k80")], parse_cluster_spec("1x4:v100,1x4:k80"),
                 DefaultModel(), run)


@st.composite
def controlled_workloads(draw: st.DrawFn) -> list[JobSpec]:
    n = draw(st.integers(1, 14))
    jobs = []
    for i in range(n):
        earlier = list(range(i))
        deps = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True)) if earlier else []
        ok = draw(st.lists(st.booleans(), min_size=len(deps), max_size=len(deps)))
        failures = draw(st.integers(0, 3))
        controls = Controls(time_limit=draw(st.none() | st.floats(5, 500)), retries=draw(st.integers(0, 3)),
                            retry_backoff=draw(st.sampled_from([0.0, 7.0, 60.0])),
                            after=tuple(d for d, k in zip(deps, ok, strict=True) if not k),
                            after_ok=tuple(d for d, k in zip(deps, ok, strict=True) if k),
                            failures=failures, fail_after=draw(st.floats(1, 200)) if failures else None)
        # job i is submitted in [10 i, 10 i + 40): its dependencies (earlier ids) no later than it
        submit = float(max(10 * i + draw(st.integers(0, 39)), *(10 * d + 39 for d in deps))) if deps else \
            float(10 * i + draw(st.integers(0, 39)))
        jobs.append(JobSpec(i, submit, draw(st.sampled_from([1, 2, 4])), "resnet50", float(draw(st.integers(1, 400))),
                            controls=controls))
    return jobs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(controlled_workloads(), st.sampled_from(["fifo", "las"]), st.booleans())
def test_lifecycle_invariants(jobs: list[JobSpec], policy: str, event: bool) -> None:
    """Every job ends exactly once; none starts before its dependencies ended, none ran past its time
    limit (by more than a round's rounding), none retried more than allowed; a completed job did all
    its work; an after-ok dependent of a job that did not complete never ran."""
    run = RunSpec(policy=policy, round_seconds=30, restart_overhead=2, event_driven=event)
    result, summary = simulate(jobs, parse_cluster_spec("1x4"), DefaultModel(), run)
    t = result.table
    row = {int(j): r for r, j in enumerate(t.job_id.tolist())}
    assert (t.status == JobStatus.DONE).all()
    life = summary["lifecycle"]
    assert sum(life[o.name.lower()] for o in Outcome) == len(jobs)
    for spec in jobs:
        r, c = row[spec.job_id], spec.controls
        assert c is not None
        assert t.retries_used[r] <= c.retries
        if c.time_limit is not None:
            assert t.executed[r] <= c.time_limit + 1e-6
        if t.outcome[r] == Outcome.COMPLETED:
            assert t.progress[r] == pytest.approx(spec.work)
        started = t.first_start[r]
        for d in (*c.after, *c.after_ok):
            dr = row[d]
            if not math.isnan(started):
                assert started >= t.finish[dr] - 1e-6, "started before its dependency ended"
            if d in c.after_ok and t.outcome[dr] != Outcome.COMPLETED:
                assert t.outcome[r] == Outcome.CANCELLED and math.isnan(started)
