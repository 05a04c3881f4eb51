"""``benchmarks/peer_speed.py``: the sentence under its table says where Gavel's simulator crosses the issue's
10 minutes among the measured sizes, and a Gavel size that cannot be laid out as the traces are is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from peer_speed_text import gavel_scale_text

REPO = Path(__file__).resolve().parents[1]


def _row(gpus: int, peer_cpu: float, peer_wall: float, ours_cpu: float, ours_wall: float) -> dict:
    return {"peer": "gavel", "policy": "max_min_fairness_perf", "trace": f"multi_g{gpus}", "gpus": gpus,
            "jobs": gpus * 50 // 3, "peer_finished": True, "ours_finished": True, "load": [1.0, 2.0],
            "peer_cpu": peer_cpu, "peer_wall": peer_wall, "ours_cpu": ours_cpu, "ours_wall": ours_wall}


def test_ten_minutes_is_bracketed_by_the_measured_sizes() -> None:
    rows = [_row(768, 79, 266, 44, 147), _row(3072, 388, 682, 167, 268), _row(4608, 650, 1100, 250, 400)]
    text = gavel_scale_text(rows[::-1])  # the rows' order does not matter
    assert "multi_g4608 (4608 GPUs, 76800 jobs that both finished)" in text
    assert "by wall time, under the loads shown, between 768 GPUs (266 s) and 3072 GPUs (682 s)" in text
    assert "by CPU time, its wall time on an idle core, between 3072 GPUs (388 s) and 4608 GPUs (650 s)" in text
    assert "at every size from 768 GPUs on" in text


def test_ten_minutes_not_reached_says_so_and_a_slower_size_is_not_counted_as_faster() -> None:
    rows = [_row(24, 6.0, 7.0, 6.5, 6.9), _row(48, 8.7, 45.8, 8.0, 38.1), _row(768, 79, 266, 44, 147)]
    text = gavel_scale_text(rows)
    assert "by wall time, under the loads shown, above the largest size measured, 768 GPUs (266 s): not measured" \
        in text
    assert "above the largest size measured, 768 GPUs (79 s): not measured" in text
    assert "at every size from 48 GPUs on" in text and "at 24)" not in text


def test_other_rows_and_unfinished_runs_are_left_out() -> None:
    stopped = {**_row(9216, 1500, 3000, 400, 700), "peer_finished": False}
    packed = {**_row(48, 877, 2927, 182, 580), "policy": "max_min_fairness_packed"}
    text = gavel_scale_text([_row(768, 79, 266, 44, 147), stopped, packed])
    assert "The largest Gavel size here: multi_g768" in text
    assert gavel_scale_text([packed]) == ""


def test_a_size_not_a_multiple_of_12_is_refused() -> None:
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "peer_speed.py"), "--gavel-size", "4096",
                        "--report"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "--gavel-size 4096: a Gavel size must be a positive multiple of 12" in r.stderr
