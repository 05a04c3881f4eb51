"""End-to-end tests through the `tesserae` command: real files in, real files out."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

SUMMARY_KEYS = {"jobs", "completed", "rejected", "avg_jct", "median_jct", "p95_jct", "p99_jct", "makespan",
                "utilization", "avg_queueing_delay", "preemptions", "migrations", "policy", "placement",
                "cluster_gpus", "scheduler_seconds"}
JOB_KEYS = ["job_id", "num_gpus", "submit_time", "first_start", "finish_time", "jct", "queueing_delay",
            "preemptions", "migrations", "gpu_seconds"]


def tesserae(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tesserae.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_simulate_tiresias_trace(tmp_path: Path, shared_data: Path) -> None:
    out = tmp_path / "run"
    r = tesserae("simulate", "--trace", str(shared_data / "tiresias" / "60_job.csv"), "--format", "tiresias",
                 "--cluster", "15x4", "--policy", "las", "--placement", "first-fit", "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["jobs"] == 60 and summary["completed"] == 60 and summary["cluster_gpus"] == 60
    assert summary["profile_kind"] == "model (not a measurement)"
    with (out / "jobs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 60
    assert set(JOB_KEYS) <= rows[0].keys()
    for row in rows:
        assert float(row["jct"]) == pytest.approx(float(row["finish_time"]) - float(row["submit_time"]))


def test_simulate_generated_default_is_deterministic(tmp_path: Path) -> None:
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        r = tesserae("simulate", "--jobs", "80", "--load", "0.9", "--cluster", "4x4", "--seed", "7",
                     "--policy", "srtf", "--out", str(out), "-q")
        assert r.returncode == 0, r.stderr
        outs.append(out)
    assert (outs[0] / "jobs.csv").read_text() == (outs[1] / "jobs.csv").read_text()
    a, b = (json.loads((o / "summary.json").read_text()) for o in outs)
    assert a["avg_jct"] == b["avg_jct"] and a["completed"] == 80


def test_compare_writes_table_plots_and_ratios(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    r = tesserae("compare", "--run", "fifo", "--run", "srtf:first-fit", "--jobs", "60", "--load", "1.5",
                 "--cluster", "2x4", "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    assert (out / "jct_cdf.png").stat().st_size > 1000
    assert (out / "timeline.png").stat().st_size > 1000
    with (out / "compare.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [row["label"] for row in rows] == ["fifo:consolidated", "srtf:first-fit"]
    assert float(rows[0]["avg_jct_ratio"]) == pytest.approx(1.0)
    ratio = float(rows[1]["avg_jct"]) / float(rows[0]["avg_jct"])
    assert float(rows[1]["avg_jct_ratio"]) == pytest.approx(ratio)
    for sub in ("fifo_consolidated", "srtf_first-fit"):
        assert (out / sub / "summary.json").exists()


def test_trace_info_and_convert_roundtrip(tmp_path: Path, shared_data: Path) -> None:
    src = shared_data / "tiresias" / "60_job.csv"
    r = tesserae("trace", "info", str(src), "--format", "tiresias", "--cluster", "15x4", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["jobs"] == 60
    for suffix in ("csv", "parquet"):
        out = tmp_path / f"t.{suffix}"
        r = tesserae("trace", "convert", str(src), "--format", "tiresias", "--out", str(out))
        assert r.returncode == 0, r.stderr
        a = tesserae("simulate", "--trace", str(src), "--format", "tiresias", "--cluster", "15x4",
                     "--out", str(tmp_path / "a"), "-q")
        b = tesserae("simulate", "--trace", str(out), "--format", "canonical", "--cluster", "15x4",
                     "--out", str(tmp_path / "b"), "-q")
        assert a.returncode == b.returncode == 0
        sa = json.loads((tmp_path / "a" / "summary.json").read_text())
        sb = json.loads((tmp_path / "b" / "summary.json").read_text())
        assert sa["avg_jct"] == pytest.approx(sb["avg_jct"])


@pytest.mark.parametrize(
    ("content", "fmt", "needle"),
    [
        ("job_id,num_gpu,submit_time,iterations,model_name,interval\n0,1,0,5,vgg19,3\n", "tiresias", "duration"),
        ("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,x,0,5,vgg19,10,3\n", "tiresias",
         "line 2"),
        ("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,5,vgg19,-10,3\n",
         "tiresias", "duration"),
        ("", "philly", "line 1"),
        ("job_id,num_gpu\n", "nonsense-format", "nonsense-format"),
    ],
)
def test_bad_trace_gives_one_clear_line(tmp_path: Path, content: str, fmt: str, needle: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    r = tesserae("simulate", "--trace", str(path), "--format", fmt, "--out", str(tmp_path / "o"), "-q")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert needle in r.stderr
    assert str(path) in r.stderr or fmt == "nonsense-format"
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("spec", ["16y4", "0x4", "4x", "abc", "4x4:,2x2"])
def test_bad_cluster_spec(tmp_path: Path, spec: str) -> None:
    r = tesserae("simulate", "--cluster", spec, "--jobs", "5", "--out", str(tmp_path / "o"), "-q")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "cluster" in r.stderr


def test_unknown_policy_and_missing_file(tmp_path: Path) -> None:
    r = tesserae("simulate", "--policy", "nope", "--jobs", "5", "--out", str(tmp_path / "o"), "-q")
    assert r.returncode == 2 and "unknown policy 'nope'" in r.stderr and "Traceback" not in r.stderr
    r = tesserae("simulate", "--trace", str(tmp_path / "missing.csv"), "--format", "tiresias",
                 "--out", str(tmp_path / "o"), "-q")
    assert r.returncode != 0 and "missing.csv" in r.stderr and "Traceback" not in r.stderr


# What `tesserae profile` writes by default on a CPU (--gpus 1): 1-GPU entries only.
ONE_GPU_PROFILE = {
    "format": "tesserae-profile", "version": 1,
    "gpu": {"name": "a test CPU", "driver": "n/a", "torch_version": "2.13.0", "date": "2026-01-01T00:00:00+00:00",
            "gpu_type": "cpu"},
    "reference_gpu_type": "cpu",
    "entries": [{"job_type": "resnet18", "num_gpus": 1, "gpu_type": "cpu", "consolidated": True, "throughput": 24.7,
                 "memory_gb": 0.072},
                {"job_type": "gpt-small", "num_gpus": 1, "gpu_type": "cpu", "consolidated": True, "throughput": 2.65,
                 "memory_gb": 0.112}],
    "pairs": [{"job_type": "resnet18", "num_gpus": 1, "partner_type": "gpt-small", "partner_num_gpus": 1,
               "gpu_type": "cpu", "throughput": 12.0, "partner_throughput": 1.5, "oom": False, "consolidated": True}],
    "skew": {"resnet18": 0.02, "gpt-small": 0.3},
}


def test_a_one_gpu_profile_simulates_with_a_one_gpu_mix(tmp_path: Path) -> None:
    """docs/profiler.md's path from `tesserae profile` (1-GPU entries) to `tesserae simulate`."""
    profile = tmp_path / "cpu.json"
    profile.write_text(json.dumps(ONE_GPU_PROFILE))
    base = ("simulate", "--profile", str(profile), "--cluster", "2x2:cpu", "--jobs", "40", "--load", "0.8", "-q")
    r = tesserae(*base, "--out", str(tmp_path / "default-mix"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "no job type measured on 2 GPUs" in r.stderr and "--gpu-mix 1:1" in r.stderr, r.stderr
    out = tmp_path / "one-gpu"
    r = tesserae(*base, "--gpu-mix", "1:1", "--placement", "tesserae", "--packing", "--out", str(out))
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 40 and summary["profile_kind"].startswith("measured")
    assert "1:1 GPU mix" in summary["workload"]
    with (out / "jobs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {row["num_gpus"] for row in rows} == {"1"} and {row["job_type"] for row in rows} == {"resnet18", "gpt-small"}
    r = tesserae("compare", "--run", "fifo", "--run", "las", *base[1:], "--gpu-mix", "1:0.5,2:0.x",
                 "--out", str(tmp_path / "cmp"))
    assert r.returncode == 2 and "entry '2:0.x'" in r.stderr and not (tmp_path / "cmp").exists()


def test_simulate_reports_the_commands_wall_time(tmp_path: Path) -> None:
    import re
    import time

    t0 = time.perf_counter()
    r = tesserae("simulate", "--jobs", "30", "--cluster", "2x4", "--out", str(tmp_path / "run"), "-q")
    elapsed = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    m = re.search(r"\(wall (\d+\.\d) s, of which simulating (\d+\.\d) s\)", r.stdout)
    assert m, r.stdout
    wall, simulating = float(m.group(1)), float(m.group(2))
    # The whole command (interpreter start, imports, workload, writing), not only the simulation loop.
    assert simulating <= wall <= elapsed + 0.05 and wall >= 0.5 * elapsed, (wall, simulating, elapsed)


def test_readme_trace_convert_writes_into_the_ignored_out_folder(tmp_path: Path, shared_data: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    line = next(ln for ln in (repo / "README.md").read_text().splitlines() if ln.startswith("tesserae trace convert"))
    args = line.split()[1:]
    out = Path(args[args.index("--out") + 1])
    assert out.parts[0] == "out" and "out/" in (repo / ".gitignore").read_text().split(), line
    args = [a.replace("../shared/data", str(shared_data)) for a in args]
    r = subprocess.run([sys.executable, "-m", "tesserae.cli", *args], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)  # a fresh clone has no out/ yet
    assert r.returncode == 0, r.stderr
    assert (tmp_path / out).stat().st_size > 0
