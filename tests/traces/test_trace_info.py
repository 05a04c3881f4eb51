"""trace_info: counts, mix, duration quantiles, GPU-seconds, span, offered load, too-large jobs."""

from __future__ import annotations

import json

import pytest

from tesserae.core.cluster import parse_cluster_spec
from tesserae.core.jobs import JobSpec
from tesserae.profiles.default_model import DefaultModel
from tesserae.traces import trace_info

JOBS = [
    JobSpec(0, 0.0, 1, "vgg19", 100.0, 100.0),
    JobSpec(1, 50.0, 2, "vgg19", 200.0, 200.0),
    JobSpec(2, 100.0, 8, "resnet50", 300.0, None),  # work only
]


def test_without_model_unknown_durations_are_counted_not_guessed() -> None:
    info = trace_info(JOBS, parse_cluster_spec("1x4"))
    assert info["jobs"] == 3
    assert info["gpu_mix"] == {1: {"count": 1, "share": 1 / 3}, 2: {"count": 1, "share": 1 / 3},
                               8: {"count": 1, "share": 1 / 3}}
    assert info["duration"]["known"] == 2 and info["duration"]["unknown"] == 1
    assert info["duration"]["min"] == 100.0 and info["duration"]["max"] == 200.0
    assert info["gpu_seconds"] == 100.0 + 400.0
    assert info["span"] == 100.0
    assert info["cluster"]["offered_load"] == pytest.approx(500.0 / (4 * 100.0))
    assert info["cluster"]["too_large"] == 1 and info["cluster"]["too_large_job_ids"] == [2]
    json.dumps(info)  # a CLI prints it as JSON


def test_with_model_work_becomes_duration() -> None:
    info = trace_info(JOBS, model=DefaultModel())
    d = info["duration"]
    assert d["known"] == 3 and d["max"] == 300.0 and d["mean"] == 200.0 and d["p50"] == 200.0
    assert info["gpu_seconds"] == 100.0 + 400.0 + 2400.0
    assert "cluster" not in info


def test_empty_and_single_job() -> None:
    assert trace_info([])["jobs"] == 0
    one = trace_info(JOBS[:1], parse_cluster_spec("1x4"))
    assert one["span"] == 0.0 and one["cluster"]["offered_load"] is None


def test_the_cli_table_shows_numbers_not_json(tmp_path) -> None:
    import os
    import subprocess
    import sys

    from tesserae.traces import write_canonical

    trace = tmp_path / "t.csv"
    jobs = [*JOBS[:2], JobSpec(2, 100.0, 8, "bert[large]", 300.0, 43646.19999999998)]
    write_canonical(jobs, trace)
    r = subprocess.run([sys.executable, "-m", "tesserae.cli", "trace", "info", str(trace), "--cluster", "1x4"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for raw in ('"share"', '{"', "0.3333333", "43646.19999", "[]"):
        assert raw not in out, (raw, out)
    rows = [" ".join(line.replace("│", " ").split()) for line in out.splitlines()]
    assert "GPU-count mix GPUs count share" in rows
    assert "1 1 33.33%" in rows and "8 1 33.33%" in rows
    assert any(row.startswith("duration (s) min 100") for row in rows)
    assert "p99 42,777" in rows and "max 43,646" in rows
    assert "job types bert[large] 1" in rows  # a trace's names are text, never Rich markup
    assert "too_large_job_ids 2" in rows and "offered_load 874.17" in rows, rows
