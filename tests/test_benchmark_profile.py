"""``benchmarks/round_latency.py --profile``: the per-step breakdown names frames that exist, and the
command runs end to end at a tiny size (the large sizes are the benchmark's, not a test's)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from round_latency import STEPS  # the step table the profile reports

REPO = Path(__file__).resolve().parents[1]


def test_every_step_opens_at_a_function_of_the_package() -> None:
    # A renamed function would silently move its time to "rest of decide": pin the names.
    sources = {p.name: p.read_text() for p in (REPO / "src" / "tesserae").rglob("*.py")}
    for label, frames in STEPS:
        for function, file in frames:
            texts = [sources[file]] if file else list(sources.values())
            assert any(re.search(rf"^\s*def {function}\(", t, re.M) for t in texts), (label, function, file)


def test_profile_reports_the_steps_of_a_small_decision() -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "round_latency.py"), "--profile", "--gpus",
                          "256", "--rounds", "3", "--configs", "tiresias-las:tesserae+packing", "--top", "5"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "3 decisions profiled" in out.stdout
    rows = re.findall(r"^\| ([^|]+) \| ([\d.]+)% \|", out.stdout, re.M)
    steps = {name.strip(): float(share) for name, share in rows}
    assert "packing" in steps, out.stdout
    assert abs(sum(steps.values()) - 100.0) < 0.5, steps
    one_line = subprocess.run([sys.executable, str(REPO / "benchmarks" / "round_latency.py"), "--profile",
                               "--gpus", "256", "--gpus", "1024", "--configs", "tiresias-las:tesserae+packing"],
                              capture_output=True, text=True, timeout=60)
    assert one_line.returncode != 0 and "one size" in one_line.stderr
