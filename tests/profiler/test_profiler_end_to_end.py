"""``tesserae profile`` end to end: real worker processes on the CPU, tiny models, short windows.

The profile written here is read back with ``load_profile`` and drives ``tesserae simulate``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tesserae.core.jobs import JobSpec
from tesserae.profiler.pool import WorkerPool
from tesserae.profiler.runner import (
    Measurement,
    MeasurementRun,
    ProfileConfig,
    ProfilerError,
    detect_device,
)
from tesserae.profiles.loader import load_profile
from tesserae.traces import write_canonical

HAS_TORCH = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed (pip install 'tesserae[profiler]'); "
                                 "the profiler needs it")
FAST = ("--size", "tiny", "--seconds", "0.5", "--warmup", "0.2", "--device", "cpu")
NO_RESTART = ("--restart-runs", "0")


def tesserae(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tesserae.cli", *args], capture_output=True, text=True,
                          timeout=300, env=None if env is None else {**os.environ, **env})


@needs_torch
def test_profile_alone_and_paired_then_simulate(tmp_path: Path) -> None:
    out = tmp_path / "new-folder" / "cpu.json"  # created by the command
    a, b = "gpt-small", "recommendation"
    r = tesserae("profile", "--models", f"{a},{b}", "--pairs", *FAST, "--restart-runs", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    doc = json.loads(out.read_text())
    assert doc["format"] == "tesserae-profile" and doc["reference_gpu_type"] == "cpu"
    gpu = doc["gpu"]
    assert gpu["gpu_type"] == "cpu" and gpu["name"] and gpu["driver"] == "n/a"
    assert gpu["torch_version"].startswith("2.") and gpu["date"][:2] == "20"
    assert {e["job_type"] for e in doc["entries"]} == {a, b}
    assert all(e["memory_gb"] is not None and e["memory_gb"] >= 0 for e in doc["entries"])
    assert len(doc["pairs"]) == 3 and not any(p["oom"] for p in doc["pairs"])  # a+a, a+b, b+b
    assert set(doc["skew"]) == {a, b}

    model = load_profile(out)
    assert model.measured and model.job_types() == sorted([a, b]) and model.gpu_types() == ["cpu"]
    solo_a, solo_b = model.rate(a, 1, "cpu"), model.rate(b, 1, "cpu")
    assert solo_a > 0 and solo_b > 0
    # The pair rates are the measured ones, read back in both directions. (Whether sharing one core
    # slowed a job depends on the machine's load: not asserted.)
    pair = next(p for p in doc["pairs"] if {p["job_type"], p["partner_type"]} == {a, b})
    own, other = (pair["throughput"], pair["partner_throughput"])
    if pair["job_type"] == b:
        own, other = other, own
    assert model.rate(a, 1, "cpu", partner=(b, 1)) == own > 0
    assert model.rate(b, 1, "cpu", partner=(a, 1)) == other > 0
    assert model.pair_fits(a, b, "cpu")

    # Restart costs: one row per model; the checkpoint holds the fp32 weights and both of Adam's
    # moments (12 bytes a parameter at least: both models train with Adam or AdamW).
    rows = {row["job_type"]: row for row in doc["restart"]}
    assert set(rows) == {a, b}
    for row in rows.values():
        assert row["parameters"] > 0 and row["checkpoint_bytes"] >= 12 * row["parameters"]
        assert row["startup_seconds"] > 0 and row["save_seconds"] >= 0 and row["restore_seconds"] >= 0
        cost = model.restart_cost(row["job_type"])
        assert cost is not None and cost.measured and cost.checkpoint_bytes == row["checkpoint_bytes"]

    trace = tmp_path / "trace.csv"
    jobs = [JobSpec(i, 60.0 * i, 1, (a, b)[i % 2], 600.0 * (solo_a, solo_b)[i % 2]) for i in range(4)]
    write_canonical(jobs, trace)
    run = tmp_path / "run"
    r = tesserae("simulate", "--profile", str(out), "--trace", str(trace), "--cluster", "1x1:cpu",
                 "--placement", "tesserae", "--packing", "--round-seconds", "600", "--restart-cost", "job",
                 "--out", str(run), "-q")
    assert r.returncode == 0, r.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] == 4 and summary["jobs"] == 4
    assert summary["restart_cost"] == "job" and summary["restart_cost_kind"] == "measured"
    assert summary["restart_seconds_by_type"][a] == pytest.approx(model.restart_seconds(a, 1))


@needs_torch
def test_two_gpu_counts_use_ddp_processes(tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two usable cores for two CPU 'GPUs'")
    out = tmp_path / "ddp.json"
    r = tesserae("profile", "--models", "recommendation", "--gpus", "2", *FAST, *NO_RESTART, "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    model = load_profile(out)
    assert model.gpu_counts("recommendation") == [2]
    assert model.rate("recommendation", 2, "cpu") > 0


@needs_torch
def test_out_of_memory_pair_is_recorded_not_a_crash(tmp_path: Path) -> None:
    out = tmp_path / "oom.json"
    r = tesserae("profile", "--models", "recommendation", "--pairs", *FAST, *NO_RESTART, "--out", str(out), "-q",
                 env={"TESSERAE_PROFILER_INJECT_OOM": "recommendation"})
    assert r.returncode == 0, r.stderr
    assert "OOM" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["pairs"][0]["oom"] is True and doc["pairs"][0]["throughput"] == 0.0
    model = load_profile(out)
    assert model.rate("recommendation", 1, "cpu") > 0
    assert model.rate("recommendation", 1, "cpu", partner=("recommendation", 1)) == 0.0
    assert not model.pair_fits("recommendation", "recommendation", "cpu")


def _one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_unknown_model_is_one_error_line(tmp_path: Path) -> None:
    line = _one_line_error(tesserae("profile", "--models", "resnet18,alexnet", "--out", str(tmp_path / "p.json")))
    assert "unknown model 'alexnet'" in line and "resnet18" in line
    line = _one_line_error(tesserae("profile", "--gpus", "one", "--out", str(tmp_path / "p.json")))
    assert "GPU counts" in line
    line = _one_line_error(tesserae("profile", "--models", "dcgan"))
    assert "--out" in line


@pytest.mark.parametrize("quiet", [("-q",), ()], ids=["quiet", "with progress"])
def test_missing_torch_is_one_error_line(tmp_path: Path, quiet: tuple[str, ...]) -> None:
    """Checked before the progress display is drawn: the one line is all that is printed."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no PyTorch in this test')\n")
    r = tesserae("profile", "--models", "dcgan", "--out", str(tmp_path / "p.json"), *quiet,
                 env={"PYTHONPATH": str(tmp_path / "site")})
    line = _one_line_error(r)
    assert "PyTorch cannot be imported" in line and "tesserae[profiler]" in line
    assert r.stdout == ""


@needs_torch
def test_a_crashing_worker_is_a_profiler_error_and_leaves_no_process() -> None:
    config = ProfileConfig(models=["dcgan"], size="tiny", seconds=0.2, warmup=0.0, timeout=60, device="cpu")
    with WorkerPool(timeout=60) as pool:
        device = detect_device(config, pool.probe())
        run = MeasurementRun(Measurement(("no-such-model",), 1), device, "tiny", config, pool)
        with pytest.raises(ProfilerError, match=r"no-such-model \(rank 0\) failed: KeyError.*catalogue\.py"):
            run.run()
        assert pool.live == {}
        zygote = pool.zygote
    assert zygote.poll() is not None


@needs_torch
def test_a_failing_restart_measurement_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    from tesserae.profiler.restart import RestartError, measure_restart

    with pytest.raises(RestartError, match="KeyError"):
        measure_restart("no-such-model", "tiny", "cpu", runs=1, checkpoint_dir=tmp_path, timeout=120)
    assert list(tmp_path.iterdir()) == []  # its checkpoint folder and log are removed


def test_bad_restart_options_are_one_error_line(tmp_path: Path) -> None:
    out = str(tmp_path / "p.json")
    line = _one_line_error(tesserae("profile", "--models", "dcgan", "--restart-runs", "-1", "--out", out))
    assert "--restart-runs must be at least 0" in line
    line = _one_line_error(tesserae("profile", "--models", "dcgan", "--checkpoint-dir", str(tmp_path / "nope"),
                                    "--out", out))
    assert "nope" in line and "folder not found" in line
