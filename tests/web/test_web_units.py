"""Unit tests of the dashboard's and the viewer's building blocks (no server, no browser)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.server import PY, REPO
from tesserae.core.errors import InputError
from tesserae.runtime.api.cluster import usage_series
from tesserae.web.cluster_pages import grid, queue_rows, running_jobs
from tesserae.web.job_pages import filter_jobs, run_timeline
from tesserae.web.login_limits import Buckets, retry_after
from tesserae.web.report import comparison, render, write_report
from tesserae.web.results import explain, find_runs, read_jobs
from tesserae.web.session import Sessions, safe_next

JOB_HEADER = ("job_id,name,job_type,num_gpus,submit_time,first_start,finish_time,jct,queueing_delay,preemptions,"
              "migrations,gpu_seconds,slowdown")


def test_grid_marks_shared_gpus_partners_and_down_nodes() -> None:
    cluster = {"gpus": [
        {"id": 0, "device": "0", "type": "a100", "jobs": [{"job": 5, "user": "u", "name": "a", "phase": "running"},
                                                          {"job": 7, "user": "v", "name": None, "phase": "running"}]},
        {"id": 1, "device": "1", "type": "a100", "jobs": [{"job": 5, "user": "u", "name": "a", "phase": "running"}]},
        {"id": 2, "device": "0", "type": "a100", "jobs": [{"job": 9, "user": "u", "name": "b", "phase": "running"}]},
        {"id": 3, "device": "1", "type": "a100", "jobs": []},
        {"id": 4, "device": "9", "type": "a100", "jobs": []},
    ]}
    nodes = [{"id": "n1", "name": "host1", "ip": "10.0.0.1", "gpu_type": "a100", "gpus": [0, 1], "state": "alive"},
             {"id": "n2", "name": "host2", "ip": "10.0.0.2", "gpu_type": "a100", "gpus": [2, 3], "state": "dead"}]
    rows = grid(cluster, nodes)
    assert [r["name"] for r in rows] == ["host1", "host2", "GPUs of no listed node"]
    first = rows[0]["cells"][0]
    assert first["shared"] and [j["partners"] for j in first["jobs"]] == [[7], [5]]
    assert not rows[0]["cells"][1]["shared"] and rows[0]["used"] == 2
    assert [c["down"] for c in rows[1]["cells"]] == [True, True] and rows[1]["used"] == 1
    legend = {e["job"]: e for e in running_jobs(rows)}
    assert legend[5]["gpus"] == [0, 1] and legend[5]["partners"] == [7]
    assert legend[9]["on_down_node"] and not legend[5]["on_down_node"]


def test_usage_series_splits_gpu_hours_by_bin_and_hides_other_users() -> None:
    now = 10_800.0  # a multiple of the bins' width: two whole bins
    runs = [{"start_time": now - 3600, "end_time": now - 1800, "gpus": "[0, 1]", "user": "alice"},
            {"start_time": now - 900, "end_time": None, "gpus": "[2]", "user": "bob"}]
    u = usage_series(runs, now, 3600.0, 2, 4, None)
    assert u["gpu_hours"] == {"alice": [1.0, 0.0], "bob": [0.0, 0.25]}
    assert u["utilization"] == [0.5, 0.125]
    hidden = usage_series(runs, now, 3600.0, 2, 4, "bob")
    assert set(hidden["gpu_hours"]) == {"(other users)", "bob"}
    assert hidden["gpu_hours_total"]["(other users)"] == 1.0


def test_usage_counts_only_time_the_server_existed_and_the_elapsed_part_of_the_running_bin() -> None:
    """The issue's 24 h view said 0.1 % while 8/8 GPUs were busy: hours before the server existed
    counted as idle, and the running bin was divided by its full length."""
    width = 1800.0
    now = 100 * width + 600.0  # 600 s into the running bin
    started = now - 2000.0  # the server's store began 2000 s ago: 1400 s into the bin before the running one
    runs = [{"start_time": started, "end_time": None, "gpus": json.dumps(list(range(8))), "user": "alice"}]
    u = usage_series(runs, now, 86400.0, 48, 8, None, since=started)
    assert u["bin_seconds"] == width and u["bin_start"][-1] == 100 * width  # aligned; the last bin runs
    assert u["utilization"][:-2] == [None] * 46  # wholly before the server: no utilisation, not 0 %
    assert u["utilization"][-2:] == [1.0, 1.0]  # 8/8 busy in the part of each bin that was there
    assert u["covered_seconds"][-2:] == [1400.0, 600.0]
    assert u["utilization_mean"] == 1.0 and u["since"] == started
    half = [{**runs[0], "gpus": "[0, 1, 2, 3]"}]
    assert usage_series(half, now, 3600.0, 48, 8, None, since=started)["utilization_mean"] == 0.5
    assert usage_series([], now, 3600.0, 4, 8, None, since=now + 1)["utilization_mean"] is None


def _job(i: int, user: str, state: str, submit: float, gpus: int = 1, name: str = "j") -> dict:
    return {"id": i, "user": user, "state": state, "submit_time": submit, "gpus": gpus, "name": name,
            "queueing_seconds": None, "executed_seconds": 0.0}


def test_filter_jobs_by_user_state_time_name_and_sort() -> None:
    now = 100_000.0
    jobs = [_job(1, "a", "completed", now - 90_000, name="ResNet"), _job(2, "b", "running", now - 100, 4),
            _job(3, "a", "queued", now - 50, 2, "bert"), _job(4, "a", "failed", now - 10)]
    out, q = filter_jobs(jobs, {"user": "a", "state": "active"}, now)
    assert [j["id"] for j in out] == [3]
    out, _ = filter_jobs(jobs, {"since": "24 h", "sort": "gpus", "order": "asc"}, now)
    assert [j["id"] for j in out] == [4, 3, 2]
    out, _ = filter_jobs(jobs, {"q": "resnet"}, now)
    assert [j["id"] for j in out] == [1]
    out, q = filter_jobs(jobs, {"state": "<script>", "sort": "nope", "order": "sideways"}, now)
    assert q["state"] == "" and q["sort"] == "id" and q["order"] == "desc" and [j["id"] for j in out] == [4, 3, 2, 1]


def test_run_timeline_names_start_preempt_resume_and_migrate() -> None:
    job = {"submit_time": 0.0, "finish_time": 100.0}
    runs = [{"run": 1, "gpus": [0], "start_time": 10.0, "end_time": 30.0, "outcome": "preempted"},
            {"run": 2, "gpus": [1], "start_time": 40.0, "end_time": 50.0, "outcome": "migrated"},
            {"run": 3, "gpus": [2], "start_time": 51.0, "end_time": 100.0, "outcome": "completed"}]
    t = run_timeline(job, runs, 200.0)
    assert [(b["began"], b["ended"]) for b in t["bars"]] == [("start", "preempted"), ("resume", "migrated"),
                                                              ("migrate", "completed")]
    assert t["restarts"] == 2 and t["bars"][0]["left"] == pytest.approx(10.0) and t["bars"][2]["width"] == 49.0


def test_queue_rows_show_optional_columns_only_when_the_api_has_them() -> None:
    queue = {"jobs": [{"id": 3, "submit_time": 0.0}, {"id": 1, "submit_time": 5.0}]}
    rows, extra = queue_rows(queue, {3: {"id": 3}, 1: {"id": 1}}, 10.0)
    assert [r["position"] for r in rows] == [1, 2] and extra == []
    rows, extra = queue_rows(queue, {3: {"id": 3, "pending_reason": "waiting for 4 GPUs (2 free)"}}, 10.0)
    assert extra == [("pending_reason", "pending reason")] and rows[0]["extra"]["pending_reason"].startswith("wait")


def test_sessions_expire_and_evict() -> None:
    s = Sessions(idle_seconds=1000, max_sessions=2)
    a, b, c = s.create("t1", "u1"), s.create("t2", "u2"), s.create("t3", "u3")
    assert s.get(a) is None and s.get(b).token == "t2" and s.get(c).token == "t3"
    s.drop(b)
    assert s.get(b) is None and s.count("u2") == 0
    expired = Sessions(idle_seconds=-1)
    assert expired.get(expired.create("t", "u")) is None
    assert safe_next("/ui/jobs/3") == "/ui/jobs/3"
    for bad in ("https://evil.example/", "//evil.example", "/ui/\\x", None, "/docs"):
        assert safe_next(bad) == "/ui/cluster"


def test_one_users_logins_evict_only_that_users_sessions() -> None:
    """Issue 27, point 4. Before: one global list, oldest dropped first: 10,001 logins by one user ended
    every other user's session."""
    s = Sessions(idle_seconds=1000, max_sessions=40, per_user=5)
    admin = s.create("admin-token", "admin")
    others = [s.create(f"t{i}", f"user{i}") for i in range(30)]
    flood = [s.create("mallory-token", "mallory") for _ in range(10_001)]
    assert s.get(admin) is not None and all(s.get(sid) is not None for sid in others)
    assert s.count("mallory") == 5 and [s.get(sid) is not None for sid in flood[-5:]] == [True] * 5
    assert s.get(flood[0]) is None
    # Past the cap on all sessions, the user holding the most loses their least recently used one.
    s.get(flood[-5])
    extra = [s.create(f"x{i}", f"extra{i}") for i in range(6)]  # 42 sessions: two too many
    assert s.get(admin) is not None and all(s.get(sid) is not None for sid in others + extra)
    assert s.count("mallory") == 3 and s.get(flood[-5]) is not None and s.get(flood[-4]) is None


def test_login_buckets_allow_a_burst_then_a_rate_and_say_how_long_to_wait() -> None:
    b = Buckets(3, 2.0, max_keys=2)
    assert [b.take("a", 100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("a", 100.0) == pytest.approx(2.0) and retry_after(0.3) == "1" and retry_after(2.01) == "3"
    assert b.take("b", 100.0) == 0.0  # another key is not limited by the first
    assert b.take("a", 101.0) == pytest.approx(1.0)  # half a token came back; still none to take
    assert b.take("a", 104.0) == 0.0
    b.take("c", 104.0)  # at most two keys: the least recently used ("b") is forgotten, at full burst again
    assert [b.take("b", 104.0) for _ in range(3)] == [0.0, 0.0, 0.0]


# ----------------------------------------------------------------------------- results viewer
def _run_folder(d: Path, jobs: list[str], timeline: list[str], summary: dict) -> Path:
    d.mkdir(parents=True)
    (d / "jobs.csv").write_text("\n".join([JOB_HEADER, *jobs]) + "\n")
    (d / "timeline.csv").write_text("\n".join(["time,gpus_in_use,queued,running", *timeline]) + "\n")
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def test_explain_a_job_that_waited_for_a_full_cluster_and_was_overtaken(tmp_path: Path) -> None:
    summary = {"label": "fifo", "cluster_gpus": 4, "avg_jct": 100.0, "seed": 0, "load": None}
    jobs = ["0,big,resnet50,4,0,0,100,100,0,0,0,400,1",
            "1,waits <b>,resnet50,4,10,100,200,190,110,1,0,320,1.9",  # held 80 s of 190: waited 110 s in all
            "2,small,resnet50,1,20,50,60,40,30,0,0,10,4"]
    timeline = ["0,4,0,1", "10,4,1,1", "50,4,1,1", "100,4,0,1"]
    _run_folder(tmp_path / "fifo", jobs, timeline, summary)
    _run_folder(tmp_path / "las", [j.replace(",100,200,190,110,", ",10,110,100,0,") for j in jobs], timeline,
                {**summary, "label": "las", "avg_jct": 50.0})
    kind, runs = find_runs(tmp_path)
    assert kind == "compare" and [r.label for r in runs] == ["fifo", "las"]
    f = explain(runs, runs[0], 1)
    assert f["first_start_delay"] == 90 and f["waited"] == 110 and f["waited_after_start"] == 20
    assert f["decisions_while_waiting"] == 2 and f["decisions_with_enough_free"] == 0
    assert f["overtaken_by"] == 1 and f["overtaken_smaller"] == 1 and f["preemptions"] == 1
    text = " ".join(f["sentences"])
    assert "waited 90 s" in text and "too full" in text and "2 (1 GPU)" in text and "preempted 1 time" in text
    assert "stood stopped 20 s in total" in text and "Every wait counted" in text and "110 s" in text
    assert "Under las the same job waited 0 s in all" in text
    with pytest.raises(KeyError):
        explain(runs, runs[0], 99)
    table = comparison(runs)
    assert table[0]["columns"] == ["fifo", "las"]
    avg = next(r for r in table[0]["rows"] if r["label"] == "avg JCT (h)")
    assert avg["cells"][1]["ratio"] == 0.5 and avg["cells"][1]["better"] is True
    html = write_report(tmp_path).read_text()
    assert "waits <b>" not in html and "waits \\u003cb\\u003e" in html, "names are escaped in the embedded data"
    assert html.count("<script") == 4 and "http://" not in html.replace("http://www.w3.org", "")


@pytest.mark.parametrize(("jobs", "message"), [
    (["0,a,x,1,zero,0,1,1,0,0,0,1,1"], "line 2, field 'submit_time': 'zero' is not a number"),
    (["0,a,x,1,0,0,1"], "line 2: 7 fields where the header has 13"),
])
def test_bad_run_files_name_file_line_and_field(tmp_path: Path, jobs: list[str], message: str) -> None:
    d = _run_folder(tmp_path / "r", jobs, ["0,0,0,0"], {"label": "x"})
    with pytest.raises(InputError, match=message):
        read_jobs(d / "jobs.csv")


def test_missing_column_and_empty_folder_are_errors(tmp_path: Path) -> None:
    d = tmp_path / "r"
    d.mkdir()
    (d / "summary.json").write_text("{}")
    (d / "jobs.csv").write_text("job_id,name\n1,a\n")
    (d / "timeline.csv").write_text("time\n0\n")
    with pytest.raises(InputError, match="line 1, field 'num_gpus': missing column"):
        render(d)
    with pytest.raises(InputError, match=r"holds no summary\.json"):
        empty = tmp_path / "empty"
        empty.mkdir()
        find_runs(empty)
    (d / "summary.json").write_text("[1,")
    with pytest.raises(InputError, match="not valid JSON"):
        find_runs(d)


def test_simulate_writes_a_report_and_view_rejects_a_bad_folder(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    subprocess.run([PY, "-m", "tesserae.cli", "simulate", "--jobs", "30", "--cluster", "2x4", "--policy", "las",
                    "--out", str(out), "--quiet"], check=True, cwd=REPO, capture_output=True, timeout=120)
    html = (out / "report.html").read_text()
    assert "Tesserae results: sim" in html and "las" in html
    bad = subprocess.run([PY, "-m", "tesserae.cli", "view", str(tmp_path / "nowhere"), "--port", "0"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a folder" in bad.stderr and "Traceback" not in bad.stderr

