"""Typos and jobs the profile cannot simulate are refused with the file, line and field (issue 30).

Before, ``--cluster 16x4:a1000`` ran as v100, a canonical trace with job type ``resnet5O`` simulated
without a word, and the shipped Gavel trace stopped with "job type 'CycleGAN' has no measurement for
8 GPUs" naming neither the file nor the line. ``--unprofiled-jobs generic|reject`` are the opt-ins.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tesserae.core.errors import InputError
from tesserae.profiles.default_model import DefaultModel
from tesserae.traces import read_trace

TRACE = "job_id,submit_time,num_gpus,job_type,work\n0,0,1,resnet50,100\n1,10,2,resnet5O,100\n2,20,1,resnet50,50\n"


def tesserae(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tesserae.cli", *args], capture_output=True, text=True, timeout=300)


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_an_unknown_gpu_type_in_the_cluster_is_refused(tmp_path: Path) -> None:
    line = one_error_line(tesserae("simulate", "--jobs", "5", "--cluster", "16x4:a1000", "--out", str(tmp_path), "-q"))
    assert "field 'cluster'" in line and "'a1000'" in line and "a100" in line
    line = one_error_line(tesserae("trace", "info", str(_write(tmp_path, TRACE.replace("resnet5O", "vgg16"))),
                                   "--cluster", "2x4:v1000"))
    assert "'v1000'" in line


def test_an_unknown_job_type_is_refused_at_its_line(tmp_path: Path) -> None:
    trace = _write(tmp_path, TRACE)
    line = one_error_line(tesserae("simulate", "--trace", str(trace), "--cluster", "2x4", "--out",
                                   str(tmp_path / "o"), "-q"))
    assert f"{trace}, line 3, field 'job_type'" in line and "'resnet5O'" in line and "generic" in line
    assert not (tmp_path / "o").exists()
    with pytest.raises(InputError, match="line 3"):
        read_trace(trace, "canonical", DefaultModel())


def test_generic_runs_unknown_types_at_reference_speed_and_says_so(tmp_path: Path) -> None:
    r = tesserae("simulate", "--trace", str(_write(tmp_path, TRACE)), "--cluster", "2x4", "--out", str(tmp_path / "o"),
                 "-q", "--unprofiled-jobs", "generic")
    assert r.returncode == 0, r.stderr
    assert "'resnet5O' (1 job)" in r.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["completed"] == 3 and any("ran as generic" in w for w in summary["warnings"])


def test_reject_leaves_the_jobs_out_and_counts_them(tmp_path: Path) -> None:
    r = tesserae("compare", "--trace", str(_write(tmp_path, TRACE)), "--cluster", "2x4", "--run", "fifo", "--run",
                 "las", "--out", str(tmp_path / "o"), "-q", "--unprofiled-jobs", "reject")
    assert r.returncode == 0, r.stderr
    for run in ("fifo_consolidated", "las_consolidated"):
        summary = json.loads((tmp_path / "o" / run / "summary.json").read_text())
        assert summary["jobs"] == 2
        assert any("1 job left out" in w and "'resnet5O' on 2 GPUs (1, first on line 3)" in w
                   for w in summary["warnings"]), summary["warnings"]


def test_a_bad_policy_value_is_one_line(tmp_path: Path) -> None:
    line = one_error_line(tesserae("simulate", "--jobs", "5", "--out", str(tmp_path), "--unprofiled-jobs", "skip"))
    assert "unprofiled-jobs" in line and "reject" in line


def test_the_shipped_gavel_trace_names_file_and_line(tmp_path: Path, shared_data: Path) -> None:
    trace = shared_data / "gavel" / "msr_seed0_23dbec.trace"
    profile = shared_data / "gavel" / "simulation_throughputs.json"
    common = ["simulate", "--trace", str(trace), "--format", "gavel", "--profile", str(profile), "--cluster",
              "2x4:k80,2x4:p100,2x4:v100", "--out", str(tmp_path / "o"), "-q"]
    line = one_error_line(tesserae(*common))
    assert f"{trace}, line 9, field 'scale_factor'" in line and "'CycleGAN' has no measurement for 8 GPUs" in line
    r = tesserae(*common, "--unprofiled-jobs", "reject")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["jobs"] == 8 and summary["completed"] == 8


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "trace.csv"
    p.write_text(text)
    return p
