"""Tenant queues through the `tesserae` command: Philly-format VCs become queues."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np


def tesserae(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tesserae.cli", *args], capture_output=True, text=True, timeout=300)


def philly_trace(path: Path, n: int = 120) -> Path:
    """A small Philly-format trace: VC 'big' submits most of the work in a burst, 'small' and 'mid' trickle."""
    rng = np.random.default_rng(3)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"])
        for i in range(n):
            vc = "big" if i % 3 else ("small" if i % 2 else "mid")
            minute = i // 4 if vc == "big" else i * 3
            g = int(rng.choice([1, 2, 4]))
            d = float(rng.integers(600, 7200))
            w.writerow([f"2017-10-09 {minute // 60:02d}:{minute % 60:02d}:00", d, g, d * g, vc])
    return path


def test_simulate_with_derived_vc_queues_writes_per_queue_metrics(tmp_path: Path) -> None:
    trace = philly_trace(tmp_path / "philly.csv")
    out = tmp_path / "run"
    r = tesserae("simulate", "--trace", str(trace), "--format", "philly", "--cluster", "2x4", "--policy", "las",
                 "--queue-config", "derived", "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    assert "tenant queues (quotas)" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 120
    names = {q["queue"] for q in summary["queues"]}
    assert names == {"big", "mid", "small"}
    assert sum(q["guarantee"] for q in summary["queues"]) == 8
    assert 0 < summary["jain_satisfaction"] <= 1
    with (out / "queues.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["queue"] for r in rows} == names
    assert abs(sum(float(r["share_of_gpu_time"]) for r in rows) - 1) < 1e-6


def test_compare_quotas_against_one_global_queue(tmp_path: Path) -> None:
    trace = philly_trace(tmp_path / "philly.csv")
    out = tmp_path / "cmp"
    r = tesserae("compare", "--trace", str(trace), "--format", "philly", "--cluster", "2x4", "--queue-config",
                 "derived", "--run", "fifo+global", "--run", "fifo", "--run", "fifo+strict", "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    s = {d.name: json.loads((d / "summary.json").read_text()) for d in out.iterdir() if d.is_dir()}
    assert set(s) == {"fifo_consolidated_global", "fifo_consolidated", "fifo_consolidated_strict"}
    assert s["fifo_consolidated_strict"]["borrowed_gpu_hours"] == 0
    # Quotas keep every VC at its guarantee whenever it has the demand; one FIFO queue does not.
    assert s["fifo_consolidated"]["guarantee_shortfall_gpu_hours"] < s["fifo_consolidated_global"][
        "guarantee_shortfall_gpu_hours"]
    assert s["fifo_consolidated_global"]["reclaims"] >= 0 and s["fifo_consolidated_global"]["tenancy"].startswith(
        "global")


def test_bad_queue_config_exits_2_naming_file_line_and_field(tmp_path: Path) -> None:
    cfg = tmp_path / "q.yaml"
    cfg.write_text("queues:\n  - name: a\n    guarantee: 4\n  - name: b\n    parent: nowhere\n")
    r = tesserae("simulate", "--jobs", "5", "--cluster", "1x4", "--queue-config", str(cfg), "--out",
                 str(tmp_path / "o"), "-q")
    assert r.returncode == 2
    assert f"{cfg}, line 5, field 'queues[1].parent': queue 'b' names an unknown parent 'nowhere'" in r.stderr
    assert "Traceback" not in r.stderr
    cfg.write_text("queues:\n  - name: a\n    guarantee: 4\n")
    trace = philly_trace(tmp_path / "philly.csv", n=6)
    r = tesserae("simulate", "--trace", str(trace), "--format", "philly", "--cluster", "1x4", "--queue-config",
                 str(cfg), "--out", str(tmp_path / "o"), "-q")
    assert r.returncode == 2
    assert "job 0: no queue for user" in r.stderr and "field 'queue'" in r.stderr
