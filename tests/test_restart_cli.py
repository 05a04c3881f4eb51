"""Restart costs through the `tesserae` command: --restart-cost, --storage-gbps, the guard, the quantum."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.specs import job
from tesserae.traces import write_canonical

SMALL = ("--jobs", "30", "--load", "1.5", "--cluster", "2x4", "--seed", "3", "-q")


def tesserae(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tesserae.cli", *args], capture_output=True, text=True, timeout=300)


def error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_job_dependent_costs_are_charged_and_labelled_a_model(tmp_path: Path) -> None:
    out = tmp_path / "job"
    r = tesserae("simulate", *SMALL, "--policy", "las", "--restart-cost", "job", "--storage-gbps", "1",
                 "--out", str(out))
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["restart_cost"] == "job" and s["restart_cost_kind"] == "model (not a measurement)"
    assert s["storage_gbps"] == 1.0 and s["restart_overhead"] is None and s["warnings"] == []
    # 1 Gbit/s: vgg19's 1.15 GB checkpoint takes 9.2 s to read, after 10 s of start-up.
    by_type = s["restart_seconds_by_type"]
    assert by_type["vgg19"] == pytest.approx(10.0 + 143_667_240 * 8 * 8 / 1e9)
    assert s["restart_seconds_max"] == pytest.approx(max(by_type[t] for t in by_type if t in _types(out)))
    assert "(model)" in r.stdout  # the summary table's restart row
    assert "Restart cost: per job type" in (out / "report.html").read_text()

    fixed = tmp_path / "fixed"
    r = tesserae("simulate", *SMALL, "--policy", "las", "--out", str(fixed))
    s = json.loads((fixed / "summary.json").read_text())
    assert s["restart_cost"] == "fixed" and s["restart_overhead"] == 30.0 and s["restart_seconds_mean"] == 30.0
    assert "fixed 30 s" in r.stdout


def _types(out: Path) -> set[str]:
    with (out / "jobs.csv").open() as f:
        return {row["job_type"] for row in csv.DictReader(f)}


def test_measured_rows_are_used_and_the_kind_says_so(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    write_canonical([job(0, 0, 1, 600, "A"), job(1, 30, 1, 600, "B")], trace)
    doc = {"format": "tesserae-profile", "version": 1, "reference_gpu_type": "v100",
           "entries": [{"job_type": t, "num_gpus": 1, "gpu_type": "v100", "consolidated": True, "throughput": 1.0}
                       for t in ("A", "B")],
           "restart": [{"job_type": "A", "checkpoint_bytes": 5_000_000_000, "startup_seconds": 2.0},
                       {"job_type": "B", "checkpoint_bytes": 0, "startup_seconds": 3.0}]}
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(doc))
    out = tmp_path / "run"
    r = tesserae("simulate", "--trace", str(trace), "--profile", str(profile), "--cluster", "1x1", "--policy", "fifo",
                 "--restart-cost", "job", "--storage-gbps", "10", "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["restart_cost_kind"] == "measured"
    assert s["restart_seconds_by_type"] == {"A": pytest.approx(6.0), "B": pytest.approx(3.0)}
    with (out / "jobs.csv").open() as f:
        rows = {int(row["job_id"]): row for row in csv.DictReader(f)}
    # FIFO on one GPU: A runs 0 -> 4 s start-up + 600 s of work... its restart is 6 s, B's 3 s.
    assert float(rows[0]["finish_time"]) == pytest.approx(606.0)
    # The second job waits for the next round after A finishes (300 s rounds), then pays its own 3 s.
    assert float(rows[1]["finish_time"]) == pytest.approx(900.0 + 3.0 + 600.0)

    # A job type with neither a row nor a built-in model: one clear line, exit 2.
    del doc["restart"][1]
    profile.write_text(json.dumps(doc))
    line = error_line(tesserae("simulate", "--trace", str(trace), "--profile", str(profile), "--cluster", "1x1",
                               "--restart-cost", "job", "--out", str(out), "-q"))
    assert "job type 'B' has no restart cost" in line and "--restart-cost fixed" in line


def test_guard_refuses_time_slicing_until_a_quantum_is_set(tmp_path: Path) -> None:
    args = (*SMALL, "--restart-overhead", "300", "--round-seconds", "300")
    line = error_line(tesserae("simulate", *args, "--policy", "las", "--out", str(tmp_path / "a")))
    assert "'las' preempts running jobs by priority" in line and "--min-run-quantum" in line
    assert not (tmp_path / "a" / "summary.json").exists()

    r = tesserae("simulate", *args, "--policy", "las", "--min-run-quantum", "1", "--out", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("warning:") == 1 and "at or above the round length (300 s" in r.stderr
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert s["completed"] == 30 and s["min_run_quantum"] == 1.0 and len(s["warnings"]) == 1
    assert "quantum 1x" in r.stdout

    r = tesserae("compare", "--run", "fifo", "--run", "las", *args, "--allow-thrashing", "--out", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("warning:") == 1  # the same warning of both runs, said once


def test_bad_options_exit_2_naming_the_option(tmp_path: Path) -> None:
    line = error_line(tesserae("simulate", *SMALL, "--restart-cost", "per-job", "--out", str(tmp_path / "x")))
    assert "field 'restart-cost'" in line and "'per-job' is not fixed or job" in line
    for args in (("--storage-gbps", "0"), ("--min-run-quantum", "-1")):  # ranges: checked by the CLI parser
        r = tesserae("simulate", *SMALL, *args, "--out", str(tmp_path / "x"))
        assert r.returncode == 2 and "Traceback" not in r.stderr and args[0] in r.stderr


def test_stop_latency_is_checked_recorded_and_shown(tmp_path: Path) -> None:
    r = tesserae("simulate", *SMALL, "--stop-latency", "-1", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--stop-latency" in r.stderr
    line = error_line(tesserae("simulate", *SMALL, "--round-seconds", "60", "--stop-latency", "60",
                               "--out", str(tmp_path / "x")))
    assert "field 'stop-latency'" in line and "below the round length (60 s)" in line
    line = error_line(tesserae("simulate", *SMALL, "--policy", "gavel-fifo", "--placement", "gavel",
                               "--stop-latency", "5", "--out", str(tmp_path / "x")))
    assert "field 'stop-latency'" in line and "--fixed-rounds" in line
    r = tesserae("simulate", *SMALL, "--policy", "las", "--stop-latency", "20", "--out", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert s["completed"] == 30 and s["stop_latency"] == 20.0 and "stop 20 s" in r.stdout
